"""The `lifeboat` command: one subcommand per module in `shell.commands`.

Each command module exposes `register(subparsers)`; the handler it sets returns the exit
code. A `LifeboatError` raised by a handler is a user-facing problem: printed as one line,
exit 1 (or the error's own `exit_code`), never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from lifeboat.errors import LifeboatError

COMMANDS = (  # in the order an on-call meets them
    "validate",
    "render",
    "schema",
    "certify",
    "manifest",
    "replicate",
    "plan",
    "failover",
    "approve",
    "report",
    "drill",
    "audit",
    "advise",
    "serve",
    "deploy",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lifeboat",
        description="Disaster-recovery runbooks for GPU training and inference, as code that runs.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"shell.commands.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except LifeboatError as e:
        print(f"lifeboat {args.command}: {e}", file=sys.stderr)
        return getattr(e, "exit_code", 1)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
