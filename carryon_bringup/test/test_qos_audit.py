"""QoS audit by graph introspection (issue 22): a pair DDS will not connect is found and
named; the recorder's subscription QoS connects to every publisher it records."""

from __future__ import annotations

from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import String

from carryon_bringup.recorder_node import recording_qos
from carryon_common.qos_audit import qos_mismatches

BEST_EFFORT = QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT)
RELIABLE = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)


def test_an_incompatible_pair_is_found_and_a_compatible_one_is_not(ros, wait_until) -> None:  # type: ignore[no-untyped-def]
    camera, consumer, probe = ros.peer("camera_driver"), ros.peer("consumer"), ros.peer("qos_probe")
    camera.create_publisher(String, "camera/color", BEST_EFFORT)
    consumer.create_subscription(String, "camera/color", lambda _m: None, RELIABLE)
    consumer.create_subscription(String, "camera/info", lambda _m: None, BEST_EFFORT)
    camera.create_publisher(String, "camera/info", RELIABLE)  # reliable to best effort: connects
    assert wait_until(lambda: len(probe.get_subscriptions_info_by_topic("/carryon/camera/info")) == 1, 10.0)
    assert wait_until(lambda: qos_mismatches(probe, "carryon") != [], 10.0)
    (found,) = qos_mismatches(probe, "carryon")
    assert (found.topic, found.publisher, found.subscriber) == ("/carryon/camera/color", "camera_driver", "consumer")
    assert (
        str(found)
        == "/carryon/camera/color: camera_driver -> consumer: Best effort publisher and reliable subscription;"
    )
    assert qos_mismatches(probe, "elsewhere") == []


def test_the_recorder_subscribes_so_that_every_publisher_connects() -> None:
    assert recording_qos([RELIABLE, BEST_EFFORT]).reliability == ReliabilityPolicy.BEST_EFFORT
    assert recording_qos([RELIABLE]).reliability == ReliabilityPolicy.RELIABLE
    assert recording_qos([LATCHED]).durability == DurabilityPolicy.TRANSIENT_LOCAL  # latched state replayed
    assert recording_qos([LATCHED, RELIABLE]).durability == DurabilityPolicy.VOLATILE  # a volatile one connects
