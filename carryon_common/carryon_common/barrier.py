"""No single message can crash a node (issue 43): the barrier around every subscription and
service callback a CarryOn node makes, and the executor that run_node spins.

rclpy re-raises an exception from any callback out of `executor.spin()`, and run_node then
ends the process, so one malformed message used to take a node (and, under `carryon up`,
the graph) down. `CallbackBarrier` (a base of CarryOnNode) makes every subscription raw and
deserializes inside the barrier, so a payload that is not a valid message (rmw would drop it
without a word) is refused and counted; it checks the fields of the types in
`message_checks.MESSAGE_LIMITS` before the callback sees them; and it catches whatever the
callback raises. A refused service request is answered STATUS_INVALID_ARGUMENT (a callback
error STATUS_INTERNAL_ERROR) with the reason, never left unanswered. `guarded_executor`
covers what happens outside a callback: a request that cannot be taken (deserialized) and a
response that cannot be sent. Both log each (topic or service, exception type) once in full,
then a count (core/refusals.py); the node's status shows the counts and the last reason.
"""

from __future__ import annotations

import inspect
import time
import traceback
from collections.abc import Callable
from typing import Any

from rclpy.executors import Executor, MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.logging import get_logger
from rclpy.serialization import deserialize_message

from carryon_common.core import message_checks
from carryon_common.core.errors import InvalidMessage
from carryon_common.core.refusals import Refusals, printable


class CallbackBarrier:
    """Mixin for rclpy's Node: subscriptions and services made through it are guarded."""

    @property
    def refusals(self) -> Refusals:
        # Made on first use: rclpy's Node.__init__ makes its parameter services (through
        # create_service, so guarded too) before a subclass's __init__ runs.
        found: Refusals | None = self.__dict__.get("_refusals")
        if found is None:
            found = self.__dict__.setdefault("_refusals", Refusals())
        return found

    def create_subscription(  # type: ignore[no-untyped-def]
        self, msg_type, topic, callback, qos_profile, *, raw: bool = False, **kwargs
    ):
        """rclpy's create_subscription, the callback behind the barrier (see the module)."""
        guarded = self._guard_subscription(msg_type, self._where("topic", topic), callback, raw=raw)
        qos = qos_profile  # the caller's, from the QoS table (test_qos_table reads this call)
        return super().create_subscription(msg_type, topic, guarded, qos, raw=True, **kwargs)  # type: ignore[misc]

    def create_service(self, srv_type, srv_name, callback, **kwargs):  # type: ignore[no-untyped-def]
        """rclpy's create_service, the callback behind the barrier (see the module)."""
        guarded = self._guard_service(srv_type, self._where("service", srv_name), callback)
        return super().create_service(srv_type, srv_name, guarded, **kwargs)  # type: ignore[misc]

    def refuse(self, where: str, exc: BaseException) -> str:
        """Count and log a message refused at `where` (or a callback's error on it); the
        reason to answer with."""
        invalid = isinstance(exc, InvalidMessage)
        reason = printable(str(exc) or type(exc).__name__)
        report = self.refusals.record(where, type(exc).__name__, reason, time.monotonic(), invalid=invalid)
        logger = self.get_logger()  # type: ignore[attr-defined]
        if report.first and invalid:
            logger.warning(f"{where}: message refused: {reason} (further ones counted in the status)")
        elif report.first:
            trace = printable("".join(traceback.format_exception(exc)), 20_000, keep_newlines=True)
            logger.error(f"{where}: callback failed, message dropped, node carries on:\n{trace}")
        elif report.suppressed:
            logger.warning(f"{where}: {report.suppressed} more {type(exc).__name__} since the last report: {reason}")
        return reason if invalid else f"internal error ({type(exc).__name__}): {reason}; the node logged a traceback"

    def _where(self, kind: str, name: str) -> str:
        try:
            resolved = self.resolve_topic_name(name, only_expand=True)  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - rclpy reports a bad name itself when the entity is made
            resolved = name
        return f"{kind} {resolved}"

    def _guard_subscription(self, msg_type: Any, where: str, callback: Callable[..., None], *, raw: bool) -> Any:
        limits = None if raw else message_checks.limits_on_arrival(msg_type)

        def deliver(data: Any, *info: Any) -> None:
            try:
                msg = data if raw else _deserialize(data, msg_type)
                if limits is not None:
                    message_checks.check_fields(msg, limits)
                callback(msg, *info)
            except Exception as exc:  # noqa: BLE001 - the barrier: counted, logged, the node carries on
                self.refuse(where, exc)

        if not _takes_info(callback):
            return deliver  # binds one argument: rclpy passes the message alone

        def deliver_with_info(data: Any, info: Any) -> None:
            deliver(data, info)

        return deliver_with_info

    def _guard_service(self, srv_type: Any, where: str, callback: Callable[[Any, Any], Any]) -> Any:
        limits = message_checks.limits_on_arrival(srv_type.Request)

        def serve(request: Any, response: Any) -> Any:
            try:
                if limits is not None:
                    message_checks.check_fields(request, limits, "request.")
                answer = callback(request, response)
                if not isinstance(answer, srv_type.Response):
                    raise TypeError(f"callback returned {type(answer).__name__}, not a {srv_type.__name__} response")
                return answer
            except Exception as exc:  # noqa: BLE001 - the barrier: the request is answered, the node carries on
                return failure_response(srv_type, exc, self.refuse(where, exc))

        return serve


