"""`carryon catalog`: the perception catalog of your objects (perception_node.catalog_file).

`list` shows what a catalog knows; `add NAME PHOTO...` gives an object reference
appearances from photos of it (the photo's central region, its background colours removed:
`Catalog.with_reference_images`) and, when given, its nominal size, then writes the file.
Offline: no graph is needed; perception_node reads the file at start-up.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from carryon_bringup.cli.common import EXIT_OK, EXIT_USAGE, Subparsers, console, err

HEADER = (
    "Perception catalog (perception_node.catalog_file): reference appearances (colour descriptor,\n"
    "height, footprint) per object type. Written by `carryon catalog add`; docs/perception.md,\n"
    '"Adding objects".'
)

CATALOG_HELP = "catalog file (default: <config dir>/perception/catalog_robot.yaml)"


def add_catalog(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    cmd = sub.add_parser(
        "catalog",
        parents=[common],
        help="the perception catalog of your objects: list, or add an object from photos",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = cmd.add_subparsers(dest="catalog_command", required=True, metavar="ACTION")
    listing = actions.add_parser("list", parents=[common], help="the objects a catalog knows")
    listing.add_argument(
        "--catalog", default="", help="catalog file (default: <config dir>/perception/catalog_robot.yaml)"
    )
    listing.set_defaults(handler=cmd_list)
    adding = actions.add_parser("add", parents=[common], help="add an object (or more views of one) from photos")
    adding.add_argument("name", help="the object's name, as scene memory and requests call it (e.g. red_mug)")
    adding.add_argument("photos", nargs="+", help="photos of the object alone, centred (PNG or JPEG)")
    adding.add_argument("--height-m", type=float, default=None, help="its height, metres (helps tell objects apart)")
    adding.add_argument("--footprint-m", type=float, default=None, help="its widest horizontal extent, metres")
    adding.add_argument(
        "--catalog", default="", help="catalog file (default: <config dir>/perception/catalog_robot.yaml)"
    )
    adding.set_defaults(handler=cmd_add)


def _catalog_path(args: argparse.Namespace) -> Path:
    if args.catalog:
        return Path(args.catalog)
    return Path(args.config_dir or "config") / "perception" / "catalog_robot.yaml"


def cmd_list(args: argparse.Namespace) -> int:
    from carryon_common.core.errors import ConfigError
    from carryon_perception.core.catalog import Catalog

    path = _catalog_path(args)
    try:
        catalog = Catalog.load(path)
    except ConfigError as exc:
        err.print(f"error: {exc}")
        return EXIT_USAGE
    if not catalog.entries:
        console.print(f"{path}: no objects (everything perceived is unknown_<n>)")
        return EXIT_OK
    for name, entry in sorted(catalog.entries.items()):
        size = ", ".join(
            f"{what} {value:.3f} m"
            for what, value in (("height", entry.height_m), ("footprint", entry.footprint_m))
            if value is not None
        )
        console.print(f"{name}: type {entry.type}, {len(entry.references)} reference(s){', ' + size if size else ''}")
    return EXIT_OK


def cmd_add(args: argparse.Namespace) -> int:
    import numpy as np
    from PIL import Image, UnidentifiedImageError

    from carryon_common.core.errors import ConfigError
    from carryon_perception.core.catalog import Catalog

    path = _catalog_path(args)
    for value, flag in ((args.height_m, "--height-m"), (args.footprint_m, "--footprint-m")):
        if value is not None and not 0.0 < value < 2.0:
            err.print(f"error: {flag} {value}: expected metres between 0 and 2")
            return EXIT_USAGE
    try:
        catalog = Catalog.load(path)
    except ConfigError as exc:
        err.print(f"error: {exc}")
        return EXIT_USAGE
    images = []
    for photo in args.photos:
        try:
            with Image.open(photo) as image:
                images.append(np.asarray(image.convert("RGB"), dtype=np.uint8))
        except (OSError, UnidentifiedImageError) as exc:
            err.print(f"error: {photo}: not a readable image: {exc}")
            return EXIT_USAGE
    try:
        updated = catalog.with_reference_images(args.name, images)
    except ValueError as exc:
        err.print(f"error: {exc}")
        return EXIT_USAGE
    entry = updated.entries[args.name]
    sizes = {
        "height_m": args.height_m if args.height_m is not None else entry.height_m,
        "footprint_m": args.footprint_m if args.footprint_m is not None else entry.footprint_m,
    }
    entries = {
        name: replace(e, **sizes) if e.type == entry.type else e for name, e in updated.entries.items()
    }  # every entry of its type has its size (they look and measure the same)
    Catalog(entries).save(path, HEADER)
    added = len(images)
    total = len(entries[args.name].references)
    console.print(f"{path}: {args.name} (type {entry.type}) +{added} reference(s), {total} in all")
    console.print("perception_node reads the catalog at start-up; list the name in perception_node.objects")
    return EXIT_OK
