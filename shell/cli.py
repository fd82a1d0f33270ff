"""The `lifeboat` command: one subcommand per module in `lifeboat_dr.shell.commands`, imported only when run.

Each command module exposes `register(subparsers)`; the handler it sets returns the exit
code. A `LifeboatError` raised by a handler is a user-facing problem: printed as one line,
exit 1 (or the error's own `exit_code`), never a traceback.
"""

from __future__ import annotations

import argparse
import difflib
import gc
import importlib
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from lifeboat_dr.kernel.errors import LifeboatError

COMMANDS = {  # name -> what it does, in the order an on-call meets them
    "validate": "check runbook files; one `file:line: field: message` line per problem",
    "render": "print a runbook as Markdown, with the manual commands for each step",
    "schema": "print the JSON Schema of a runbook",
    "certify": "certify the newest replicated checkpoint and measure the RPO",
    "manifest": "write the Lifeboat manifest (sizes + CRC32C) that commits a checkpoint",
    "replicate": "copy committed checkpoints from the active site to the standby (newest first), then apply retention",
    "plan": "rank the secondary's candidates with $/h, the failed primary blocked",
    "failover": "fail a job over now (the failover flow, run in this process)",
    "fleet-failover": "fail the runbooks of one outage over together: one plan, one approval (whole or per job)",
    "fence": "fence the old primary by hand, straight against the stores (Prefect down)",
    "failback": "bring the job back to the recovered primary (the failback flow)",
    "approve": "approve or reject a failover waiting at its approval gate",
    "report": "show a runbook's failover and drill history, and draw the latest timeline",
    "drill": "rehearse a failure in a sandbox and prove the failover handles it",
    "audit": "checkpoint integrity audit: resume a random sample, compare the loss curve",
    "advise": "advise a checkpoint interval and size the DR budget from the cluster's own numbers",
    "capacity": "check the secondary's declared GPU quota against half of the primaries' GPUs and each runbook's needs",
    "serve": "receive Alertmanager webhooks and Slack approval clicks",
    "keys": "create the approval signing key (for lifeboat serve) and print its public key (for workers)",
    "deploy": "create the work pool and the Prefect deployments for these runbooks",
}
RUNBOOK_HELP = "runbook YAML file, or a shipped example by name (demo, llama-70b-pretrain, …)"


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors suggest the nearest command, choice or flag."""

    def error(self, message: str):
        super().error(message + did_you_mean(self, message))


def did_you_mean(parser: argparse.ArgumentParser, message: str) -> str:
    """ "; did you mean 'failover'?" for an argparse error naming a near miss, else ""."""
    if m := re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message):
        near = difflib.get_close_matches(m[1], re.findall(r"'([^']*)'", m[2]), n=1)
        return f"; did you mean {near[0]!r}?" if near else ""
    if m := re.search(r"unrecognized arguments: (.*)", message):
        flags = sorted(_flags(parser))
        for word in m[1].split():
            if word.startswith("-") and (near := difflib.get_close_matches(word.split("=")[0], flags, n=1)):
                return f"; did you mean {near[0]}?"
    return ""


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of `parser` and of the subcommands registered in it."""
    found = set(parser._option_string_actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _flags(sub)
    return found


def build_parser(argv: list[str] | None = None, *, every: bool = False) -> argparse.ArgumentParser:
    """The parser for `argv`: only the command it names is imported (an on-call's `--help` or
    `validate` must not wait for SkyPilot or Prefect); the others are listed by name. `every`
    registers them all."""
    parser = Parser(
        prog="lifeboat",
        description="Disaster-recovery runbooks for GPU training and inference, as code that runs.",
    )
    parser.add_argument("--version", action="version", version=f"lifeboat {_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = next((a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")), None)
    for name, summary in COMMANDS.items():
        if every or name == chosen:
            module = name.replace("-", "_")  # fleet-failover: shell/commands/fleet_failover.py
            importlib.import_module(f"lifeboat_dr.shell.commands.{module}").register(subparsers)
        else:
            subparsers.add_parser(name, help=summary)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lifeboat-dr")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


@contextmanager
def quick_start() -> Iterator[None]:
    """Around the imports of a short command that only checks or prints a runbook: no pydantic
    plugin discovery (a scan of every installed distribution's entry points, done when the
    model's validators are built) and no cyclic garbage collection (importing allocates much
    and frees little). Both are restored after; an explicit PYDANTIC_DISABLE_PLUGINS wins."""
    had_setting = "PYDANTIC_DISABLE_PLUGINS" in os.environ
    collecting = gc.isenabled()
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
        if not had_setting:
            os.environ.pop("PYDANTIC_DISABLE_PLUGINS", None)


def main(argv: list[str] | None = None) -> int:
    args = build_parser(argv).parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except LifeboatError as e:
        print(f"lifeboat {args.command}: {e}", file=sys.stderr)
        return getattr(e, "exit_code", 1)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `lifeboat report … | head`: the reader has all it wanted
        sys.stderr.close()
        return 141
    except Exception as e:  # Prefect down is the on-call's problem to fix, in one line; a bug shows whole
        down = _prefect_unreachable(e)
        if down is None:
            raise
        print(f"lifeboat {args.command}: {down}", file=sys.stderr)
        return down.exit_code


def _prefect_unreachable(e: Exception):
    if "prefect" not in sys.modules:  # a command that never imported Prefect cannot have failed to reach it
        return None
    from lifeboat_dr.providers.orchestrator.prefect_api import unreachable

    return unreachable(e)


if __name__ == "__main__":
    sys.exit(main())
