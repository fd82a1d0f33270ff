"""`lifeboat plan RUNBOOK [--block INFRA] [--json]`: where the secondary would run, and at what price.

The runbook's candidates in fallback order, priced by SkyPilot's own optimizer with the
failed primary blocked (always) plus any `--block`. Prices come from the catalog the runbook's
`plan.catalog` names (default: live when `sky check` enabled a cloud, else the snapshot
shipped in providers/compute/catalog/v8, no network); `--catalog` overrides it. The source
and the catalog's date are printed. A plan is remembered by its exact inputs (runbook, task
YAML, catalog files, blocks), so asking again during an incident answers at once.
Exit 0 when at least one candidate is feasible, 1 when none is.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.shell.cli import COMMANDS, RUNBOOK_HELP


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "plan",
        help=COMMANDS["plan"],
        description=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument("runbook", metavar="RUNBOOK", help=RUNBOOK_HELP)
    p.add_argument(
        "--block",
        action="append",
        default=[],
        metavar="INFRA",
        help="also block this infra (aws, aws/us-west-2, gcp/us-central1); repeatable",
    )
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument(
        "--catalog",
        choices=("live", "snapshot"),
        help="price over your SkyPilot setup (live) or the shipped snapshot; default: the runbook's plan.catalog",
    )
    p.add_argument(
        "--live", action="store_const", const="live", dest="catalog", help="same as --catalog live"
    )
    p.set_defaults(handler=run)


LIVE_REFRESH_S = 600  # a remembered live plan older than this is refreshed in the background


def build_plan(rb, extra_blocks: list[str], *, catalog: str | None = None) -> dict:
    """The plan as plain data: what `lifeboat plan` prints. `catalog` overrides the
    runbook's `plan.catalog`. The answer is remembered (`memo`): over the snapshot by its
    exact inputs (runbook, task, catalog files, blocks); over a live catalog by the runbook,
    task, blocks and enabled clouds, served at once and recomputed by a background
    `lifeboat plan` once older than LIVE_REFRESH_S (SkyPilot refreshes its catalogs then)."""
    import time

    from lifeboat_dr.providers.compute.memo import fingerprint, remembered
    from lifeboat_dr.providers.compute.skycatalog import SNAPSHOT_DIR, choose_catalog

    blocked = [b for b in dict.fromkeys([rb.primary.infra, *extra_blocks]) if b and b != "local"]
    if rb.secondary.infra == "local":
        return _compute_plan(rb, blocked, None)
    choice = choose_catalog(catalog or rb.plan.catalog)
    live = choice.kind == "live"
    key = fingerprint(
        files=[rb.path, rb.resolve(rb.job.task)],
        trees=[] if live else [SNAPSHOT_DIR],
        blocked=blocked,
        catalog=choice.kind,
        clouds=choice.clouds,
    )
    plan, hit = remembered("plan", key, lambda: _compute_plan(rb, blocked, choice.kind))
    refreshing = hit and live and time.time() - plan.get("computed_at", 0) > LIVE_REFRESH_S
    if refreshing:
        _refresh_in_background(rb, extra_blocks)
    return {**plan, "cached": hit, "refreshing": refreshing}


def _refresh_in_background(rb, extra_blocks: list[str]) -> None:
    """A detached `lifeboat plan --catalog live` that recomputes and rewrites the entry."""
    import os
    import subprocess

    argv = [sys.executable, "-m", "lifeboat_dr", "plan", str(rb.path), "--catalog", "live", "--json"]
    argv += [a for b in extra_blocks for a in ("--block", b)]
    subprocess.Popen(
        argv,
        env={**os.environ, "LIFEBOAT_MEMO_REFRESH": "1"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _compute_plan(rb, blocked: list[str], catalog: str | None) -> dict:
    from lifeboat_dr.flows.wiring import compute_for
    from lifeboat_dr.providers.compute.base import plan_options

    live = None if catalog is None else catalog == "live"
    compute = compute_for(rb, live=live)
    options = compute.plan(plan_options(rb.secondary.candidates), blocked)
    if rb.secondary.infra == "local":
        source = "local provider (no price)"
    else:
        source = "SkyPilot optimizer over the " + getattr(compute, "price_source", "")
    nodes = getattr(compute, "num_nodes", 1)
    feasible = [o for o in options if o.feasible]
    cheapest = min(
        (o for o in feasible if o.hourly_usd is not None), key=lambda o: o.hourly_usd, default=None
    )
    import time

    return {
        "runbook": rb.name,
        "computed_at": time.time(),
        "blocked": blocked,
        "source": source,
        "num_nodes": nodes,
        "cheapest_rank": cheapest.rank if cheapest else None,
        "options": [asdict(o) for o in options],
    }


def run(args) -> int:
    from lifeboat_dr.providers.compute.skycheck import load_runbook_and_task

    rb = load_runbook_and_task(
        args.runbook, catalog=args.catalog
    )  # a task SkyPilot would refuse: its line, not a traceback
    try:
        plan = build_plan(rb, args.block, catalog=args.catalog)
    except ImportError as e:  # pragma: no cover - skypilot is a project dependency
        raise ConfigError(f"cannot plan: {e}") from None
    if args.json:
        print(json.dumps(plan, indent=2))
    else:
        print(render(plan))
    if not any(o["feasible"] for o in plan["options"]):
        print(f"lifeboat plan: no feasible candidate for {rb.name}", file=sys.stderr)
        return 1
    return 0


def render(plan: dict) -> str:
    blocked = ", ".join(plan["blocked"]) or "nothing"
    lines = [
        f"{plan['runbook']}: secondary candidates in fallback order (blocked: {blocked})",
        f"{plan['source']}, {plan['num_nodes']} node(s) per cluster"
        + (" (remembered: same runbook, task and catalog as before)" if plan.get("cached") else "")
        + ("; refreshing it in the background" if plan.get("refreshing") else ""),
        "",
    ]
    rows = [("#", "INFRA", "INSTANCE", "GPUS", "SPOT", "$/HOUR", "")]
    for o in plan["options"]:
        price = f"{o['hourly_usd']:,.2f}" if o["hourly_usd"] is not None else "-"
        note = "cheapest" if o["rank"] == plan["cheapest_rank"] else ""
        if not o["feasible"]:
            note = o["reason"]
        rows.append(
            (
                str(o["rank"] + 1) if o["feasible"] else "-",
                o["infra"],
                o["instance_type"] or "-",
                o["accelerators"] or "-",
                "yes" if o["use_spot"] else "no",
                price if o["feasible"] else "-",
                note,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(6)]
    for r in rows:
        cells = [r[i].rjust(widths[i]) if i == 5 else r[i].ljust(widths[i]) for i in range(6)]
        lines.append("  ".join(cells + [r[6]]).rstrip())
    return "\n".join(lines)
