"""`lifeboat drill RUNBOOK --kind K [--scope az|region] [--trainer numpy|torch]`: rehearse a failure.

`--kind partition` is the quarterly AZ test: the partition drill in network namespaces
(`lifeboat_dr.flows.drills.partition`, root, iproute2 and moto's server; it plays its own
sites, so RUNBOOK's policy is not used), outside the drill flow: it starts its own Prefect
server in the control plane's namespace."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from lifeboat_dr.flows.drills import ALL_KINDS, SCOPES, TRAINER_KINDS, kinds_for
from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.shell.cli import COMMANDS, RUNBOOK_HELP


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "drill",
        help=COMMANDS["drill"],
        description="Run the drill flow (against PREFECT_API_URL, or a temporary local server): "
        "inject the fault into a sandboxed copy of the runbook (never production), fail over, "
        "and check the result. Prints every check; exit 0 when all pass, 1 otherwise.",
    )
    p.add_argument("runbook", metavar="RUNBOOK", help=RUNBOOK_HELP)
    p.add_argument(
        "--kind",
        required=True,
        choices=(*ALL_KINDS, PARTITION, "all"),
        help=f"which failure to rehearse ({PARTITION}: network namespaces, root)",
    )
    p.add_argument("--scope", choices=SCOPES, default=None, help="region-outage: block a zone or a region")
    p.add_argument(
        "--trainer",
        choices=tuple(TRAINER_KINDS),
        default="numpy",
        help="the sandbox job: numpy (every kind) or torch (torchrun + DCP; process-kill)",
    )
    p.add_argument(
        "--hang-in",
        choices=("step", "save"),
        default=None,
        help="nccl-hang: stop rank 1 in a training step or a checkpoint save (default: the drill picks)",
    )
    p.add_argument("--json", action="store_true", help="print every drill's checks as JSON")
    p.set_defaults(handler=run)


def run(args) -> int:
    if args.kind == PARTITION:
        return partition(args)
    from lifeboat_dr.flows.drill import DrillFailed, drill
    from lifeboat_dr.runbooks.loader import load_runbook
    from lifeboat_dr.standins.trainer.jobs import trainer_job

    rb = load_runbook(args.runbook)  # a bad runbook is a one-line error, not a failed flow run
    kinds_for(args.kind, rb, args.trainer)  # so is a kind the runbook or the trainer does not drill
    if why := trainer_job(args.trainer).missing():
        raise ConfigError(why)
    try:
        results = drill(
            args.runbook, kind=args.kind, scope=args.scope, trainer=args.trainer, hang_in=args.hang_in
        )
    except DrillFailed as e:
        print(json.dumps({"passed": False, "failure": str(e)}) if args.json else e)
        return 1
    if args.json:
        drills = [
            {**r, "checks": [{"name": n, "passed": ok, "detail": d} for n, ok, d in r["checks"]]}
            for r in results
        ]
        print(json.dumps({"passed": True, "drills": drills}, indent=2, default=str))
        return 0
    for r in results:
        print(f"drill {r['kind']}: passed in {r['seconds']}s (run {r['run_id']}, outcome {r['outcome']})")
        for name, ok, detail in r["checks"]:
            print(f"  [{'PASS' if ok else 'FAIL'}] {name}: {detail}")
    return 0


PARTITION = "partition"
PARTITION_TIMEOUT_S = 480  # the drill bounds each of its own steps far below this


def partition(args) -> int:
    """The partition drill, from this checkout, as one command: its checks, exit 0 only when
    all pass and no namespace is left."""
    if os.geteuid() != 0:
        raise ConfigError(
            "the partition drill needs root: it builds network namespaces (`ip netns`); "
            f"run it as root: sudo lifeboat drill {args.runbook} --kind partition"
        )
    if shutil.which("ip") is None:
        raise ConfigError("the partition drill needs iproute2's `ip` (apt-get install iproute2)")
    if not (Path(sys.executable).parent / "moto_server").exists():
        raise ConfigError(
            "the partition drill's primary store is moto's S3 server: pip install 'moto[server,s3]' "
            f"beside {sys.executable}"
        )
    with tempfile.TemporaryDirectory(prefix="lifeboat-partition-cli-") as tmp:
        out = Path(tmp) / "result.json"
        argv = [sys.executable, "-m", "lifeboat_dr.flows.drills.partition.drill", "--json", str(out)]
        try:
            done = subprocess.run(argv, cwd=tmp, capture_output=True, text=True, timeout=PARTITION_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise ConfigError(f"the partition drill did not finish within {PARTITION_TIMEOUT_S} s") from None
        if not out.exists():  # it said why it could not run (namespaces refused), or it crashed
            said = (done.stdout + done.stderr).strip().splitlines()
            raise ConfigError(
                f"the partition drill did not run: {said[-1] if said else f'exit {done.returncode}'}"
            )
        result = json.loads(out.read_text())
    checks = result.get("checks") or []
    left = result.get("namespaces_left") or []
    passed = bool(checks) and all(ok for _, ok, _ in checks) and not left and result.get("control_exit") == 0
    print(f"drill {PARTITION}: {'passed' if passed else 'FAILED'} in {result.get('seconds')}s")
    for name, ok, detail in checks:
        print(f"  [{'PASS' if ok else 'FAIL'}] {name}: {detail}")
    f = result.get("failover") or {}
    if f:
        print(f"  failover: RTO {f.get('rto_s')} s, RPO {f.get('rpo_s')} s, outcome {f.get('outcome')}")
    print(f"  network namespaces left: {', '.join(left) or 'none'}")
    if not passed:
        print(f"  kept for the post-mortem: {result.get('workdir')}")
    return 0 if passed else 1
