"""The planner's observe over ROS (ros_dispatch.py) when perception says no camera sees the
location: it asks recovery_node's `look` skill to move the wrist camera over it, then reads
the scenes again; a failed or disabled look reports that it could not see, and why."""

from __future__ import annotations

import threading
import time
from typing import Any

from rclpy.action import ActionServer
from rclpy.parameter import Parameter

from carryon_common import convert as common_convert
from carryon_common.core import names
from carryon_common.node import CarryOnNode
from carryon_interfaces.action import Recover
from carryon_interfaces.msg import PerceivedObject, PerceivedScene
from carryon_interfaces.srv import SetTask
from carryon_planner.core.config import PlannerConfig
from carryon_planner.core.plan import PlannedSubtask
from carryon_planner.ros_dispatch import RosDispatch, Sensors

OBSERVE = PlannedSubtask(id="s1", kind="observe", objective="see the dining table", target="dining_table")


class Robot:
    """Perception (a scene every 50 ms into the planner's Sensors) and recovery_node's Recover
    server: until a look at the dining table succeeds, the scenes say no camera sees it."""

    def __init__(self, ros: Any, node: CarryOnNode, sensors: Sensors, *, look_succeeds: bool = True) -> None:
        self.node, self.sensors, self.look_succeeds = node, sensors, look_succeeds
        self.looking_at = ""
        self.goals: list[tuple[str, str]] = []
        peer = ros.peer("fake_recovery")
        self.server = ActionServer(peer, Recover, names.RECOVER, execute_callback=self._recover)
        self.tasks: list[tuple[str, str]] = []  # the shield's SetTask requests: (subtask, exempt target)
        peer.create_service(SetTask, names.SHIELD_SET_TASK, self._set_task)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._perceive, daemon=True)
        self._thread.start()

    def _set_task(self, request: SetTask.Request, response: SetTask.Response) -> SetTask.Response:
        self.tasks.append((request.subtask_id, request.target))
        response.status = SetTask.Response.STATUS_OK
        return response

    def _recover(self, goal_handle: Any) -> Recover.Result:
        goal = goal_handle.request
        self.goals.append((goal.skill, goal.subtask.target))
        result = Recover.Result(skill=goal.skill)
        if self.look_succeeds:
            self.looking_at = goal.subtask.target
            result.outcome, result.message = Recover.Result.OUTCOME_RESUME, f"looking at {goal.subtask.target}"
            goal_handle.succeed()
        else:
            result.outcome, result.message = Recover.Result.OUTCOME_ABORTED, "look at dining_table: IK failed"
            goal_handle.abort()
        return result

    def _perceive(self) -> None:
        while not self._stop.wait(0.05):
            scene = PerceivedScene()
            scene.header.stamp = common_convert.time_to_msg(self.node.now_s())
            if self.looking_at == "dining_table":
                bowl = PerceivedObject(track_id=3, label="bowl", support="table", region="dining_table")
                bowl.centroid.x, bowl.centroid.y, bowl.centroid.z = 0.55, -0.3, 0.45
                bowl.bbox_max.x = bowl.bbox_max.y = 0.1
                scene.objects = [bowl]
            else:
                scene.objects = [PerceivedObject(track_id=4, label="bottle", support="table", region="")]
                scene.out_of_view_locations = ["dining_table"]
            self.sensors.keep_scene(scene)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)


def dispatch(ros: Any, **params: Any) -> tuple[RosDispatch, CarryOnNode, Sensors]:
    overrides = [Parameter(k, value=v) for k, v in {"service_timeout_s": 5.0, **params}.items()]
    node = CarryOnNode(names.PLANNER_NODE, PlannerConfig, capabilities=(), namespace="carryon",
                       context=ros.context, parameter_overrides=overrides)  # fmt: skip
    ros.add(node)
    sensors = Sensors()
    return RosDispatch(node, node.config, sensors, cancelled=lambda: False), node, sensors


def test_a_location_out_of_view_is_looked_at_then_reported(ros) -> None:  # type: ignore[no-untyped-def]
    runner, node, sensors = dispatch(ros)
    robot = Robot(ros, node, sensors)
    try:
        report = runner.observe(OBSERVE)
    finally:
        robot.stop()
    assert robot.goals == [(names.LOOK_SKILL, "dining_table")]
    assert robot.tasks == [("s1", "")]  # the shield first: this subtask, nothing exempt
    assert report.succeeded, report.message
    assert report.revealed == {"dining_table": ("bowl",)}


def test_a_failed_look_says_it_could_not_see_and_why(ros) -> None:  # type: ignore[no-untyped-def]
    runner, node, sensors = dispatch(ros)
    robot = Robot(ros, node, sensors, look_succeeds=False)
    try:
        report = runner.observe(OBSERVE)
    finally:
        robot.stop()
    assert not report.succeeded and robot.goals == [(names.LOOK_SKILL, "dining_table")]
    assert "could not see dining_table" in report.message and "IK failed" in report.message


def test_without_the_look_motion_nothing_moves(ros) -> None:  # type: ignore[no-untyped-def]
    runner, node, sensors = dispatch(ros, observe_look=False)
    robot = Robot(ros, node, sensors)
    began = time.monotonic()
    try:
        report = runner.observe(OBSERVE)
    finally:
        robot.stop()
    assert not report.succeeded and robot.goals == [] and time.monotonic() - began < 5.0
    assert "no camera sees its region" in report.message
