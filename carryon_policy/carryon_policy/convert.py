"""The one place where policy core types meet ROS messages.

Action chunks convert with carryon_common.convert (shared with shield, recovery and
the driver)."""

from __future__ import annotations

from builtin_interfaces.msg import Time as TimeMsg

from carryon_interfaces.msg import InferenceTiming
from carryon_policy.core.timing import InferenceRecord


def timing_to_msg(record: InferenceRecord, stamp: TimeMsg) -> InferenceTiming:
    msg = InferenceTiming()
    msg.header.stamp = stamp
    msg.chunk_id = record.chunk_id
    msg.backend = record.backend
    msg.infer_s = record.infer_s
    msg.observation_age_s = record.observation_age_s
    msg.server_infer_s = record.server_infer_s
    return msg
