"""Render a PNG of each scene (or the ones named) into a run folder.

python -m carryon_sim.render_scenes [--scene NAME ...] [--out DIR] [--width W --height H] [--seed N]
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

from PIL import Image

from carryon_common.core.errors import CarryOnError
from carryon_sim.core.cameras import CameraRig
from carryon_sim.core.scene import load_scene, scene_path, scenes_dir
from carryon_sim.core.world import SCENE_CAMERA, World


def render(names: list[str], folder: Path, out: Path, *, width: int, height: int, seed: int) -> list[Path]:
    """Write `<out>/<scene>.png` for each scene of `folder` (or those named); return the files."""
    paths = [scene_path(folder, n) for n in names] if names else sorted(folder.glob("*.yaml"))
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in paths:
        world = World(load_scene(path), seed=seed)
        rig = CameraRig(world.model, world.object_of_body, width, height, detailed=True)
        try:
            frame = rig.render(world.data, SCENE_CAMERA)
        finally:
            rig.close()
        target = out / f"{path.stem}.png"
        Image.fromarray(frame.rgb).save(target)
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scene", action="append", default=[], help="scene name (repeatable; default: all)")
    parser.add_argument("--scenes-dir", type=Path, default=scenes_dir(), help="folder of scene files")
    parser.add_argument("--out", type=Path, help="output folder (default runs/<time>-scenes)")
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out = args.out or Path("runs") / f"{dt.datetime.now():%Y%m%d-%H%M%S}-scenes"
    try:
        for path in render(args.scene, args.scenes_dir, out, width=args.width, height=args.height, seed=args.seed):
            print(path)
    except CarryOnError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
