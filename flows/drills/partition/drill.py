"""The partition drill: a region cut off so that connections *hang*, detected from two vantage
points, failed over for real, and the zombie primary kept out of the active lineage afterwards.

Hosts are network namespaces (`flows/drills/partition/netns.py`): the primary (its S3 store, moto; a
stand-in for the region's API, the provider signal's `detection.provider_endpoint`; and the
trainer with its uploader), the secondary (its compute; its store is the site's disk, a
`file://` store) and the control plane (`prefect server start` and the drill's flows). Then:

1. the trainer checkpoints on the primary; one replication round copies them to the secondary;
2. the primary's link is cut (SYNs vanish); detection rounds run the runbook's probes from the
   control plane and, at once, from the secondary's namespace; the quorum folds them by
   vantage (`lifeboat_dr.core.detection.vantage`) until it confirms: detection time;
3. the failover runs as a Prefect flow on the control plane's server, every call on the hung
   primary bounded (`LIFEBOAT_STORE_DEADLINE`): certify on the secondary's store, fence (the
   primary's store cannot be reached: the lease is sealed by time), provision and resume the
   trainer in the secondary's namespace, first healthy step: RTO and RPO in the ledger;
4. the link comes back: the zombie primary, still training, commits on its own store; the
   site state reaches that store and its next commit is refused; a copy from it is refused.

Needs root and iproute2; says why and stops otherwise. Every process runs under a timeout and
every namespace is removed, also on failure.

    python -m benchmarks partition_drill            # prints the figures (from a checkout)
    python -m lifeboat_dr.flows.drills.partition.drill --json F [--tag T] [--workdir D]   # the CI test
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from lifeboat_dr.flows.drills.partition.netns import Sites, leftovers, unavailable
from lifeboat_dr.flows.drills.partition.sites import BUCKET, STEP_SECONDS

PREFECT_PORT = 4200
API_PORT = 8080  # the primary region's API stand-in: an endpoint apart from its store
DRILL_ENV = {  # the drill's timeouts: short, bounded; product defaults are untouched
    "LIFEBOAT_STORE_DEADLINE": "3",  # every call on a store, retries included
    "LIFEBOAT_PROBE_DEADLINE": "2",  # every probe call (build_probes); the product default, 1 s timed out under load
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
}
CONTROL_TIMEOUT_S = 300  # the whole control-plane script; each of its steps has its own bound


def write_runbook(workdir: Path, sites: Sites) -> Path:
    from lifeboat_dr.standins.trainer.jobs import trainer_job

    # the resumed job trains on, paced like the primary's, until the drill tears it down
    command = trainer_job("numpy").command(steps=1_000_000, every=5) + f" --step-seconds {STEP_SECONDS}"
    job = " ".join(sites.argv("secondary", [command]))
    endpoint = f"http://{sites.addr['primary']}:5000"
    api = f"http://{sites.addr['primary']}:{API_PORT}/healthz"
    path = workdir / "partition.yaml"
    path.write_text(
        f"""name: partition
workload: finetuning
targets: {{rpo: 2m, rto: 5m}}
primary: {{infra: aws/us-east-1, store: 's3://{BUCKET}/ckpt', endpoint_url: '{endpoint}'}}
secondary: {{infra: local, store: 'file://{workdir}/secondary', candidates: [{{infra: local}}]}}
job: {{command: "{job}", resume: {{arg: '--resume {{checkpoint}}'}}}}
checkpoint: {{layout: manifest, cadence: 5s, freshness_factor: 2}}
approval: {{required: false}}
detection:
  signals: [training_progress, checkpoint_freshness, provider]
  quorum: 2
  window: 1m
  stall_after: 10s
  heartbeat: 's3://{BUCKET}/ckpt/heartbeat.json'
  provider_endpoint: '{api}'
