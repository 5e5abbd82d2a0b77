"""Make the perception catalog of the simulated scenes from the simulator's object models.

Every object of every scene in config/scenes/ is rendered alone from the scene camera, the
wrist camera and close free cameras (carryon_sim.harness.catalog_views); its reference
appearances go to config/perception/catalog_sim.yaml. Prior knowledge of object types for
perception, like a detector's classes; rerun after changing a scene or an object model.

    python scripts/make_perception_catalog.py          # write the catalog
    python scripts/make_perception_catalog.py --check  # exit 1 if the stored one is outdated
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from carryon_perception.core.catalog import Catalog
from carryon_sim.harness.catalog_views import CATALOG_HEADER, build_catalog, catalog_differences

ROOT = Path(__file__).resolve().parents[1]
SCENES = ROOT / "config" / "scenes"
CATALOG = ROOT / "config" / "perception" / "catalog_sim.yaml"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenes", type=Path, default=SCENES, help="folder of scene files (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=CATALOG, help="catalog file (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    args = parser.parse_args(argv)
    made = build_catalog(sorted(args.scenes.glob("*.yaml")))
    if args.check:
        problems = catalog_differences(made, Catalog.load(args.out))
        for problem in problems:
            print(f"{args.out}: {problem}", file=sys.stderr)
        if problems:
            print("rerun: python scripts/make_perception_catalog.py", file=sys.stderr)
        return 1 if problems else 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    made.save(args.out, CATALOG_HEADER)
    print(f"wrote {args.out}: {len(made.entries)} objects, {len({e.type for e in made.entries.values()})} types")
    return 0


if __name__ == "__main__":
    sys.exit(main())
