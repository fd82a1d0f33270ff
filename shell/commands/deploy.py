"""`lifeboat deploy RUNBOOK…`: the work pools, `failover`, each runbook's scheduled flows, and
the automations that re-run a failover whose worker died.

Two process pools: `lifeboat` (the control plane's workers, at the secondary site or a third)
runs everything but the second `watch` of each runbook, which runs with `vantage=secondary`
on `lifeboat-secondary`: a worker at the secondary site, so detection hears the primary from
two independent places (`flows/deploy.py`). A pool it creates fixes the command, environment
and working directory of every flow run (no run's job variables can change what the worker
starts); a pool that exists already is left as it is, with a warning when a run could.

Run with PREFECT_API_URL set, from a checkout of the project: with `--repository URL` every
flow run checks that repository out at the checkout's HEAD commit (flows/pull.py: Prefect's `git_clone`, with a per-host mirror)
and runs there, so a worker needs only the package installed, no checkout of its own; without
it, from the folder the workers will run in (a checkout, or any folder where the package is
installed). Runbooks inside it are written in relative, shipped examples by name. Re-running
it updates the same deployments (and the one failover automation) in place.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from lifeboat_dr.kernel.errors import ConfigError, ProviderUnavailable
from lifeboat_dr.shell.cli import COMMANDS

HEARTBEAT_ENV = "PREFECT_FLOWS_HEARTBEAT_FREQUENCY"

PLAN_FILE = Path(".lifeboat/deploy/prefect.yaml")
AUTOMATIONS = ("failover-on-confirmed-outage", "lifeboat-failover-crashed", "lifeboat-failover-rerun")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "deploy",
        help=COMMANDS["deploy"],
        description="Create the `lifeboat` and `lifeboat-secondary` process work pools if missing, "
        "the shared `failover` deployment with its automation, and one set of scheduled "
        "deployments per runbook (watch from the control plane and from the secondary, certify, "
        "replicate, prestage, drills, audit) with the runbook path written in. The pools it creates "
        "let no flow run set its own command, environment or working directory; it warns about an "
        "existing pool that does. Then start workers: `PREFECT_FLOWS_HEARTBEAT_FREQUENCY=30 prefect "
        "worker start --pool lifeboat`, and at the secondary site the same with `--pool "
        "lifeboat-secondary`.",
    )
    p.add_argument(
        "runbooks",
        nargs="+",
        metavar="RUNBOOK",
        help="runbook YAML files to protect, or shipped examples by name (demo, llama-70b-pretrain, …)",
    )
    p.add_argument("--pool", default="lifeboat", help="process work pool name (default: lifeboat)")
    p.add_argument(
        "--secondary-pool",
        default="lifeboat-secondary",
        help="process work pool of the worker at the secondary site that runs each runbook's "
        "second watch (vantage=secondary); must differ from --pool (default: lifeboat-secondary)",
    )
    p.add_argument(
        "--template",
        default=None,
        metavar="FILE",
        help="deployment template (default: Lifeboat's prefect.yaml, shipped with the package)",
    )
    p.add_argument(
        "--heartbeat",
        type=int,
        default=30,
        metavar="SECONDS",
        help="failover runs send a heartbeat this often (>= 30); two missed mark the run Crashed "
        "and it is scheduled again for another worker. Workers set it in their environment "
        f"({HEARTBEAT_ENV}; the pools fix every run's): deploy prints the line (default: 30)",
    )
    p.add_argument(
        "--repository",
        metavar="URL",
        help="git URL the workers clone the project from (https, ssh, file://), pinned to this "
        "checkout's HEAD commit; the runbooks given must be committed there. Without it, every "
        "run works in this folder, which must then exist on each worker's host",
    )
    p.add_argument(
        "--json", action="store_true", help="print the pools, deployments and worker commands as JSON"
    )
    p.set_defaults(handler=run)


def run(args) -> int:
    import yaml

    from lifeboat_dr.flows.deploy import (
        GitSource,
        cadence_plan,
        deployment_names,
        deployment_plan,
        fleet_groups,
        pools_of,
        runbook_target,
        shipped_template,
    )
    from lifeboat_dr.providers.orchestrator.prefect_api import (
        ensure_crash_recovery,
        ensure_process_pool,
        pool_warnings,
        require_api_url,
    )

    root = Path.cwd()
    template = shipped_template() if args.template is None else _template(args.template)
    targets = [runbook_target(path, root) for path in args.runbooks]
    if args.heartbeat < 30:
        raise ConfigError(f"--heartbeat {args.heartbeat}: Prefect sends flow heartbeats at most every 30s")
    source = None
    if args.repository:
        source = GitSource(args.repository, _committed(root, [t.path for t in targets]))
    plan = deployment_plan(
        template,
        targets,
        root,
        pool=args.pool,
        secondary_pool=args.secondary_pool,
        heartbeat_s=args.heartbeat,
        source=source,
    )
    require_api_url()
    pools = pools_of(plan)
    made = {}
    for pool in pools:  # created with command, env and working directory fixed (locked_job_template)
        made[pool] = ensure_process_pool(pool)
        if not args.json:
            print(f"work pool {pool!r}: {made[pool]}")
    periods = {}
    for given, target in zip(args.runbooks, targets, strict=True):  # once Prefect answered
        cadences = cadence_plan(template, target)
        periods[target.name] = cadences.summary()
        if not args.json:
            print(f"{target.name}: {periods[target.name]}")
        for line in cadences.warnings:
            print(f"lifeboat deploy: warning: {given}: {line}", file=sys.stderr)
    groups = fleet_groups(targets)
    if not args.json:
        for line in groups:
            print(line)
    for line in pool_warnings(pools):
        print(f"lifeboat deploy: warning: {line}", file=sys.stderr)
    PLAN_FILE.parent.mkdir(parents=True, exist_ok=True)
    PLAN_FILE.write_text(yaml.safe_dump(plan, sort_keys=False))
    done = subprocess.run(
        [sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--all", "--prefect-file", str(PLAN_FILE)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        raise ProviderUnavailable(f"prefect deploy failed ({PLAN_FILE}): " + " | ".join(tail))
    ensure_crash_recovery("failover", heartbeat_s=args.heartbeat)
    beat = f"{HEARTBEAT_ENV}={args.heartbeat}"  # from the worker's environment: a run sets none
    if args.json:
        workers = [
            f"{beat} prefect worker start --pool {p}" for p in (args.pool, args.secondary_pool) if p in pools
        ]
        doc = {
            "pools": made,
            "cadences": periods,
            "deployments": list(deployment_names(plan)),
            "automations": list(AUTOMATIONS),
            "fleet": groups,
            "workers": workers,
        }
        print(json.dumps(doc, indent=2))
        return 0
    for name in deployment_names(plan):
        print(f"deployment {name}")
    print(f"automations: {', '.join(AUTOMATIONS)}")
    print(f"{len(plan['deployments'])} deployments on pool(s) {', '.join(pools)}; start workers with:")
    print(f"  {beat} prefect worker start --pool {args.pool}    # control plane: secondary or third site")
    if args.secondary_pool in pools:
        print(
            f"  {beat} prefect worker start --pool {args.secondary_pool}    # at the secondary site "
            "(its watch is the second vantage); both with one shared LIFEBOAT_STATE_DIR"
        )
    return 0


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise ConfigError(f"--repository: {root} is not a git checkout ({done.stderr.strip()[:200]})")
    return done.stdout.strip()


def _committed(root: Path, runbooks: list[str]) -> str:
    """The checkout's HEAD commit, which the workers will clone; refused in one line when a
    runbook inside the project is not committed there as it is here (the workers would read
    another file, or none)."""
    commit = _git(root, "rev-parse", "HEAD")
    for path in runbooks:
        if Path(path).is_absolute():  # outside the project, or a shipped example's name
            raise ConfigError(
                f"--repository: {path} is outside {root}: a worker's clone cannot hold it; "
                "put it in the repository"
            )
        if not (root / path).is_file():
            continue  # a shipped example, by name: every worker's installed package has it
        if _git(root, "status", "--porcelain", "--", path) or not _git(root, "ls-files", "--", path):
            raise ConfigError(
                f"--repository: {path} is not committed as it is here: the workers clone "
                f"{commit[:12]} and would read another runbook; commit it first"
            )
    return commit


def _template(path: str) -> dict:
    import yaml

    try:
        template = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(template, dict):
        raise ConfigError(f"{path}: not a prefect.yaml document")
    return template
