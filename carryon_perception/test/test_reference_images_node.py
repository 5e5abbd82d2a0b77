"""memory_node + perception_node in one process: an image remembered in user memory labels
the object it shows; a corrupt one is named in perception's status and never stops it."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image
from rclpy.parameter import Parameter
from sensor_msgs.msg import CompressedImage
from test_perception_node import Driver, Listener, rendered  # noqa: F401 - `rendered` is a fixture

from carryon_common.calls import RosSession
from carryon_common.convert import msg_to_health
from carryon_common.core import names
from carryon_common.core.status import NodeState
from carryon_interfaces.srv import GetReferenceImages, GetStatus, RememberImage
from carryon_memory.node import MemoryNode
from carryon_perception.core.build import build_tabletop
from carryon_perception.node import PerceptionNode
from carryon_sim.core.cameras import CameraFrame

# food_serving without the bowl: the bowl is `unknown_<n>` until a photo of it is remembered
OBJECTS = ["pink_cover", "carrot", "plate", "meat", "bottle"]
NS = "/carryon/"


def photo_of(frame: CameraFrame, label: str) -> bytes:
    """A PNG 'photo' of one object: its pixels in the rendered frame, centred on a plain
    background three times its size (as a user would frame their object)."""
    mask = frame.segmentation == next(i for i, n in frame.labels.items() if n == label)
    rows, cols = np.nonzero(mask)
    height, width = rows.max() - rows.min() + 1, cols.max() - cols.min() + 1
    image = np.full((3 * height, 3 * width, 3), (40, 90, 160), dtype=np.uint8)
    image[rows - rows.min() + height, cols - cols.min() + width] = frame.rgb[rows, cols]
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def start_perception(ros, config_dir: Path) -> PerceptionNode:  # type: ignore[no-untyped-def]
    perception = build_tabletop(config_dir, "food_serving", OBJECTS)
    overrides = [Parameter("rate_hz", value=10.0), Parameter("max_image_age_s", value=2.0)]
    return ros.add(PerceptionNode(perception, namespace="carryon", context=ros.context, parameter_overrides=overrides))


def start_memory(ros, memory_dir: Path) -> MemoryNode:  # type: ignore[no-untyped-def]
    overrides = [Parameter("memory_dir", value=str(memory_dir)), Parameter("rescan_period_s", value=0.0)]
    return ros.add(MemoryNode(namespace="carryon", context=ros.context, parameter_overrides=overrides))


def remember(session: RosSession, entity: str, fmt: str, data: bytes) -> None:
    request = RememberImage.Request(user_id="alice", entity=entity, key="reference_image", source="pytest")
    request.image = CompressedImage(format=fmt, data=list(data))
    # idempotent (the same image again changes nothing): resent if DDS drops the first reply
    response = session.call(RememberImage, NS + names.MEMORY_REMEMBER_IMAGE, request, timeout_s=10.0, resend_s=2.0)
    assert response.status == RememberImage.Response.STATUS_OK, response.message


def perception_status(session: RosSession):  # type: ignore[no-untyped-def]
    service = names.status_service("carryon", names.PERCEPTION_NODE)
    return msg_to_health(session.call(GetStatus, service, GetStatus.Request(), timeout_s=10.0, resend_s=2.0).status)


def test_a_remembered_photo_labels_the_object(ros, config_dir, tmp_path, wait_until, rendered) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    world, frames = rendered
    node = start_perception(ros, config_dir)  # before memory_node: it waits for it, perceiving meanwhile
    peer = ros.peer("fake_driver")
    listener = Listener(peer)
    Driver(peer, world, frames)
    assert wait_until(lambda: len(listener.labels["scene"]) >= 2, 30.0)
    labels = set(listener.labels["scene"][-1].values())
    assert "bowl" not in labels and any(n.startswith("unknown_") for n in labels)
    assert "waiting for memory_node" in node.health().message and node.health().state == NodeState.READY

    memory = start_memory(ros, tmp_path / "memory")
    assert wait_until(lambda: "reference images from memory: none" in node.health().message, 20.0)
    assert wait_until(lambda: memory.changed_pub.get_subscription_count() >= 1, 10.0)  # perception hears changes
    with RosSession("memory_client") as session:
        remember(session, "my_bowl", "png", photo_of(frames["scene"], "bowl"))
        latest = listener.labels["scene"]
        assert wait_until(lambda: "my_bowl" in latest[-1].values(), 30.0), latest[-1]
        # the scene of that frame is published after its labels
        assert wait_until(lambda: "my_bowl" in {o.label for o in listener.scenes[-1].objects}, 10.0)
        status = perception_status(session)
    assert status.state == NodeState.READY and "reference images from memory: my_bowl (1)" in status.message
    labels = listener.labels["scene"][-1]
    assert not any(n.startswith("unknown_") for n in labels.values()), labels
    objects = {o.label: o for o in listener.scenes[-1].objects}
    assert objects["my_bowl"].region == "dining_table" and objects["my_bowl"].support == "table"


def test_a_corrupt_image_is_named_in_the_status_and_the_others_still_count(  # type: ignore[no-untyped-def]
    ros,
    config_dir,
    tmp_path,
    wait_until,
    rendered,  # noqa: F811
) -> None:
    _world, frames = rendered
    memory = start_memory(ros, tmp_path / "memory")
    node = start_perception(ros, config_dir)
    assert wait_until(lambda: node.references is not None, 20.0)
    assert wait_until(lambda: memory.changed_pub.get_subscription_count() >= 1, 10.0)
    with RosSession("memory_client") as session:
        remember(session, "my_cup", "png", photo_of(frames["scene"], "bottle"))
        stored = memory.store.reference_images("alice").images[0]
        (memory.memory_dir / stored.path).write_bytes(stored.data[:200])  # damaged on disk after it was checked
        remember(session, "my_bowl", "png", photo_of(frames["scene"], "bowl"))
        assert wait_until(lambda: node.references is not None and "my_bowl" in node.references.entities, 20.0)
        service = NS + names.MEMORY_GET_REFERENCE_IMAGES
        answer = session.call(GetReferenceImages, service, GetReferenceImages.Request(), 10.0, resend_s=2.0)
        status = perception_status(session)
    assert [(i.entity, i.image.format) for i in answer.images] == [("my_cup", "png"), ("my_bowl", "png")]
    assert dict(node.references.entities) == {"my_bowl": 1}
    assert status.state == NodeState.DEGRADED
    assert f"alice:my_cup.reference_image ({stored.path}): does not decode as PNG" in status.message
    assert "reference images from memory: my_bowl (1)" in status.message