verify: {{first_step_timeout: 60s, parity_steps: 3, parity_tolerance: 0.0, loss_log: '{workdir}/primary-loss.jsonl'}}
failover: {{retries: 0, retry_delay: 1s, expected_ready: 30s, step_timeout: 90s}}
"""
    )
    return path


def run(workdir: Path, tag: str | None = None) -> dict:
    """Build the sites, run the drill from the control plane's namespace, tear everything down.
    `tag` names the namespaces (default: unique to this process)."""
    env = {**os.environ, **DRILL_ENV, "PYTHONPATH": os.pathsep.join(sys.path)}
    env["LIFEBOAT_LEDGER"] = str(workdir / "ledger.jsonl")
    bin_dir = Path(sys.executable).parent
    with Sites(tag) as sites:
        rb = write_runbook(workdir, sites)
        out = open(workdir / "sites.log", "ab")  # noqa: SIM115 - closed below
        try:
            sites.spawn("primary", [str(bin_dir / "moto_server"), "-H", sites.addr["primary"], "-p", "5000"],
                        stdout=out, stderr=out)  # fmt: skip
            api_root = workdir / "region-api"  # any answer, even 404, is the API up
            api_root.mkdir(exist_ok=True)
            sites.spawn("primary", [sys.executable, "-m", "http.server", str(API_PORT), "--bind", sites.addr["primary"],
                        "--directory", str(api_root)], stdout=out, stderr=out)  # fmt: skip
            sites.spawn("primary", [sys.executable, "-m", "lifeboat_dr.flows.drills.partition.sites", "primary", str(rb)],
                        env=env, stdout=out, stderr=out, cwd=workdir)  # fmt: skip
            home = workdir / "prefect"
            server_env = {**env, "PREFECT_HOME": str(home), "PREFECT_API_URL": ""}
            sites.spawn("control", [str(bin_dir / "prefect"), "server", "start", "--host", sites.addr["control"],
                        "--port", str(PREFECT_PORT)], env=server_env, stdout=out, stderr=out)  # fmt: skip
            api = f"http://{sites.addr['control']}:{PREFECT_PORT}/api"
            result_file = workdir / "result.json"
            control = sites.run(
                "control",
                [
                    sys.executable,
                    "-m",
                    "lifeboat_dr.flows.drills.partition.control",
                    str(rb),
                    sites.tag,
                    str(result_file),
                ],
                timeout=CONTROL_TIMEOUT_S,
                env={**env, "PREFECT_HOME": str(home), "PREFECT_API_URL": api},
                cwd=workdir,
                stdout=out,
                stderr=out,
            )
            result = json.loads(result_file.read_text()) if result_file.exists() else {}
            result["control_exit"] = control.returncode
        finally:
            out.close()
    ledger = workdir / "ledger.jsonl"
    if ledger.exists():  # the failover's last snapshot, as `lifeboat report` reads it
        result["ledger"] = json.loads(ledger.read_text().splitlines()[-1])
    result["namespaces_left"] = leftovers(sites.tag)
    result["tag"] = sites.tag
    return result


def report(result: dict) -> list[str]:
    lines = [f"{'PASS' if ok else 'FAIL'} {name}: {detail}" for name, ok, detail in result.get("checks", [])]
    d = result.get("detection", {})
    if d:
        lines.append(
            f"detection: {d.get('seconds')} s after the cut ({d.get('rounds')} round(s)), {d.get('summary')}"
        )
    f = result.get("failover", {})
    if f:
        lines.append(
            f"failover: outcome {f.get('outcome')}, RTO {f.get('rto_s')} s, RPO {f.get('rpo_s')} s, "
            f"fence {f.get('fence_s')} s on {f.get('fenced_on')}"
        )
        steps = ", ".join(f"{m} {s} s" for m, s in (f.get("steps_s") or {}).items())
        lines.append(f"failover steps: {steps}")
    return lines


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if why := unavailable():
        print(f"skipped: {why}")
        return
    workdir = Path(tempfile.mkdtemp(prefix="lifeboat-partition-", dir=_option(argv, "--workdir")))
    started = time.monotonic()
    try:
        result = run(workdir, _option(argv, "--tag"))
    finally:
        result_log = (workdir / "sites.log").read_text(errors="replace")[-4000:] if workdir.exists() else ""
    result["seconds"] = round(time.monotonic() - started, 1)
    print("\n".join(report(result)))
    print(f"one drill: {result['seconds']} s wall")
    if out := _option(argv, "--json"):
        Path(out).write_text(json.dumps({**result, "log_tail": result_log, "workdir": str(workdir)}))
    passed = result.get("checks") and all(ok for _, ok, _ in result["checks"])
    if passed and not result["namespaces_left"]:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"kept for the post-mortem: {workdir}")


def _option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv[:-1] else None


if __name__ == "__main__":
    main()
