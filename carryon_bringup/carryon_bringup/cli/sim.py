"""`carryon perturb`: simulator only, perturb the world now or once an object is lifted."""

from __future__ import annotations

import argparse

from carryon_bringup.cli.common import EXIT_FAILED, EXIT_OK, Subparsers, console, err, namespace, service_outcome


def add_perturb(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    perturb = sub.add_parser(
        "perturb", parents=[common], help="simulator only: perturb the world now, or once an object is lifted"
    )
    perturb.add_argument("kind", choices=["drop", "displace", "relocate", "slip", "uncover", "cover", "place"])
    perturb.add_argument("--object", default="", help="object to perturb (scene name; not needed for drop)")
    perturb.add_argument(
        "--by",
        nargs=3,
        type=float,
        default=[0.0, 0.0, 0.0],
        metavar=("DX", "DY", "DZ"),
        help="displace: metres, world frame",
    )
    perturb.add_argument("--location", default="", help="relocate / place: location; cover: the item to hide")
    perturb.add_argument(
        "--when-lifted",
        default="",
        metavar="OBJECT",
        help="wait until OBJECT is held and lifted by --lift-m, then perturb",
    )
    perturb.add_argument("--lift-m", type=float, default=0.05, help="lift that triggers --when-lifted (default 0.05)")
    perturb.add_argument(
        "--near",
        nargs=2,
        metavar=("OBJECT", "METRES"),
        help="with --when-lifted: only once it is carried within METRES (xy) of OBJECT",
    )
    perturb.add_argument("--wait-timeout", type=float, default=900.0, help="give up waiting after this many s")
    perturb.set_defaults(handler=cmd_perturb)


def cmd_perturb(args: argparse.Namespace) -> int:
    from geometry_msgs.msg import Vector3

    from carryon_bringup.node import GraphClient
    from carryon_interfaces.srv import SimPerturb

    dx, dy, dz = args.by
    kind = getattr(SimPerturb.Request, f"KIND_{args.kind.upper()}")  # the choices are the message's kinds
    request = SimPerturb.Request(
        kind=kind, object=args.object, location=args.location, displacement=Vector3(x=dx, y=dy, z=dz)
    )
    with GraphClient(namespace(args), args.timeout) as client:
        if args.when_lifted:
            client.prepare_perturb()  # sent the moment the object is lifted, not after a discovery
            console.print(f"waiting until {args.when_lifted} is lifted by {args.lift_m:.2f} m ...")
            near = (args.near[0], float(args.near[1])) if args.near else None
            try:
                x, y, z = client.wait_until_lifted(args.when_lifted, args.lift_m, args.wait_timeout, near)
            except TimeoutError as exc:
                err.print(str(exc))
                return EXIT_FAILED
            console.print(f"{args.when_lifted} held at ({x:.3f}, {y:.3f}, {z:.3f}) m")
        response = client.perturb(request)
    code = service_outcome(response.status, response.message)
    if code == EXIT_OK:
        console.print(f"perturbation: {response.message}")
    return code
