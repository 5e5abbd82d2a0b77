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
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

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
