"""The bench's side of the graph for `carryon bench faults` (bench/faults.py): a ROS session
that moves the arm through the shield, engages and releases the e-stop, forges messages on
the command topics and watches the tool's pose in simulation time."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from carryon_bringup.core.run_keys import COMMAND_KEY
from carryon_bringup.graph_run import GraphRun

REST_WINDOW_S = 0.25  # the tool is at rest when it moved less than REST_MOVE_M over this (sim s)
REST_MOVE_M = 0.0005
EXECUTED_M = 0.005  # a forged or replayed command that moves the tool more than this was executed


class FaultProbe:
    """The bench's side of the graph: moves the arm through the shield, engages and
    releases the e-stop, forges messages, watches the tool."""

    def __init__(self, graph: GraphRun, namespace: str) -> None:
        from geometry_msgs.msg import PoseStamped
        from rosgraph_msgs.msg import Clock
        from std_msgs.msg import String

        from carryon_common.calls import RosSession
        from carryon_common.core.command_auth import load_key
        from carryon_common.node import latched_qos
        from carryon_interfaces.msg import ActionChunk, EstopState, ShieldEvent

        self.graph, self.ns = graph, f"/{namespace}/"
        self.key = load_key(graph.keys_dir / COMMAND_KEY)  # the bench plays the shield in one probe
        self.session = RosSession("faults_probe", domain_id=graph.domain_id).__enter__()
        node = self.session.node
        self.sim_now = 0.0
        self.clocks = 0  # /clock messages received
        self.poses: list[tuple[float, np.ndarray]] = []
        self.released: list[Any] = []
        self.rejections: list[str] = []
        self.estop_states: list[Any] = []
        node.create_subscription(Clock, "/clock", self._on_clock, 10)
        node.create_subscription(PoseStamped, self.ns + "ee_pose", self._on_pose, 50)
        node.create_subscription(ActionChunk, self.ns + "shield/chunk", self.released.append, 10)
        self.events: list[str] = []  # the shield's reasons
        self.event_msgs: list[Any] = []  # and its whole events
        self._events_sub = node.create_subscription(ShieldEvent, self.ns + "shield/events", self._on_event, 50)
        self.policy_chunks = 0
        node.create_subscription(ActionChunk, self.ns + "policy/chunk", self._on_policy_chunk, 10)
        node.create_subscription(String, self.ns + "driver/rejections", lambda m: self.rejections.append(m.data), 50)
        node.create_subscription(EstopState, self.ns + "estop/state", self.estop_states.append, latched_qos())
        self.policy_pub = node.create_publisher(ActionChunk, self.ns + "policy/chunk", 10)
        self.forged_pub = node.create_publisher(ActionChunk, self.ns + "shield/chunk", 10)
        # Latched like the shield's own publisher: a volatile one would never reach the driver's
        # transient-local subscription, and the forgery would be stopped by QoS, not by the driver.
        self.forged_estop_pub = node.create_publisher(EstopState, self.ns + "estop/state", latched_qos())
        self.next_id = 1_000_000
        self.direction = 1.0

    def close(self) -> None:
        self.session.close()

    def connect(self, timeout_s: float = 30.0) -> None:
        """Wait until the simulator's clock and poses arrive and DDS has matched this session
        with the shield both ways (its chunk subscription, its events): a chunk published
        before the match is lost without a word, and a probe would read the silence as the
        shield's."""

        def connected() -> bool:
            # This session subscribes to policy/chunk itself: the shield is a second match.
            shield_listens = self.policy_pub.get_subscription_count() >= 2
            return (
                shield_listens
                and self._events_sub.get_publisher_count() >= 1
                and len(self.poses) > 5
                and self.sim_now > 0.0
            )

        if not self.spin(timeout_s, connected):
            raise RuntimeError(
                f"the graph did not connect in {timeout_s:g} s: policy/chunk subscribers "
                f"{self.policy_pub.get_subscription_count()} (this session's own included), shield/events "
                f"publishers {self._events_sub.get_publisher_count()}, tool poses {len(self.poses)}, "
                f"sim time {self.sim_now:g}"
            )

    def _on_event(self, msg: Any) -> None:
        self.events.append(msg.reason)
        self.event_msgs.append(msg)

    def _on_policy_chunk(self, _msg: Any) -> None:
        self.policy_chunks += 1

    def _on_clock(self, msg: Any) -> None:
        self.sim_now = msg.clock.sec + msg.clock.nanosec * 1e-9
        self.clocks += 1

    def fresh_clock(self, timeout_s: float = 5.0) -> float:
        """The sim time of the next /clock message, as soon as it arrives: a fault injected
        now happens at most its delivery later (the simulator publishes its clock once per
        control period, so between two messages `sim_now` is up to a period behind)."""
        seen = self.clocks
        if not self.spin(timeout_s, lambda: self.clocks != seen):
            raise RuntimeError(f"no /clock message in {timeout_s:g} s")
        return self.sim_now

    def _on_pose(self, msg: Any) -> None:
        p = msg.pose.position
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        self.poses.append((stamp, np.array([p.x, p.y, p.z])))
        del self.poses[:-400]

    def spin(self, seconds: float, until: Callable[[], bool] = lambda: False) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.session.executor.spin_once(timeout_sec=0.01)
            if until():
                return True
        return until()

    def still(self) -> bool:
        """The tool moved less than REST_MOVE_M over the last REST_WINDOW_S of sim time."""
        if not self.poses or self.poses[-1][0] - self.poses[0][0] < REST_WINDOW_S:
            return False
        last_s, last = self.poses[-1]
        recent = [p for t, p in self.poses if t >= last_s - REST_WINDOW_S]
        return max(float(np.linalg.norm(p - last)) for p in recent) < REST_MOVE_M

    def tool(self) -> np.ndarray:
        return self.poses[-1][1].copy()

    def chunk(self, steps: int, step_m: float) -> Any:
        """A DELTA chunk moving the tool sideways (alternating directions between trials)."""
        from carryon_common import convert
        from carryon_common.core.chunk import Chunk, ChunkSource, Convention

        self.next_id += 1
        positions = np.tile([0.0, self.direction * step_m, 0.0], (steps, 1))
        rotations, gripper = np.zeros((steps, 3)), np.zeros(steps)
        source, convention = ChunkSource.OPERATOR, Convention.DELTA
        chunk = Chunk(
            self.next_id,
            "",
            source,
            convention,
            "world",
            0.05,
            self.next_id,
            self.sim_now,
            positions,
            rotations,
            gripper,
        )
        return convert.chunk_to_msg(chunk, convert.time_to_msg(self.sim_now))

    def start_moving(self) -> bool:
        """A 3 s chunk through the shield; True once the tool has moved 1 cm. Sent up to three
        times: just after start-up the shield may not have grounded its first frames yet."""
        self.direction = -self.direction
        start = self.tool()
        for _ in range(3):
            self.policy_pub.publish(self.chunk(60, 0.0025))
            if self.spin(5.0, lambda: float(np.linalg.norm(self.tool() - start)) > 0.01):
                return True
        return False

    def time_to_rest(self, fault_s: float, timeout_s: float = 5.0, wall_limit_s: float = 120.0) -> float:
        """Sim seconds from `fault_s` to the start of the first REST_WINDOW_S of stillness;
        inf when the tool is not at rest `timeout_s` of sim time after the fault. The wait is
        in sim time: a simulation that falls behind real time on a loaded machine (it waits
        for the CPU) must not turn a stop into a missing one. `wall_limit_s` bounds a stalled
        simulation."""

        seen: dict[float, float | None] = {}  # the answer for the newest pose stamp: asked every 10 ms

        def at_rest() -> float | None:
            newest = self.poses[-1][0] if self.poses else -math.inf
            if newest not in seen:
                seen.clear()
                seen[newest] = rest_from(newest)
            return seen[newest]

        def rest_from(_newest: float) -> float | None:
            after = [(t, p) for t, p in self.poses if t >= fault_s]
            for i, (t, p) in enumerate(after):
                window = [q for s, q in after[i:] if s - t <= REST_WINDOW_S]
                if after[-1][0] - t < REST_WINDOW_S:
                    return None
                if max(float(np.linalg.norm(q - p)) for q in window) < REST_MOVE_M:
                    return t - fault_s
            return None

        self.spin(wall_limit_s, lambda: at_rest() is not None or self.sim_now > fault_s + timeout_s + REST_WINDOW_S)
        rest = at_rest()
        return math.inf if rest is None else rest

    def estop(self, active: bool, reason: str) -> None:
        from carryon_interfaces.srv import SetEstop

        request = SetEstop.Request(active=active, reason=reason, source="bench")
        services = [self.ns + "estop/set"] + ([self.ns + "driver/estop/set"] if active else [])
        answers = self.session.call_many([(SetEstop, s, request) for s in services], 10.0, resend_s=1.0)
        if any(a is None or a.status != 0 for a in answers):
            raise RuntimeError(f"e-stop {'engage' if active else 'release'} failed: {answers}")
