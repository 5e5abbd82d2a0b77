"""Two hosts on one Linux machine: a robot PC and a GPU box as network namespaces joined by a
veth pair, for the tests and the benchmark of the graph split across hosts (issue 22).

Each namespace has its own loopback and one end of the link (10.77.0.1/24 on the robot side,
10.77.0.2/24 on the GPU side). DDS finds the other side by multicast over the link
(ROS_AUTOMATIC_DISCOVERY_RANGE=SUBNET). The GPU side talks UDPv4 only
(config/dds/fastdds_udp.xml): Fast DDS joins two processes of one machine through /dev/shm,
which namespaces share, and would bypass the link. The robot side keeps the usual profile,
so its own nodes share memory as on a real robot PC, and reach the GPU side over UDP (the
only transport that side offers). `set_link(False)` takes the link down (both directions)
as a pulled cable or a dead switch would.

Making namespaces needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN); `unavailable()` says why
not, for a test to skip with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

UDP_PROFILE = "dds/fastdds_udp.xml"  # under the config folder
SUBNET = "10.77.0"


@dataclass(frozen=True)
class Host:
    """One side: its namespace, its end of the link and its address."""

    netns: str
    device: str
    address: str

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` run inside this host's namespace (the environment passes through)."""
        return ["ip", "netns", "exec", self.netns, *argv]


class NetnsError(RuntimeError):
    pass


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10, check=False)
    if done.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")


def unavailable() -> str | None:
    """Why two namespaces cannot be made here (None when they can)."""
    if shutil.which("ip") is None:
        return "no `ip` command (Debian: iproute2)"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    name = f"carryon_probe_{os.getpid()}"
    try:
        _ip("netns", "add", name)
    except NetnsError as exc:
        return f"network namespaces are not allowed here ({exc})"
    _ip("netns", "del", name)
    return None


class TwoHosts:
    """`with TwoHosts() as hosts:` makes hosts.robot and hosts.gpu, removed on exit."""

    def __init__(self, tag: str | None = None) -> None:
        tag = tag or str(os.getpid())
        self.robot = Host(f"carryon_robot_{tag}", f"cor{tag}"[:15], f"{SUBNET}.1")
        self.gpu = Host(f"carryon_gpu_{tag}", f"cog{tag}"[:15], f"{SUBNET}.2")
        self.link_up = False

    def __enter__(self) -> TwoHosts:
        try:
            for host in (self.robot, self.gpu):
                _ip("netns", "add", host.netns)
            _ip("link", "add", self.robot.device, "type", "veth", "peer", "name", self.gpu.device)
            for host in (self.robot, self.gpu):
                _ip("link", "set", host.device, "netns", host.netns)
                for args in (
                    ("addr", "add", f"{host.address}/24", "dev", host.device),
                    ("link", "set", "lo", "up"),
                    ("link", "set", host.device, "up"),
                    ("route", "add", "224.0.0.0/4", "dev", host.device),  # DDS discovery's multicast
                ):
                    _ip("-n", host.netns, *args)
        except NetnsError:
            self.__exit__()
            raise
        self.link_up = True
        return self

    def set_link(self, up: bool) -> None:
        """Bring the link up or down (the robot side's end: no packet crosses either way)."""
        _ip("-n", self.robot.netns, "link", "set", self.robot.device, "up" if up else "down")
        self.link_up = up

    def env(self, host: Host, base: Mapping[str, str], config_dir: Path) -> dict[str, str]:
        """`base` for a process on `host`: discovery over the link; UDP only on the GPU side."""
        env = {**base, "ROS_AUTOMATIC_DISCOVERY_RANGE": "SUBNET"}
        if host == self.gpu:
            env["FASTDDS_DEFAULT_PROFILES_FILE"] = str((config_dir / UDP_PROFILE).resolve())
        return env

    def __exit__(self, *_exc: object) -> None:
        for host in (self.robot, self.gpu):  # deleting a namespace deletes its end of the link, and the pair
            subprocess.run(["ip", "netns", "del", host.netns], capture_output=True, timeout=10, check=False)
