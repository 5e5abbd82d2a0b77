"""CarryOnNode's callback barrier in-process (issue 43): a callback that raises, a message
whose fields are not sane, a payload that is no message at all and a service callback that
fails leave the node spinning; services answer with a status and the reason; the node's
status counts what it refused. The executor run_node spins survives a take that fails."""

from __future__ import annotations

from rclpy.executors import Executor
from rclpy.serialization import serialize_message
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64, String

from carryon_common.barrier import GuardedSingleThreadedExecutor, failure_response
from carryon_common.calls import RosSession
from carryon_common.convert import msg_to_health
from carryon_common.core.config import NodeConfig
from carryon_common.core.errors import InvalidMessage
from carryon_common.core.status import implemented
from carryon_common.node import CarryOnNode
from carryon_interfaces.srv import GetStatus, SetTask, SimReset


class Toy(CarryOnNode):
    """Takes strings (raising on "boom"), widths and joint states; serves set_task and sim/reset."""

    def __init__(self, context) -> None:  # type: ignore[no-untyped-def]
        super().__init__(
            "toy_node", NodeConfig, capabilities=(implemented("toy", "t"),), namespace="carryon", context=context
        )
        self.words: list[str] = []
        self.widths: list[float] = []
        self.joints: list[JointState] = []
        self.create_subscription(String, "words", self._on_word, 10)
        self.create_subscription(Float64, "gripper/width", lambda m: self.widths.append(m.data), 10)
        self.create_subscription(JointState, "joint_states", lambda m, _info: self.joints.append(m), 10)
        self.create_service(SetTask, "set_task", self._on_set_task)
        self.create_service(SimReset, "sim/reset", self._on_reset)
        self.set_ready()

    def _on_word(self, msg: String) -> None:
        if msg.data == "boom":
            raise KeyError("boom")
        self.words.append(msg.data)

    def _on_set_task(self, request: SetTask.Request, response: SetTask.Response) -> SetTask.Response:
        if request.target == "crash":
            raise RuntimeError("a bug a request uncovered")
        response.message = f"ok {request.target}"
        return response

    def _on_reset(self, request: SimReset.Request, response: SimReset.Response) -> SimReset.Response:
        response.message = f"seed {request.seed}"
        return response


def _status(session: RosSession) -> tuple[str, ...]:
    answer = session.call(GetStatus, "/carryon/toy_node/get_status", GetStatus.Request(), 10.0)
    return msg_to_health(answer.status).backends


def test_nothing_a_message_holds_stops_the_node(ros, wait_until) -> None:  # type: ignore[no-untyped-def]
    node = ros.add(Toy(ros.context))
    with RosSession("barrier_probe") as session:
        words = session.node.create_publisher(String, "/carryon/words", 10)
        widths = session.node.create_publisher(Float64, "/carryon/gripper/width", 10)
        joints = session.node.create_publisher(JointState, "/carryon/joint_states", 10)
        assert wait_until(lambda: words.get_subscription_count() and joints.get_subscription_count(), 10.0)

        def spin_until(predicate):  # type: ignore[no-untyped-def]
            return wait_until(lambda: session.executor.spin_once(timeout_sec=0.01) or predicate(), 10.0)

        words.publish(String(data="boom"))  # the callback raises
        widths.publish(Float64(data=float("nan")))  # refused before the callback
        joints.publish(JointState(name=["a", "b"], position=[0.0, float("inf")]))
        cut = serialize_message(String(data="hello"))[:6]  # a payload that is no String
        words.publish(cut)
        words.publish(String(data="still here"))
        widths.publish(Float64(data=0.04))
        joints.publish(JointState(name=["a"], position=[0.1], velocity=[float("nan")]))  # velocity may be unknown
        assert spin_until(lambda: node.words == ["still here"] and node.widths == [0.04] and len(node.joints) == 1)

        crash = session.call(SetTask, "/carryon/set_task", SetTask.Request(target="crash"), 10.0)
        bad = session.call(SetTask, "/carryon/set_task", SetTask.Request(target="cup\u202e"), 10.0)
        negative = session.call(SimReset, "/carryon/sim/reset", SimReset.Request(seed=-1), 10.0)
        fine = session.call(SetTask, "/carryon/set_task", SetTask.Request(target="cup"), 10.0)
        backends = _status(session)

    assert crash.status == SetTask.Response.STATUS_INTERNAL_ERROR and "RuntimeError" in crash.message
    assert bad.status == SetTask.Response.STATUS_INVALID_ARGUMENT and "request.target" in bad.message
    assert negative.status == SimReset.Response.STATUS_INVALID_ARGUMENT and "request.seed" in negative.message
    assert (fine.status, fine.message) == (SetTask.Response.STATUS_OK, "ok cup")
    # NaN width, infinite joint, the cut payload, the bidirectional override, the negative seed
    assert node.refusals.refused == 5
    assert node.refusals.errors == 2  # the KeyError, the RuntimeError
    refused = next(b for b in backends if b.startswith("refused messages=5 "))
    assert "service /carryon/sim/reset: request.seed" in refused  # the last one, with its reason
    assert any(b.startswith("callback errors=2 ") for b in backends)


def test_a_failure_response_says_why_in_the_types_own_status() -> None:
    invalid = failure_response(SetTask, InvalidMessage("target: too long"), "target: too long")
    assert (invalid.status, invalid.message) == (SetTask.Response.STATUS_INVALID_ARGUMENT, "target: too long")
    internal = failure_response(SetTask, ValueError("x"), "internal error")
    assert internal.status == SetTask.Response.STATUS_INTERNAL_ERROR
    assert isinstance(failure_response(GetStatus, ValueError("x"), "r"), GetStatus.Response)  # no status field


class _FailingHandle:
    """A subscription handle whose take fails, as rclpy's does when rmw cannot deserialize."""

    def __enter__(self) -> _FailingHandle:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None

    def take_message(self, *_args: object) -> None:
        raise RuntimeError("failed to take: cannot deserialize")


class _Entity:
    topic = "/carryon/words"
    handle = _FailingHandle()
    msg_type, raw = String, False


def test_the_executor_reports_a_take_that_fails_and_carries_on(ros) -> None:  # type: ignore[no-untyped-def]
    # The executor overrides rclpy's private Executor._take_subscription / _take_service.
    assert hasattr(Executor, "_take_subscription") and hasattr(Executor, "_take_service")
    node = Toy(ros.context)
    executor = GuardedSingleThreadedExecutor(context=ros.context)
    executor.add_node(node)  # only to find the node's barrier; never spun here
    try:
        assert executor._take_subscription(_Entity()) is None
    finally:
        executor.shutdown(timeout_sec=1.0)
        node.destroy_node()
    assert node.refusals.errors == 1 and "cannot deserialize" in node.refusals.last_error
