"""Keep DDS on one network interface of the robot PC (docker/entrypoint.sh, CARRYON_DDS_INTERFACE).

Writes a copy of CarryOn's Fast DDS profile (config/dds/fastdds.xml) whose UDPv4 transport may
use only that interface's IPv4 address (Fast DDS's interfaceWhiteList), and prints the copy's
path. Shared memory between the processes on the PC is unchanged. An interface that does not
exist or has no IPv4 address is an error (exit 2): DDS never falls back to every interface.

    python3 dds_interface.py IFACE PROFILE OUT
"""

from __future__ import annotations

import fcntl
import socket
import struct
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

NS = "http://www.eprosima.com"
_SIOCGIFADDR = 0x8915


def ipv4_of(interface: str) -> str:
    """The IPv4 address of `interface` (Linux); OSError when it has none or does not exist."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        packed = struct.pack("256s", interface.encode()[:15])
        return socket.inet_ntoa(fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, packed)[20:24])


def restrict(profile: Path, address: str) -> str:
    """The profile's XML with every UDPv4 transport limited to `address`."""
    ET.register_namespace("", NS)
    tree = ET.parse(profile)
    udp = [d for d in tree.iter(f"{{{NS}}}transport_descriptor") if d.findtext(f"{{{NS}}}type") == "UDPv4"]
    if not udp:
        raise ValueError(f"{profile} has no UDPv4 transport to restrict")
    for descriptor in udp:
        allowed = ET.SubElement(descriptor, f"{{{NS}}}interfaceWhiteList")
        ET.SubElement(allowed, f"{{{NS}}}address").text = address
    return ET.tostring(tree.getroot(), encoding="unicode")


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    interface, profile, out = argv[0], Path(argv[1]), Path(argv[2])
    try:
        address = ipv4_of(interface)
    except OSError as exc:
        print(f"CARRYON_DDS_INTERFACE={interface}: no IPv4 address on it ({exc.strerror or exc})", file=sys.stderr)
        return 2
    out.write_text(restrict(profile, address))
    print(out)
    print(f"DDS on {interface} ({address}) only", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
