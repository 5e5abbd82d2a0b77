"""`carryon reflect`: versioned recovery skills, shown, diffed, or revised from failed attempts by an LLM."""

from __future__ import annotations

import argparse
from pathlib import Path

from carryon_bringup.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Subparsers, console, err
from carryon_common.core.llm_backends import LOCAL_SERVER_URL


def add_reflect(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    reflect_cmd = sub.add_parser(
        "reflect",
        parents=[common],
        help="versioned recovery skills: show, diff, or revise one from failed attempts",
        description="Without --attempts: show a skill's version (newest unless --version), or --diff A B. "
        "With --attempts FILE (JSONL of recovery attempts): an OpenAI-compatible LLM reviews up to three failed "
        "ones and proposes one revision; a valid proposal is written as the next version, an invalid one is "
        "rejected with the reason.",
    )
    reflect_cmd.add_argument("skill", help="e.g. regrasp")
    reflect_cmd.add_argument("--skills-dir", default="", help="library folder (default: <config dir>/skills/recovery)")
    reflect_cmd.add_argument("--version", type=int, default=None, help="version to show or start from")
    reflect_cmd.add_argument("--diff", type=int, nargs=2, metavar=("A", "B"), help="what changed from vA to vB")
    reflect_cmd.add_argument("--attempts", default="", help="JSONL file of recovery attempts to review")
    reflect_cmd.add_argument(
        "--base-url",
        default=LOCAL_SERVER_URL,
        help=f"OpenAI-compatible endpoint (default {LOCAL_SERVER_URL}: llm_server_node, the graph's local model)",
    )
    reflect_cmd.add_argument("--model", default="", help="model name sent to the endpoint")
    reflect_cmd.add_argument("--api-key-env", default="OPENAI_API_KEY", help="variable holding the key")
    reflect_cmd.add_argument("--llm-timeout", type=float, default=120.0, help="seconds per LLM request")
    reflect_cmd.set_defaults(handler=cmd_reflect)


def cmd_reflect(args: argparse.Namespace) -> int:
    import yaml

    from carryon_common.core.openai_client import openai_client_from_env
    from carryon_recovery.core.library import SkillLibrary, diff
    from carryon_recovery.core.reflection import Attempt, reflect

    root = Path(args.skills_dir) if args.skills_dir else Path(args.config_dir or "config") / "skills" / "recovery"
    library = SkillLibrary(root)
    if args.diff:
        old, new = (library.load(args.skill, v) for v in args.diff)
        for line in diff(old, new) or ["no differences"]:
            console.print(line)
        return EXIT_OK
    if not args.attempts:
        version = library.load(args.skill, args.version)
        console.print(yaml.safe_dump(version.model_dump(mode="json"), sort_keys=False), end="")
        return EXIT_OK
    lines = Path(args.attempts).read_text(encoding="utf-8").splitlines()
    try:
        attempts = [Attempt.model_validate_json(line) for line in lines if line.strip()]
    except ValueError as exc:
        err.print(f"error: {args.attempts}: not a JSONL file of recovery attempts: {exc}")
        return EXIT_USAGE
    llm = openai_client_from_env(args.base_url, args.model, args.api_key_env, args.llm_timeout)
    outcome = reflect(llm, library, args.skill, attempts, version=args.version)
    if outcome.written is not None:
        console.print(f"{args.skill} v{outcome.written.version} written: {outcome.reason}")
        return EXIT_OK
    (console if outcome.decision == "NO_UPDATE" else err).print(f"{outcome.decision}: {outcome.reason}")
    return EXIT_OK if outcome.decision == "NO_UPDATE" else EXIT_FAILED
