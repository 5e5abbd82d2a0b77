"""A NUL character cannot travel in a ROS 2 string (it cuts the string: "alice\\x00evil"
arrives as "alice"), so CarryOn's clients refuse to send one instead of acting on the
wrong name."""

from __future__ import annotations

import pytest
from rclpy.serialization import deserialize_message, serialize_message

from carryon_common.calls import InvalidRequest, RosSession, check_sendable
from carryon_interfaces.msg import MemoryFact
from carryon_interfaces.srv import UpdateUser


def test_ros_cuts_a_string_at_nul_which_is_why_clients_refuse_it() -> None:
    request = UpdateUser.Request(user_id="alice\x00evil")
    assert deserialize_message(serialize_message(request), UpdateUser.Request).user_id == "alice"
    with pytest.raises(InvalidRequest, match=r"memory/update_user\.user_id .*NUL"):
        check_sendable(request, "memory/update_user")
    nested = UpdateUser.Request(user_id="alice", facts=[MemoryFact(entity="diet", key="pref\x00", value="x")])
    with pytest.raises(InvalidRequest, match=r"facts\[0\]\.key"):
        check_sendable(nested)
    check_sendable(UpdateUser.Request(user_id="alice", facts=[MemoryFact(entity="diet", key="preference")]))


def test_a_session_refuses_to_send_it_before_any_wait() -> None:
    with RosSession("nul_probe") as session, pytest.raises(InvalidRequest):
        session.call_many([(UpdateUser, "/carryon/memory/update_user", UpdateUser.Request(user_id="a\x00b"))], 5.0)