def failure_response(srv_type: Any, exc: BaseException, reason: str) -> Any:
    """A fresh response saying why the request failed: STATUS_INVALID_ARGUMENT for an invalid
    message, else STATUS_INTERNAL_ERROR, when the type has them (else its defaults)."""
    response = srv_type.Response()
    status = "STATUS_INVALID_ARGUMENT" if isinstance(exc, InvalidMessage) else "STATUS_INTERNAL_ERROR"
    if hasattr(response, "status") and hasattr(response, status):
        response.status = getattr(response, status)
    if hasattr(response, "message") and isinstance(response.message, str):
        response.message = reason
    return response


def _deserialize(data: bytes, msg_type: Any) -> Any:
    try:
        return deserialize_message(data, msg_type)
    except Exception as exc:  # noqa: BLE001 - rmw's errors have no common type
        raise InvalidMessage(f"{len(data)} bytes that are not a valid {msg_type.__name__}: {exc}") from None


def _takes_info(callback: Callable[..., Any]) -> bool:
    """Whether rclpy would call `callback` with (message, MessageInfo), as it decides it."""
    try:
        inspect.signature(callback).bind(object())
    except TypeError:
        return True
    return False


class _GuardedTakes:
    """An executor that never lets a message escape as an exception: a subscription or
    service whose message cannot be taken, or whose response cannot be sent, is reported to
    its node's barrier and skipped. (rclpy's Executor._take_* are private API, pinned by
    test_message_barrier.) Without this, a failed take also left the entity's callback
    group marked busy, so every callback in that group stopped for good."""

    def _take_subscription(self, sub: Any) -> Any:
        return self._guarded(f"topic {sub.topic}", super()._take_subscription, sub)  # type: ignore[misc]

    def _take_service(self, srv: Any) -> Any:
        return self._guarded(f"service {srv.srv_name}", super()._take_service, srv)  # type: ignore[misc]

    def _guarded(self, where: str, take: Callable[[Any], Any], entity: Any) -> Any:
        try:
            execute = take(entity)
        except Exception as exc:  # noqa: BLE001 - reported, and the entity stays in service
            self._report(where, exc)
            return None
        if execute is None:
            return None

        async def guarded() -> None:
            try:
                await execute()
            except Exception as exc:  # noqa: BLE001 - e.g. a response that cannot be serialized
                self._report(where, exc)

        return guarded

    def _report(self, where: str, exc: BaseException) -> None:
        barriers = [n for n in self.get_nodes() if isinstance(n, CallbackBarrier)]  # type: ignore[attr-defined]
        if barriers:
            barriers[0].refuse(where, exc)
        else:
            get_logger("carryon.executor").error(f"{where}: {printable(str(exc))}")


class GuardedSingleThreadedExecutor(_GuardedTakes, SingleThreadedExecutor):
    """SingleThreadedExecutor behind the barrier."""


class GuardedMultiThreadedExecutor(_GuardedTakes, MultiThreadedExecutor):
    """MultiThreadedExecutor behind the barrier."""


def guarded_executor(threads: int) -> Executor:
    """The executor run_node spins: `threads` > 1 a multi-threaded one (see run_node)."""
    return GuardedMultiThreadedExecutor(num_threads=threads) if threads > 1 else GuardedSingleThreadedExecutor()
