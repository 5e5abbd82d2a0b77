"""memory_node in-process: every service over ROS, status codes, memory/changed, health."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
from PIL import Image
from rclpy.parameter import Parameter
from sensor_msgs.msg import CompressedImage

from carryon_common.calls import RosSession
from carryon_common.convert import msg_to_health
from carryon_common.core.status import NodeState
from carryon_interfaces.msg import MemoryChange, MemoryFact, SceneUpdate
from carryon_interfaces.srv import (
    GetContext,
    GetReferenceImages,
    GetStatus,
    MemoryHistory,
    RememberImage,
    UpdateScene,
    UpdateUser,
)
from carryon_memory.node import MemoryNode

REPO = Path(__file__).resolve().parents[2]
NS = "/carryon/memory/"


def call(session: RosSession, srv: type, name: str, **fields: object) -> object:
    return session.call(srv, NS + name, srv.Request(**fields), timeout_s=10.0)


def fact(entity: str, key: str, value: str, durable: bool = True) -> MemoryFact:
    return MemoryFact(entity=entity, key=key, value=value, durable=durable, source="pytest")


def start(ros, memory_dir: Path, **params: object) -> MemoryNode:  # type: ignore[no-untyped-def]
    overrides = [Parameter("memory_dir", value=str(memory_dir)), Parameter("rescan_period_s", value=0.0)]
    overrides += [Parameter(name, value=value) for name, value in params.items()]
    return ros.add(MemoryNode(namespace="carryon", context=ros.context, parameter_overrides=overrides))


def test_services_round_trip_with_changes_published(ros, tmp_path: Path, wait_until) -> None:  # type: ignore[no-untyped-def]
    node = start(ros, tmp_path / "memory")
    peer = ros.peer("fake_planner")
    changes: list[MemoryChange] = []
    peer.create_subscription(MemoryChange, "memory/changed", changes.append, 100)
    with RosSession("memory_client") as session:
        ok = UpdateUser.Response.STATUS_OK
        r = call(session, UpdateUser, "update_user", user_id="alice", facts=[fact("diet", "preference", "vegetarian")],
                 source="dialogue:r1")  # fmt: skip
        assert (r.status, r.version) == (ok, 1), r.message
        r = call(session, UpdateUser, "update_user", user_id="alice", facts=[fact("diet", "preference", "vegan")],
                 source="dialogue:r2")  # fmt: skip
        assert r.status == ok and "1 change to users/alice.md, version 2" in r.message
        r = call(session, UpdateUser, "update_user", user_id="bob", facts=[fact("diet", "preference", "ham")])
        assert r.status == ok

        update = SceneUpdate(op=SceneUpdate.OP_SET_CONTENTS, location="kitchen_counter",
                             contents=["carrot under pink_cover", "plate"], source="judge:observe:s1")  # fmt: skip
        update.observed.sec = 1_700_000_000
        r = call(session, UpdateScene, "update_scene", updates=[update])
        assert (r.status, r.version) == (ok, 4), r.message

        r = call(session, GetContext, "get_context", user_id="alice",
                 temporary_facts=[fact("drink", "wish", "tea", durable=False)])  # fmt: skip
        assert r.status == ok, r.message
        assert [(f.entity, f.key, f.value, f.durable) for f in r.user_facts] == [
            ("diet", "preference", "vegan", True), ("drink", "wish", "tea", False)
        ]  # fmt: skip
        assert "ham" not in r.rendered and "- wish: tea (temporary, this request only)" in r.rendered
        assert r.scene[0].name == "kitchen_counter" and r.scene[0].observed.sec == 1_700_000_000
        assert r.version == 4

        assert f"rendered {len(r.rendered)} chars, ~{-(-len(r.rendered) // 4)} tokens" in r.message

        r = call(session, MemoryHistory, "history", file="users/alice.md", limit=0)
        assert r.status == ok and [(c.version, c.previous_value, c.new_value) for c in r.changes] == [
            (2, "vegetarian", "vegan"), (1, "", "vegetarian")
        ]  # fmt: skip
        r = call(session, MemoryHistory, "history", restore_version=1)
        assert r.status == ok and r.version == 7 and "restored version 1" in r.message  # alice, bob, scene
        r = call(session, GetContext, "get_context", user_id="alice")
        assert [f.value for f in r.user_facts] == ["vegetarian"] and r.scene == []

        data = io.BytesIO()
        Image.new("RGB", (4, 4)).save(data, format="PNG")
        request_image = {"user_id": "alice", "entity": "mug", "key": "reference_image", "source": "operator"}
        r = call(session, RememberImage, "remember_image", **request_image,
                 image=CompressedImage(format="png", data=list(data.getvalue())))  # fmt: skip
        assert r.status == ok and r.path.startswith("images/alice/mug-reference_image-"), r.message
        assert (node.memory_dir / r.path).read_bytes() == data.getvalue()
        image_path = r.path
        r = call(session, GetReferenceImages, "get_reference_images", user_id="")
        assert r.status == ok and r.version == 8 and list(r.left_out) == [], r.message
        assert [(i.user_id, i.entity, i.key, i.image.format) for i in r.images] == [
            ("alice", "mug", "reference_image", "png")
        ]  # fmt: skip
        assert (r.images[0].path, bytes(r.images[0].image.data)) == (image_path, data.getvalue())
    assert wait_until(lambda: len(changes) == 8, 5.0)
    assert [c.version for c in changes] == list(range(1, 9))
    assert changes[1].previous_value == "vegetarian" and changes[1].source == "dialogue:r2"


@pytest.mark.parametrize(
    ("srv", "name", "fields", "status", "match"),
    [
        (UpdateUser, "update_user", {"user_id": "../etc", "facts": [fact("a", "b", "c")]}, 1, "user id"),
        (UpdateUser, "update_user", {"user_id": "alice", "facts": [fact("a", "b", "c", durable=False)]}, 1,
         "temporary"),
        (UpdateUser, "update_user", {"user_id": "alice", "facts": [fact("a", "b", "")]}, 2, "no fact a.b"),
        (GetContext, "get_context", {"user_id": "Alice"}, 1, "did you mean 'alice'"),
        (MemoryHistory, "history", {"restore_version": 42}, 2, "version 42 does not exist"),
        (MemoryHistory, "history", {"file": "../../x"}, 1, "expected 'scene.md'"),
        (UpdateScene, "update_scene", {"updates": [SceneUpdate(op=SceneUpdate.OP_REMOVE_ITEM, item="cup")]}, 2,
         "not in scene memory"),
        (RememberImage, "remember_image", {"user_id": "alice", "entity": "mug", "key": "k",
                                           "image": CompressedImage(format="png", data=list(b"GIF89a"))}, 1,
         "magic bytes"),
        (GetReferenceImages, "get_reference_images", {"user_id": "Alice"}, 1, "did you mean 'alice'"),
    ],
)  # fmt: skip
def test_errors_become_statuses_with_reasons(ros, tmp_path: Path, srv, name, fields, status, match) -> None:  # type: ignore[no-untyped-def]
    start(ros, tmp_path / "memory")
    with RosSession("memory_client") as session:
        response = call(session, srv, name, **fields)
    assert response.status == status
    assert match in response.message


def test_a_corrupt_user_is_read_only_and_reported_in_the_status(ros, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "memory"
    (root / "users").mkdir(parents=True)
    corrupt = b"## diet\n- preference: vegan\nprose line\n"
    (root / "users/bob.md").write_bytes(corrupt)
    start(ros, root)
    with RosSession("memory_client") as session:
        status = msg_to_health(
            session.call(GetStatus, "/carryon/memory_node/get_status", GetStatus.Request(), 10.0).status
        )
        assert status.state == NodeState.DEGRADED and status.ready
        assert "users/bob.md:3: expected a '## section' heading" in status.message
        r = call(session, UpdateUser, "update_user", user_id="bob", facts=[fact("diet", "preference", "ham")])
        assert r.status == UpdateUser.Response.STATUS_READ_ONLY and "users/bob.md:3:" in r.message
        r = call(session, GetContext, "get_context", user_id="bob")
        assert r.status == GetContext.Response.STATUS_OK and [f.value for f in r.user_facts] == ["vegan"]
        assert "1 malformed line left out: users/bob.md:3:" in r.message
        r = call(session, UpdateUser, "update_user", user_id="alice", facts=[fact("diet", "preference", "veg")])
        assert r.status == UpdateUser.Response.STATUS_OK
    assert (root / "users/bob.md").read_bytes() == corrupt


def test_seed_dir_fills_a_new_memory_dir_once(ros, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("CARRYON_CONFIG_DIR", str(REPO / "config"))
    node = start(ros, tmp_path / "memory", seed_dir="memory")
    alice = node.store.context("alice")
    assert any(f.value == "vegetarian" for f in alice.facts)
    assert "carrot under pink_cover" in alice.rendered
    assert {c.op for c in node.store.history()} == {"seed"}
    assert node.health().state == NodeState.READY


def test_observations_stamped_by_a_simulator_clock_are_recorded_at_wall_time(ros, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    start(ros, tmp_path / "memory")
    update = SceneUpdate(op=SceneUpdate.OP_SET_CONTENTS, location="dining_table", contents=["bowl"],
                         source="judge:observe:s2")  # fmt: skip
    update.observed.sec = 42  # a simulator clock: 42 s after its run started
    before = int(time.time())
    with RosSession("memory_client") as session:
        assert call(session, UpdateScene, "update_scene", updates=[update]).status == UpdateScene.Response.STATUS_OK
        r = call(session, GetContext, "get_context", user_id="")
    assert r.scene[0].name == "dining_table" and r.scene[0].observed.sec >= before  # not 1970


def test_the_messages_served_follow_every_write_and_the_requests_temporary_facts(ros, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    start(ros, tmp_path / "memory")
    ok = GetContext.Response.STATUS_OK
    with RosSession("memory_client") as session:

        def served(user: str, *temporary: MemoryFact) -> tuple[list[tuple[str, str, str, bool]], list[str], int]:
            r = call(session, GetContext, "get_context", user_id=user, temporary_facts=list(temporary))
            assert r.status == ok, r.message
            return [(f.entity, f.key, f.value, f.durable) for f in r.user_facts], [s.name for s in r.scene], r.version

        facts, scene, version = served("zoe")  # no memory yet: kept messages are reused for it below
        assert facts == [] and "sink" not in scene
        assert served("zoe", fact("drink", "wish", "tea", durable=False))[0] == [("drink", "wish", "tea", False)]
        assert served("zoe") == ([], scene, version)  # temporary facts are never kept
        r = call(session, UpdateUser, "update_user", user_id="alice", facts=[fact("diet", "preference", "vegan")])
        assert served("zoe") == ([], scene, r.version) and r.version > version  # another user's write
        r = call(session, UpdateUser, "update_user", user_id="zoe", facts=[fact("diet", "preference", "vegan")])
        assert served("zoe") == ([("diet", "preference", "vegan", True)], scene, r.version)
        update = SceneUpdate(op=SceneUpdate.OP_SET_CONTENTS, location="sink", contents=["cup"], source="judge")
        assert call(session, UpdateScene, "update_scene", updates=[update]).status == ok
        assert "sink" in served("zoe")[1]


def test_other_users_values_are_left_out_only_while_the_callers_copy_holds(ros, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """GetContext.others_token: the planner keeps the other users' ids and values per user, and
    memory_node leaves them out of a reply while they are unchanged; any user's write changes
    them (and the token), so the next reply carries them again."""
    start(ros, tmp_path / "memory")
    with RosSession("memory_client") as session:
        for user, value in (("bob", "white bread"), ("carol", "oat milk"), ("dave", "rye")):
            call(session, UpdateUser, "update_user", user_id=user, facts=[fact("food", "preference", value)])
        first = call(session, GetContext, "get_context", user_id="dave")
        assert not first.others_unchanged and first.others_token != 0
        assert list(first.other_users) == ["bob", "carol"] and list(first.foreign_values) == ["oat milk", "white bread"]
        again = call(session, GetContext, "get_context", user_id="dave", others_token=first.others_token)
        assert again.others_unchanged and again.others_token == first.others_token
        assert list(again.other_users) == [] and list(again.foreign_values) == []
        stale = call(session, GetContext, "get_context", user_id="dave", others_token=first.others_token + 1)
        assert not stale.others_unchanged and list(stale.foreign_values) == ["oat milk", "white bread"]
        call(session, UpdateUser, "update_user", user_id="bob", facts=[fact("food", "allergy", "peanuts")])
        after = call(session, GetContext, "get_context", user_id="dave", others_token=first.others_token)
        assert not after.others_unchanged and after.others_token != first.others_token
        assert "peanuts" in list(after.foreign_values)
