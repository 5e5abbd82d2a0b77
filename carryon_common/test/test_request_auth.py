"""Signing ROS requests: the signature covers every field and the type, so a signed
request verifies at a RequestGate only unchanged, and only as the request it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from carryon_common.core.operator_auth import Unauthorized, create_identity, load_identity
from carryon_common.request_auth import RequestGate, sign_request
from carryon_interfaces.msg import MemoryFact
from carryon_interfaces.srv import SetEstop, UpdateUser


def gate_and_identities(tmp_path: Path):  # type: ignore[no-untyped-def]
    operator = load_identity(create_identity(tmp_path / "op.key"), "operator:ops")
    planner = load_identity(create_identity(tmp_path / "planner.key"), "node:planner_node")
    (tmp_path / "operators").write_text(f"{operator.public_line()}\n{planner.public_line()}\n")
    return RequestGate(str(tmp_path / "operators")), operator, planner


def test_a_signed_request_verifies_only_unchanged(tmp_path: Path) -> None:
    gate, operator, planner = gate_and_identities(tmp_path)
    request = UpdateUser.Request(user_id="alice", facts=[MemoryFact(entity="diet", key="preference", value="vegan")])
    sign_request(operator, request)
    assert gate.secured and gate.principal(request) == "operator:ops"
    tampered = sign_request(operator, UpdateUser.Request(user_id="alice", facts=list(request.facts)))
    tampered.user_id = "bob"  # changed after signing
    with pytest.raises(Unauthorized, match="does not verify"):
        gate.principal(tampered)
    release = sign_request(planner, SetEstop.Request(active=False, reason="go"))
    with pytest.raises(Unauthorized, match="may not make this request"):  # a node may not release the e-stop
        gate.principal(release, ("operator:",))
    with pytest.raises(Unauthorized, match="not signed"):
        gate.principal(SetEstop.Request(active=False))


def test_without_an_operators_file_nobody_is_authenticated_and_the_gate_says_so() -> None:
    gate = RequestGate("")
    assert not gate.secured and gate.principal(SetEstop.Request(active=False)) == ""
    assert "NOT authenticated" in gate.describe()


def test_an_unusable_operator_key_leaves_the_client_unsigned_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from carryon_common.request_auth import client_identity

    key = create_identity(tmp_path / "op.key")
    monkeypatch.setenv("CARRYON_OPERATOR_KEY", str(key))
    assert client_identity() is not None
    key.chmod(0o644)  # readable by others: refused as an identity, but the e-stop must still be reachable
    assert client_identity() is None
    assert "requests go out unsigned" in capsys.readouterr().err


def test_a_decision_verifies_only_from_its_node_unchanged_and_once(tmp_path: Path) -> None:
    """The recorder's check of decision messages: the node's own signature, on the topic it
    was signed for; an unsigned message, another node's, a changed one or a replay is not."""
    from carryon_common.request_auth import DecisionCheck, sign_decision
    from carryon_interfaces.msg import EstopState, PlanState

    planner = load_identity(create_identity(tmp_path / "planner.key"), "node:planner_node")
    shield = load_identity(create_identity(tmp_path / "shield.key"), "node:shield_node")
    (tmp_path / "publishers").write_text(f"{planner.public_line()}\n{shield.public_line()}\n")
    check = DecisionCheck(str(tmp_path / "publishers"))
    state = sign_decision(planner, PlanState(plan_id="p1", user_id="alice", message="ok"), "planner/plan_state")
    check.check(state, "planner/plan_state", "planner_node")
    with pytest.raises(Unauthorized, match="already used"):  # the same message again: a replay
        check.check(state, "planner/plan_state", "planner_node")
    changed = sign_decision(planner, PlanState(plan_id="p2", user_id="alice"), "planner/plan_state")
    changed.user_id = "bob"
    with pytest.raises(Unauthorized, match="does not verify"):
        check.check(changed, "planner/plan_state", "planner_node")
    elsewhere = sign_decision(planner, PlanState(plan_id="p3"), "planner/plan_state")
    with pytest.raises(Unauthorized, match="does not verify"):  # signed for another topic
        check.check(elsewhere, "judge/verdict", "planner_node")
    with pytest.raises(Unauthorized, match="not node:planner_node"):  # the shield cannot speak for the planner
        check.check(
            sign_decision(shield, PlanState(plan_id="p4"), "planner/plan_state"), "planner/plan_state", "planner_node"
        )
    with pytest.raises(Unauthorized, match="not signed"):
        check.check(EstopState(active=False, source="intruder"), "estop/state", "shield_node")
    assert not DecisionCheck("").secured
    DecisionCheck("").check(EstopState(active=False), "estop/state", "shield_node")  # unverified: passes


def test_an_operator_acts_only_for_the_users_its_line_grants(tmp_path: Path) -> None:
    """Operators are bound to users (issue 43): 'users=' on their line; none means no user.
    Nodes act for everyone (the planner checks the operator behind each request)."""
    from carryon_common.request_auth import EVERY_USER

    carer = load_identity(create_identity(tmp_path / "carer.key"), "operator:carer")
    admin = load_identity(create_identity(tmp_path / "admin.key"), "operator:admin")
    guest = load_identity(create_identity(tmp_path / "guest.key"), "operator:guest")
    planner = load_identity(create_identity(tmp_path / "planner.key"), "node:planner_node")
    lines = [carer.public_line("alice,bob"), admin.public_line("*"), guest.public_line(), planner.public_line()]
    (tmp_path / "principals").write_text("\n".join(lines) + "\n")
    gate = RequestGate(str(tmp_path / "principals"))

    def write(identity, user: str):  # type: ignore[no-untyped-def]
        fact = MemoryFact(entity="diet", key="allergy", value="peanuts")
        return sign_request(identity, UpdateUser.Request(user_id=user, facts=[fact]))

    assert gate.principal(write(carer, "alice"), user="alice") == "operator:carer"
    with pytest.raises(Unauthorized, match=r"may not act for user 'dave'.*grants: alice, bob"):
        gate.principal(write(carer, "dave"), user="dave")
    with pytest.raises(Unauthorized, match="may not act for every user"):
        gate.principal(write(carer, "alice"), user=EVERY_USER)
    assert gate.principal(write(admin, "dave"), user="dave") == "operator:admin"
    assert gate.principal(write(admin, "dave"), user=EVERY_USER) == "operator:admin"
    with pytest.raises(Unauthorized, match="grants: no user"):
        gate.principal(write(guest, "guest"), user="guest")
    assert gate.principal(sign_request(guest, SetEstop.Request(active=False)), ("operator:",)) == "operator:guest"
    assert gate.principal(write(planner, "dave"), user="dave") == "node:planner_node"
    with pytest.raises(Unauthorized, match="only node:shield_node"):  # a principal named exactly
        gate.principal(write(planner, "dave"), ("node:shield_node",))


def test_a_users_option_that_does_not_parse_names_its_line(tmp_path: Path) -> None:
    from carryon_common.core.errors import ConfigError
    from carryon_common.core.operator_auth import parse_authorized

    carer = load_identity(create_identity(tmp_path / "carer.key"), "operator:carer")
    with pytest.raises(ConfigError, match="principals:2: users=: 'Alice' is not a user id"):
        parse_authorized("\n" + carer.public_line() + " users=Alice,bob", "principals")
    with pytest.raises(ConfigError, match="principals:1: unknown option 'user=alice'"):
        parse_authorized(carer.public_line() + " user=alice", "principals")
