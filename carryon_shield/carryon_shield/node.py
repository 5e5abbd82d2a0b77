"""shield_node: the gate every motion command passes on its way to the robot driver.

Implemented now: the emergency stop (latched, published transient-local) and the
fail-closed gate: every incoming chunk is answered with a ShieldEvent, and while the
collision filter is missing (issue #6) nothing is released.
"""

from __future__ import annotations

import time
from typing import Any

from visualization_msgs.msg import MarkerArray

from carryon_common import convert as common_convert
from carryon_common.core import names
from carryon_common.core.chunk import InvalidChunk
from carryon_common.core.status import implemented, planned
from carryon_common.node import CarryOnNode, latched_qos, run_node
from carryon_interfaces.msg import ActionChunk, EstopState, ShieldEvent
from carryon_interfaces.srv import SetEstop, SetTask
from carryon_shield import convert
from carryon_shield.core.config import ShieldConfig
from carryon_shield.core.gate import Decision, ShieldGate

CAPABILITIES = (
    implemented("shield.estop", "latched emergency stop: estop/set service, estop/state topic"),
    implemented(
        "shield.fail_closed",
        "every chunk answered with a ShieldEvent; invalid, stale or unfiltered chunks never released",
    ),
    planned("shield.filter", 6, "predict gripper/carried-object motion and release the safe prefix or a retreat"),
    planned("shield.grounding", 6, "obstacle sets from RGB-D and masks (sim_masks, text_prompted)"),
    planned("shield.set_task", 6, "exempt target, source support and destination from obstacles"),
    planned("shield.markers", 6, "rviz/Foxglove markers of released, blocked and retreat segments"),
)


class ShieldNode(CarryOnNode):
    def __init__(self, **node_kwargs: Any) -> None:
        super().__init__(names.SHIELD_NODE, ShieldConfig, capabilities=CAPABILITIES, **node_kwargs)
        self.set_backends({"grounder": self.config.grounder})
        self.gate = ShieldGate(
            max_observation_age_s=self.config.max_observation_age_s,
            threshold_m=self.config.distance_threshold_m,
            estop_active=self.config.estop_engaged_at_start,
        )
        self.safe_pub = self.create_publisher(ActionChunk, names.SHIELD_CHUNK, 10)
        self.event_pub = self.create_publisher(ShieldEvent, names.SHIELD_EVENTS, 10)
        self.marker_pub = self.create_publisher(MarkerArray, names.SHIELD_MARKERS, 10)
        self.estop_pub = self.create_publisher(EstopState, names.ESTOP_STATE, latched_qos())
        engaged = self.config.estop_engaged_at_start
        reason = "engaged at start-up (estop_engaged_at_start)" if engaged else "not engaged since start-up"
        self._estop = EstopState(active=engaged, reason=reason, source=self.get_name())
        self._estop.header.stamp = self.get_clock().now().to_msg()
        self.estop_pub.publish(self._estop)
        self.create_service(SetEstop, names.ESTOP_SET, self._on_set_estop)
        self.serve_not_implemented(SetTask, names.SHIELD_SET_TASK, "shield.set_task")
        for topic in (names.POLICY_CHUNK, names.RECOVERY_CHUNK):
            self.create_subscription(ActionChunk, topic, self._on_chunk, 10)
        self.set_ready()

    def _on_set_estop(self, request: SetEstop.Request, response: SetEstop.Response) -> SetEstop.Response:
        self.gate.estop_active = request.active
        self._estop = EstopState(active=request.active, reason=request.reason, source=request.source or "unknown")
        self._estop.header.stamp = self.get_clock().now().to_msg()
        self.estop_pub.publish(self._estop)
        # rclpy ties a logging call site to one severity: one call per severity.
        if request.active:
            self.get_logger().warning(f"emergency stop ENGAGED by {self._estop.source}: {request.reason}")
        else:
            self.get_logger().info(f"emergency stop released by {self._estop.source}: {request.reason}")
        response.status = SetEstop.Response.STATUS_OK
        response.message = "emergency stop engaged" if request.active else "emergency stop released"
        response.state = self._estop
        return response

    def _on_chunk(self, msg: ActionChunk) -> None:
        started = time.perf_counter()
        now_s = self.get_clock().now().nanoseconds * 1e-9
        try:
            decision = self.gate.decide(common_convert.chunk_from_msg(msg), now_s)
        except InvalidChunk as exc:
            decision = self.gate.reject(
                msg.chunk_id, msg.subtask_id, len(msg.steps), Decision.REJECTED_INVALID, str(exc)
            )
        if decision.released is not None:
            self.safe_pub.publish(common_convert.chunk_to_msg(decision.released, self.get_clock().now().to_msg()))
        event = convert.decision_to_event(decision, self.get_clock().now().to_msg())
        event.compute_time_s = time.perf_counter() - started
        self.event_pub.publish(event)


def main() -> int:
    return run_node(ShieldNode)
