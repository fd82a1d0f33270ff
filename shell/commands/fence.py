"""`lifeboat fence RUNBOOK --by NAME --reason TEXT [--json]`: fence the old primary by hand,
straight against the stores (no Prefect), as the failover's fence step does
(`lifeboat_dr.core.hand_fence`).

Exit 0: fenced, or fenced already (nothing raised); 75: retry (a store that holds the site
state did not answer, nothing written; or a failover holds the runbook's lock); 1: refused
(another runbook's lease, a serving runbook, no name given)."""

from __future__ import annotations

import json
import os
import sys
import uuid

from lifeboat_dr.shell.cli import COMMANDS, RUNBOOK_HELP

RETRY_EXIT = 75


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "fence",
        help=COMMANDS["fence"],
        description="Fence the primary site's writers when Lifeboat's automation is down: raise the "
        "epoch of the job's lease in the checkpoint stores (the secondary's always; the primary's "
        "when it answers), the old epoch sealed at the commits that count, the secondary active. "
        "Idempotent: with the secondary active already it raises nothing (and writes the lease to "
        "a store that missed it and answers now). Recorded in the ledger as a manual fence. The "
        "job resumed on the secondary commits under the epoch it prints (LIFEBOAT_EPOCH).",
    )
    p.add_argument("runbook", metavar="RUNBOOK", help=RUNBOOK_HELP)
    p.add_argument("--by", metavar="NAME", default=None, help="who fences, for the ledger (default: $USER)")
    p.add_argument(
        "--reason", metavar="TEXT", required=True, help="why the primary is fenced, for the ledger"
    )
    p.add_argument("--json", action="store_true", help="print what was done as JSON")
    p.set_defaults(handler=run)


def run(args) -> int:
    from lifeboat_dr.core.hand_fence import KIND, fence_by_hand
    from lifeboat_dr.core.ledger import LedgerFile
    from lifeboat_dr.flows.guard import lock_lease_s
    from lifeboat_dr.flows.wiring import build_ledger, open_witness, store_opener
    from lifeboat_dr.kernel.errors import ConfigError, LifeboatError, StandDown
    from lifeboat_dr.runbooks.loader import load_runbook

    rb = load_runbook(args.runbook)
    if rb.serving is not None:
        raise ConfigError(
            f"runbook {rb.name} serves traffic (serving:): no job of it writes checkpoints, so there "
            "is no writer to fence; `lifeboat failover` moves its traffic"
        )
    by = args.by if args.by is not None else os.environ.get("USER") or os.environ.get("LOGNAME") or ""
    if not by.strip():
        raise ConfigError("--by NAME: who fences (there is no $USER to default to)")
    opener = store_opener(rb)
    try:
        primary = opener(rb.primary.store)
    except LifeboatError:  # not even openable: the secondary's store decides alone
        primary = None
    LedgerFile().ensure_writable()  # an unwritable ledger: said before anything is fenced
    run_id = f"manual-fence-{uuid.uuid4().hex[:12]}"
    try:
        done = fence_by_hand(
            primary,
            opener(rb.secondary.store),
            open_witness(rb),
            runbook=rb.name,
            by=by,
            reason=args.reason,
            ledger=build_ledger(rb, run_id=run_id, kind=KIND),
            run_id=run_id,
            lock_lease_s=lock_lease_s(),
        )
    except StandDown as e:  # a failover holds the runbook's lock: it fences; retry once it is done
        print(f"lifeboat fence: {e}", file=sys.stderr)
        return RETRY_EXIT
    if args.json:
        print(json.dumps(done.to_dict(), indent=2))
    else:
        print("\n".join(done.lines()))
    return 0
