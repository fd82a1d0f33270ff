"""What `lifeboat failover` / `lifeboat failback` say before a run that will pause for a
person: where to decide, and, when this machine cannot verify anyone's decision, that only
the policy will, and what decides at once instead. Printed to stderr before the flow starts,
so an on-call is never left looking at a terminal that waits in silence."""

from __future__ import annotations

import sys

from lifeboat_dr.kernel.durations import format_duration


def approval_hint(rb, command: str, approval: str | None) -> list[str]:
    """The lines for `lifeboat COMMAND RUNBOOK` with `--approval APPROVAL` (None: wait)."""
    if approval not in (None, "wait") or not rb.approval.required:
        return []
    from lifeboat_dr.core.approval_keys import public_keys
    from lifeboat_dr.flows.guard import on_this_machine
    from lifeboat_dr.kernel.errors import ConfigError

    policy = f"after {format_duration(rb.approval.timeout)} its policy decides (on_timeout: {rb.approval.on_timeout.value})"
    lines = [
        f"lifeboat {command}: the run pauses for approval; {policy}. Decide in the Prefect UI "
        "(the run's link is on the card below) or with `lifeboat approve RUN_ID --reason …` "
        "(PREFECT_API_URL pointing at the identity proxy: docs/approvals.md)."
    ]
    try:
        verifiable = bool(public_keys())
    except ConfigError as e:
        verifiable, lines[0] = False, lines[0] + f" ({e})"
    if not verifiable:
        instead = (
            f"`lifeboat {command} {rb.path} --approval approve` decides at once (every site of this "
            "runbook is on this machine)"
            if on_this_machine(rb)
            else "set up `lifeboat keys generate` and `lifeboat serve` (docs/approvals.md)"
        )
        lines.append(
            f"lifeboat {command}: this machine has no approval public key (LIFEBOAT_APPROVAL_PUBLIC_KEYS), "
            f"so no person's decision can be verified and only the policy will decide; {instead}."
        )
    return lines


def print_approval_hint(rb, command: str, approval: str | None) -> None:
    for line in approval_hint(rb, command, approval):
        print(line, file=sys.stderr, flush=True)
