"""Rewrite build-machine paths that the ROS 2 PyPI wheels hard-code in their cmake exports.

The `ros-*` message wheels are built in a manylinux container; their exported cmake
files point at `/opt/python/cp311-cp311/...`. Building our own interface package
against them fails ("includes non-existent path") until those paths name this
interpreter's include directory and numpy's. Idempotent: files already fixed are left
untouched. See ../shared/notes/ros2-from-pypi.md.

Usage: python scripts/fix_ros_wheel_cmake.py <prefix>   (prefix = the virtualenv)
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

import numpy

_BUILD_PYTHON_INCLUDE = "/opt/python/cp311-cp311/include/python3.11"
_BUILD_NUMPY_INCLUDE = "/opt/python/cp311-cp311/lib/python3.11/site-packages/numpy/_core/include"


def fix_prefix(prefix: Path) -> int:
    """Rewrite every `share/**/*.cmake` under `prefix`; return how many files changed."""
    replacements = {
        _BUILD_NUMPY_INCLUDE: numpy.get_include(),
        _BUILD_PYTHON_INCLUDE: sysconfig.get_paths()["include"],
    }
    changed = 0
    for path in sorted((prefix / "share").rglob("*.cmake")):
        text = path.read_text(encoding="utf-8")
        fixed = text
        for old, new in replacements.items():
            fixed = fixed.replace(old, new)
        if fixed != text:
            path.write_text(fixed, encoding="utf-8")
            changed += 1
    return changed


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    prefix = Path(sys.argv[1])
    if not (prefix / "share").is_dir():
        print(f"error: {prefix}/share does not exist; is {prefix} a virtualenv with ROS wheels?", file=sys.stderr)
        return 2
    changed = fix_prefix(prefix)
    print(f"fixed build-machine paths in {changed} cmake file(s) under {prefix}/share")
    return 0


if __name__ == "__main__":
    sys.exit(main())
