"""Real-time scheduling for a node's control path (graph.yaml `realtime_priority`).

On a small or loaded machine an ordinary process waits for a core behind every other one:
the shield's release of a chunk waited tens of milliseconds behind perception and the
simulator (`carryon bench latency`: p99 93-137 ms). Robot software gives its control
path a real-time priority for this, as ros2_control does for its control loop: the
launchers pass graph.yaml's `realtime_priority` to the node in
`CARRYON_REALTIME_PRIORITY`, and `run_node` puts the node's main thread on SCHED_FIFO at
that priority *before* ROS starts, so the threads started afterwards get it too: the DDS
threads that receive the chunks, and the node's own workers (a worker at ordinary
priority was preempted while it held the GIL, and the real-time decision waited for it).
Libraries imported earlier (numpy's BLAS threads) keep ordinary scheduling. Give it only
to a node whose work is small (the shield: 17 % of a core in `carryon bench latency`).
Linux caps real-time threads at 95 % of each second (kernel.sched_rt_runtime_us), so a
runaway one cannot lock the machine.

It needs the privilege (root, CAP_SYS_NICE, or an `rtprio` limit in
/etc/security/limits.conf: docs/robot.md); without it the node runs at ordinary priority
and says so once on stderr (its log) and in its status.

A node whose work is large but whose *sending* is on the control path (policy_node: the
model runs for tens or hundreds of milliseconds, then the chunk goes out) runs ordinary and
raises only the sending thread for the send: `RealtimeSection`. Without it the policy
process was preempted between DDS's write stamp and the send on a loaded machine, and the
chunk reached the shield 17-24 ms after it was written (`carryon bench latency`).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from carryon_common.core.names import REALTIME_PRIORITY_ENV


def requested_priority(environ: Mapping[str, str] | None = None) -> int:
    """The SCHED_FIFO priority asked for (0: none). A malformed value is an error, not a
    silent fallback: the launcher wrote it from a validated graph.yaml."""
    text = (os.environ if environ is None else environ).get(REALTIME_PRIORITY_ENV, "").strip()
    if not text:
        return 0
    try:
        priority = int(text)
    except ValueError:
        raise ValueError(f"{REALTIME_PRIORITY_ENV}={text!r}: not an integer (1-99, or 0 for none)") from None
    if not 0 <= priority <= 99:
        raise ValueError(f"{REALTIME_PRIORITY_ENV}={priority}: out of range (1-99, or 0 for none)")
    return priority


def apply_realtime_priority(priority: int) -> str:
    """Put the calling thread on SCHED_FIFO at `priority` (threads it starts inherit it).
    Returns what the status reports: 'SCHED_FIFO <n>', 'normal' (none asked for) or
    'normal (SCHED_FIFO <n> not permitted: ...)'."""
    if priority <= 0:
        return "normal"
    if not hasattr(os, "sched_setscheduler"):
        return f"normal (SCHED_FIFO {priority} not available on {sys.platform})"
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except OSError as exc:  # PermissionError without the privilege; EINVAL where RT is not configured
        note = (
            f"normal (SCHED_FIFO {priority} not permitted: {exc.strerror or exc}; give the user an rtprio limit "
            "or CAP_SYS_NICE, docs/robot.md)"
        )
        print(f"warning: real-time priority not set, the control path runs at {note}", file=sys.stderr, flush=True)
        return note
    return f"SCHED_FIFO {priority}"


class RealtimeSection:
    """Short sections of an ordinary thread run on SCHED_FIFO at `priority`: `with
    section(): publisher.publish(msg)`. The thread's own policy and priority are put back
    after each section. Without the privilege the first section finds out, says so once on
    stderr, and every section runs ordinary (`note` tells the status which)."""

    def __init__(self, priority: int, what: str) -> None:
        if not 0 <= priority <= 99:
            raise ValueError(f"{what}: real-time priority {priority} out of range (1-99, or 0 for none)")
        self.priority = priority
        self.what = what
        self._lock = threading.Lock()
        self.note = "normal" if priority == 0 else f"SCHED_FIFO {priority} for {what}"
        self._enabled = priority > 0 and hasattr(os, "sched_setscheduler")
        if priority > 0 and not self._enabled:
            self.note = f"normal (SCHED_FIFO {priority} not available on {sys.platform})"

    @contextmanager
    def __call__(self) -> Iterator[None]:
        if not self._enabled:
            yield
            return
        policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
        if policy in (os.SCHED_FIFO, os.SCHED_RR) and param.sched_priority >= self.priority:
            yield  # already at least this urgent (the whole node runs real-time)
            return
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(self.priority))
        except OSError as exc:  # PermissionError without the privilege
            self._refused(exc)
            yield
            return
        try:
            yield
        finally:
            os.sched_setscheduler(0, policy, param)

    def probe(self) -> str:
        """Enter and leave one empty section, so that `note` says from the start whether the
        privilege is there; returns it."""
        with self():
            pass
        return self.note

    def _refused(self, exc: OSError) -> None:
        with self._lock:
            if not self._enabled:
                return
            self._enabled = False
            self.note = (
                f"normal (SCHED_FIFO {self.priority} for {self.what} not permitted: {exc.strerror or exc}; "
                "give the user an rtprio limit or CAP_SYS_NICE, docs/robot.md)"
            )
        print(f"warning: real-time priority not set, {self.what} runs at {self.note}", file=sys.stderr, flush=True)
