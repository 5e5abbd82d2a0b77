"""openpi_remote against the fake openpi server (the real websocket + msgpack protocol on
loopback): the wire format, a normal exchange, and every way the server can fail — none
may hang, each gives a specific PolicyError within its timeout."""

from __future__ import annotations

import base64
import hashlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import msgpack
import numpy as np
import pytest

from carryon_common.core.chunk import Convention
from carryon_common.core.errors import ConfigError
from carryon_policy.core.config import PolicyConfig
from carryon_policy.core.openpi_client import (
    OpenpiRemotePolicy,
    RemoteServerError,
    make_openpi_policy,
    packb,
    unpackb,
)
from carryon_policy.core.policy import InvalidAction, MissingObservation, Observation, PolicyUnavailable, RobotState
from carryon_sim.harness.fakes.openpi_server import STEP_M, FakeOpenpiServer, serve_in_background

SLACK_S = 1.5  # scheduling slack on a busy 2-core CI machine


def _observation() -> Observation:
    robot = RobotState(np.array([0.5, 0.0, 0.3]), np.eye(3), np.zeros(7), 0.08)
    images = {"scene": np.full((480, 640, 3), 90, np.uint8), "wrist": np.full((240, 320, 3), 30, np.uint8)}
    return Observation(observation_id=3, stamp_s=2.0, robot=robot, images=images)


def _policy(uri: str, **overrides: object) -> OpenpiRemotePolicy:
    values: dict[str, object] = {"backend": "openpi_remote", "remote_uri": uri, "remote_connect_timeout_s": 2.0}
    values.update(overrides)
    return make_openpi_policy(PolicyConfig.model_validate(values))


@pytest.fixture
def server() -> Iterator[FakeOpenpiServer]:
    with FakeOpenpiServer() as fake:
        yield fake


@pytest.fixture
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- the codec ---------------------------------------------------------------------------


def test_arrays_travel_in_openpi_msgpack_numpy_form() -> None:
    wire = msgpack.unpackb(packb({"state": np.arange(3, dtype=np.float32), "prompt": "pick"}), raw=False)
    assert wire["prompt"] == "pick"
    assert wire["state"] == {
        b"__ndarray__": True, b"data": np.arange(3, dtype=np.float32).tobytes(), b"dtype": "<f4", b"shape": [3],
    }  # fmt: skip
    scalar = msgpack.unpackb(packb(np.float32(1.5)), raw=False)  # (np.float64 is a float: packed as one)
    assert scalar == {b"__npgeneric__": True, b"data": 1.5, b"dtype": "<f4"}


@pytest.mark.parametrize("array", [np.zeros((224, 224, 3), np.uint8), np.ones((10, 7), np.float64), np.arange(4)])
def test_codec_round_trips_arrays(array: np.ndarray) -> None:
    back = unpackb(packb({"a": array, "nested": {"b": [array]}}))
    np.testing.assert_array_equal(back["a"], array)
    assert back["a"].dtype == array.dtype and back["nested"]["b"][0].shape == array.shape


def test_codec_refuses_object_arrays_both_ways() -> None:
    with pytest.raises(TypeError, match="cannot be sent"):
        packb({"a": np.array([object()])})
    forged = msgpack.packb({b"__ndarray__": True, b"data": b"", b"dtype": "|O", b"shape": [0]}, use_bin_type=True)
    with pytest.raises(ValueError, match="refusing numpy dtype object"):
        unpackb(forged)


# --- a well-behaved server ---------------------------------------------------------------


def test_reset_connects_and_reads_the_metadata(server: FakeOpenpiServer) -> None:
    policy = _policy(server.uri)
    assert not policy.connected
    policy.reset("put the cup on the plate", seed=0)
    assert policy.connected and server.connections == 1
    assert policy.server_metadata == {"server": "carryon fake openpi server"}
    assert policy.metadata.backend == "openpi_remote" and policy.metadata.cameras == ("scene", "wrist")
    policy.close()
    assert not policy.connected


def test_infer_sends_the_mapped_observation_and_maps_the_reply(server: FakeOpenpiServer) -> None:
    policy = _policy(server.uri, chunk_horizon=8, steps_per_inference=4)
    policy.reset("put the cup on the plate", seed=0)
    out = policy.infer(_observation())
    policy.close()
    request = server.requests[-1]
    assert sorted(request) == ["observation/image", "observation/state", "observation/wrist_image", "prompt"]
    assert request["prompt"] == "put the cup on the plate"
    assert request["observation/image"].shape == (224, 224, 3) and request["observation/image"].dtype == np.uint8
    np.testing.assert_allclose(request["observation/state"], [0.5, 0, 0.3, 0, 0, 0, 0.04, -0.04], atol=1e-7)
    assert request["observation/state"].dtype == np.float32
    assert out.convention is Convention.DELTA and len(out) == 8  # the server's 10 steps, cut to chunk_horizon
    np.testing.assert_allclose(out.positions, np.tile([STEP_M, 0.0, 0.0], (8, 1)), atol=1e-9)
    np.testing.assert_allclose(out.gripper, np.zeros(8))
    assert 0.0 <= out.server_infer_s < 1.0


