"""The client-visible serving RTO through the deployed path, not the sandbox's 50 ms loop.

Toy model servers behind a real HAProxy (`lifeboat_dr.flows.serving_sandbox`), an independent
client process at 40 req/s (`lifeboat_dr.standins.serving_client`); the primary is SIGKILLed;
then what a deployment does: the `watch` flow (one Prefect flow run per tick, on a real
`prefect server start`) every `CADENCE_S` reads the runbook's probes — `endpoint_health` and
`router_health` among them — into the quorum until it confirms, and the `failover` flow's
serving path runs with the watch's evidence, as the automation hands it over (each step a task
run). The kill falls at a random point of the watch's schedule. Prints, per run: kill → confirmed, confirmed → all traffic on the standby, and the
client's error window (first failed request to the first good one after the switch), against
the runbook's RTO target. Nothing here asserts a speed.

    python -m benchmarks serving_deployed_rto
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import yaml

RUNS = 3
CADENCE_S = 1.0  # the watch's schedule: what a 10 s RTO needs (detection, then a ~1 s switch)
ROOT = Path(__file__).resolve().parents[1]


def one_run(folder: Path) -> dict:
    from prefect import flow

    from lifeboat_dr.flows.serving import serve_failover
    from lifeboat_dr.flows.serving_sandbox import serving_sandbox
    from lifeboat_dr.flows.watch import watch
    from lifeboat_dr.runbooks.loader import load_runbook
    from lifeboat_dr.standins.serving_client import client_window, read_samples

    @flow(name="failover")
    def failover(rb, run_id, outage_started_at, detected_at, evidence):
        return serve_failover(
            rb, run_id=run_id, outage_started_at=outage_started_at, detected_at=detected_at,
            evidence=evidence, force=False, approval=None, dry_run=False,
        )  # fmt: skip

    os.environ["LIFEBOAT_STATE_DIR"] = str(folder / "detect")  # this run's own signal state
    rb = load_runbook(ROOT / "runbooks" / "chat-serving.yaml")
    with serving_sandbox(rb, folder / "box") as box:
        path = folder / "chat-serving.yaml"  # the watch flow reads the runbook from its file
        path.write_text(yaml.safe_dump(box.rb.model_dump(mode="json")))
        shutil.copytree(ROOT / "runbooks" / "jobs", folder / "jobs")  # its task YAML, beside it
        samples = folder / "client.jsonl"
        client = subprocess.Popen(
            [sys.executable, "-m", "lifeboat_dr.standins.serving_client", "--url", f"{box.frontend}/v1/infer",
             "--rate", "40", "--workers", "4", "--out", str(samples)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        try:
            while sum(s["ok"] for s in read_samples(samples)) < 20:
                time.sleep(0.05)
            watch(str(path))  # healthy before the kill: the signal state has a baseline
            killed = datetime.now(UTC)
            box.kill_primary()
            time.sleep(random.uniform(0, CADENCE_S))  # the schedule's next tick: any time after the kill
            ticks = 0
            while True:
                tick = time.monotonic()
                decision = watch(str(path))
                ticks += 1
                if decision["state"] == "confirmed":
                    break
                time.sleep(max(0.0, CADENCE_S - (time.monotonic() - tick)))
            confirmed = datetime.now(UTC)
            evidence = [f"{r['signal']}: {r['summary']}" for r in decision["evidence"]]
            result = failover(box.rb, f"rto-{killed:%H%M%S}", killed, confirmed, evidence)
            time.sleep(0.5)
        finally:
            client.terminate()
            client.wait(10)
    from lifeboat_dr.core.ledger import LedgerFile

    (entry,) = [e for e in LedgerFile().read("chat-serving") if e.run_id == result["run_id"]]
    switched = entry.phases.get("traffic_switched")
    window = client_window(read_samples(samples), switched or datetime.now(UTC), "40 req/s, 4 workers")
    return {
        "outcome": result["outcome"],
        "ticks": ticks,
        "detect_s": (confirmed - killed).total_seconds(),
        "switch_s": (switched - confirmed).total_seconds() if switched else None,
        "window_s": window.window.total_seconds() if window.window else None,
        "errors": f"{window.errors}/{window.requests}",
        "target_s": rb.rto_target.total_seconds(),
    }


def main() -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from lifeboat_dr.testing.prefect_servers import prefect_server

    with tempfile.TemporaryDirectory(prefix="lifeboat-serving-rto-") as tmp:
        os.environ["LIFEBOAT_LEDGER"] = str(Path(tmp) / "ledger.jsonl")
        with prefect_server() as url, temporary_settings(updates={PREFECT_API_URL: url}):
            for i in range(RUNS):
                r = one_run(Path(tmp) / f"run-{i}")
                print(
                    f"run {i + 1}: {r['outcome']}; watch every {CADENCE_S:g} s, {r['ticks']} tick(s): kill → "
                    f"confirmed {r['detect_s']:.2f} s, confirmed → switched {r['switch_s']:.2f} s; client "
                    f"error window {r['window_s']} s ({r['errors']} failed), target {r['target_s']:g} s",
                    flush=True,
                )
    print(f"load average: {os.getloadavg()}")


if __name__ == "__main__":
    main()