def test_api_key_comes_from_the_named_environment_variable(
    server: FakeOpenpiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CARRYON_TEST_OPENPI_KEY", "s3cret")
    policy = _policy(server.uri, remote_api_key_env="CARRYON_TEST_OPENPI_KEY")
    policy.reset("pick", 0)
    policy.close()
    assert server.headers[-1]["Authorization"] == "Api-Key s3cret"
    monkeypatch.delenv("CARRYON_TEST_OPENPI_KEY")
    with pytest.raises(ConfigError, match=r"CARRYON_TEST_OPENPI_KEY.*unset"):
        _policy(server.uri, remote_api_key_env="CARRYON_TEST_OPENPI_KEY")


def test_a_missing_camera_is_reported_before_anything_is_sent(server: FakeOpenpiServer) -> None:
    policy = _policy(server.uri)
    policy.reset("pick", 0)
    observation = _observation()
    observation = Observation(1, 0.0, observation.robot, images={"scene": observation.images["scene"]})
    with pytest.raises(MissingObservation, match="camera 'wrist'"):
        policy.infer(observation)
    assert server.requests == []
    policy.close()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"remote_uri": ""}, "needs remote_uri"),
        ({"vla_cameras": ["observation/image=top"]}, "robot camera\\(s\\) top that are not in cameras"),
        ({"vla_action_convention": "joint_absolute", "vla_action_layout": ["joints", "gripper"]}, "forward kinematics"),
    ],
)
def test_configuration_errors_show_at_start_up(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _policy("ws://127.0.0.1:9", **overrides)


# --- a server that is down, slow or broken ------------------------------------------------


def test_server_down_is_unavailable_at_once(free_port: int) -> None:
    policy = _policy(f"ws://127.0.0.1:{free_port}")
    started = time.monotonic()
    with pytest.raises(PolicyUnavailable, match="cannot connect to policy server"):
        policy.reset("pick", 0)
    assert time.monotonic() - started < SLACK_S


def test_a_server_that_never_answers_the_handshake_times_out() -> None:
    with socket.socket() as listener:  # accepts TCP connections (backlog), never speaks websocket
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        policy = _policy(f"ws://127.0.0.1:{listener.getsockname()[1]}", remote_connect_timeout_s=0.5)
        started = time.monotonic()
        with pytest.raises(PolicyUnavailable, match=r"did not accept a connection within 0.5 s"):
            policy.infer(_observation())
        assert time.monotonic() - started < 0.5 + SLACK_S


def test_no_metadata_times_out(server: FakeOpenpiServer) -> None:
    server.behaviour.fault = "no_metadata"
    policy = _policy(server.uri, remote_connect_timeout_s=0.4)
    started = time.monotonic()
    with pytest.raises(PolicyUnavailable, match="sent no metadata within"):
        policy.reset("pick", 0)
    assert time.monotonic() - started < 0.4 + SLACK_S
    assert not policy.connected


def test_a_server_speaking_another_protocol_is_unavailable(server: FakeOpenpiServer) -> None:
    server.behaviour.fault = "bad_metadata"
    with pytest.raises(PolicyUnavailable, match="not an openpi policy server"):
        _policy(server.uri).reset("pick", 0)


def test_slow_reply_times_out_and_the_late_reply_is_never_used(server: FakeOpenpiServer) -> None:
    policy = _policy(server.uri, remote_timeout_s=0.3)
    policy.reset("pick", 0)
    server.behaviour.delay_s = 1.0
    started = time.monotonic()
    with pytest.raises(PolicyUnavailable, match=r"sent no reply within 0.3 s; connection closed"):
        policy.infer(_observation())
    assert time.monotonic() - started < 0.3 + SLACK_S
    assert not policy.connected
    # The next inference reconnects; a stale 10-step reply from the old connection would show.
    server.behaviour.delay_s = 0.0
    server.behaviour.horizon = 5
    assert len(policy.infer(_observation())) == 5
    assert server.connections == 2
    policy.close()


def _deaf_server(listener: socket.socket, done: threading.Event) -> None:
    """Completes the websocket handshake, sends empty metadata, then never reads or answers
    again (like a server stuck in a long inference, which cannot answer the close either)."""
    conn, _ = listener.accept()
    with conn:
        request = b""
        while b"\r\n\r\n" not in request:
            request += conn.recv(4096)
        key = next(
            line.split(b":", 1)[1].strip()
            for line in request.split(b"\r\n")
            if line.lower().startswith(b"sec-websocket-key")
        )
        accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
        conn.sendall(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
        )
        conn.sendall(bytes([0x82, 1]) + packb({}))  # one unmasked binary frame: the metadata {}
        done.wait(10.0)


def test_a_server_stuck_in_inference_gives_the_error_at_the_timeout() -> None:
    done = threading.Event()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        thread = threading.Thread(target=_deaf_server, args=(listener, done), daemon=True)
        thread.start()
        policy = _policy(f"ws://127.0.0.1:{listener.getsockname()[1]}", remote_timeout_s=0.3)
        policy.reset("pick", 0)
        started = time.monotonic()
        with pytest.raises(PolicyUnavailable, match="sent no reply within"):
            policy.infer(_observation())
        elapsed = time.monotonic() - started
        done.set()
        thread.join(5.0)
    assert elapsed < 0.3 + 0.6  # not delayed by the close handshake the server never answers


def test_nan_actions_are_invalid_and_the_connection_stays_usable(server: FakeOpenpiServer) -> None:
    policy = _policy(server.uri)
    policy.reset("pick", 0)
    server.behaviour.fault = "nan"
    with pytest.raises(InvalidAction, match=r"NaN or infinity \(step 1, value 0\)"):
        policy.infer(_observation())
    server.behaviour.fault = "none"
    assert len(policy.infer(_observation())) == 10
    assert server.connections == 1
    policy.close()


def test_wrong_shape_is_invalid(server: FakeOpenpiServer) -> None:
    server.behaviour.fault = "wrong_shape"
    policy = _policy(server.uri)
    with pytest.raises(InvalidAction, match=r"shape \(10,\)"):
        policy.infer(_observation())
    policy.close()


def test_out_of_range_actions_are_invalid(server: FakeOpenpiServer) -> None:
    policy = _policy(server.uri, vla_action_max_abs=0.001)
    with pytest.raises(InvalidAction, match="exceeds vla_action_max_abs"):
        policy.infer(_observation())
    policy.close()


def test_a_dropped_connection_is_unavailable_then_reconnects(server: FakeOpenpiServer) -> None:
    policy = _policy(server.uri)
    policy.reset("pick", 0)
    server.behaviour.fault = "close"
    with pytest.raises(PolicyUnavailable, match="closed the connection"):
        policy.infer(_observation())
    server.behaviour.fault = "none"
    assert len(policy.infer(_observation())) == 10
    assert server.connections == 2
    policy.close()


def test_readiness_says_whether_the_server_answers(free_port: int) -> None:
    """policy_node's readiness check: a reason while no server accepts a connection, None
    once one does, and a reason again when it goes away (noticed without an inference)."""
    policy = _policy(f"ws://127.0.0.1:{free_port}")
    reason = policy.unavailable()
    assert reason is not None and "cannot connect to policy server" in reason
    fake = FakeOpenpiServer(port=free_port).start()
    try:
        assert policy.unavailable() is None and policy.connected
    finally:
        fake.stop()
    deadline = time.monotonic() + 5.0
    while policy.unavailable() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    reason = policy.unavailable()
    assert reason is not None and "cannot connect to policy server" in reason
    policy.close()


def test_a_server_error_carries_its_traceback(server: FakeOpenpiServer) -> None:
    server.behaviour.fault = "error"
    policy = _policy(server.uri)
    with pytest.raises(RemoteServerError, match="RuntimeError: fake inference failure") as caught:
        policy.infer(_observation())
    assert caught.value.server_traceback.startswith("Traceback")
    assert isinstance(caught.value, PolicyUnavailable) and not policy.connected


def test_a_reply_without_actions_is_a_protocol_mismatch(server: FakeOpenpiServer) -> None:
    server.behaviour.fault = "no_actions"
    policy = _policy(server.uri)
    with pytest.raises(PolicyUnavailable, match=r"protocol mismatch: .* has no 'actions' \(got server_timing\)"):
        policy.infer(_observation())
    policy.close()


def test_an_empty_chunk_is_invalid(server: FakeOpenpiServer) -> None:
    server.behaviour.horizon = 0
    policy = _policy(server.uri)
    with pytest.raises(InvalidAction, match="at least one step"):
        policy.infer(_observation())
    policy.close()


# --- helpers for the benchmark and by hand ------------------------------------------------


def test_serve_in_background_returns_uri_and_stop() -> None:
    uri, stop = serve_in_background(delay_s=0.0)
    policy = _policy(uri)
    assert len(policy.infer(_observation())) == 10
    policy.close()
    stop()
    with pytest.raises(PolicyUnavailable):
        _policy(uri).reset("pick", 0)


def test_fake_server_runs_as_a_module(free_port: int) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "carryon_sim.harness.fakes.openpi_server", "--port", str(free_port), "--horizon", "4"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # printed once listening
        assert f"ws://127.0.0.1:{free_port}" in line
        policy = _policy(f"ws://127.0.0.1:{free_port}")
        assert len(policy.infer(_observation())) == 4
        policy.close()
    finally:
        process.terminate()
        process.wait(timeout=10)
