"""Alert POST -> failover run created, on the production database and the embedded one:
`prefect server start` on SQLite vs on PostgreSQL (a private cluster, Debian's `postgresql`),
with one runbook alerting at a time and with 50 alerting at once (a region outage hits many
jobs). Each failover must still be created exactly once.

Per database: the failover deployment with the prefect.yaml automation (no worker: runs are
created, not executed) and `lifeboat serve`'s receiver under uvicorn. A trial POSTs two
Alertmanager webhooks (two groups: two independent sources) for one runbook; latency is the
run's server-side `created` minus the first POST's start. The measuring runs in a child
process whose PREFECT_API_URL is that server.

    python -m benchmarks topology_latency     (LIFEBOAT_BENCH_TRIALS=20, LIFEBOAT_BENCH_BURST=50)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path


def _percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def measure(trials: int, burst: int) -> dict:
    """In the child: sequential single-runbook trials, then `burst` runbooks at once."""
    import httpx
    from prefect.client.orchestration import get_client

    from benchmarks.alert_latency import TOKEN, _serve
    from lifeboat_dr.flows.automation import failover_triggers
    from lifeboat_dr.flows.failover import failover
    from lifeboat_dr.shell.alertmanager import AlertmanagerSettings, alertmanager_routes
    from lifeboat_dr.shell.server import create_app
    from tests.alertmanager_webhooks import alerting_runbook, two_sources

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        deployment_id = failover.to_deployment(name="failover", triggers=failover_triggers()).apply()
        singles = [f"one-{i:03d}" for i in range(trials)]
        many = [f"many-{i:03d}" for i in range(burst)]
        paths = {n: alerting_runbook(folder, n) for n in singles + many}
        settings = AlertmanagerSettings(
            bearer_token=TOKEN, runbooks=list(paths.values()), state_dir=folder / "s"
        )
        server, port = _serve(create_app(alertmanager_routes(settings)))
        time.sleep(2.0)  # the server's automation cache picks up the trigger
        headers = {"Authorization": f"Bearer {TOKEN}"}

        def alert(http, name) -> datetime:
            started = datetime.now(UTC)
            for body in two_sources(name):
                http.post("/alerts/alertmanager", json=body, headers=headers).raise_for_status()
            return started

        def runs_by_runbook(client) -> dict[str, list]:
            from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

            out: dict[str, list] = {}
            offset = 0
            while True:
                page = client.read_flow_runs(
                    deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
                    limit=200,
                    offset=offset,
                )
                for run in page:
                    out.setdefault(Path(str(run.parameters.get("runbook"))).stem, []).append(run)
                if len(page) < 200:
                    return out
                offset += 200

        def wait_for(client, names, timeout=120.0) -> dict[str, list]:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                runs = runs_by_runbook(client)
                if all(n in runs for n in names):
                    return runs
                time.sleep(0.05)
            missing = [n for n in names if n not in runs_by_runbook(client)]
            raise TimeoutError(f"no failover run for {len(missing)} runbook(s) within {timeout:.0f}s")

        single, started = [], {}
        with (
            get_client(sync_client=True) as client,
            httpx.Client(base_url=f"http://127.0.0.1:{port}") as http,
        ):
            for name in singles:
                began = alert(http, name)
                run = wait_for(client, [name])[name][0]
                single.append((run.created - began).total_seconds())

            gate = threading.Barrier(burst)

            def storm(name):
                with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as h:
                    gate.wait()
                    started[name] = alert(h, name)

            threads = [threading.Thread(target=storm, args=(n,)) for n in many]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            runs = wait_for(client, many)
            burst_lat = [(runs[n][0].created - started[n]).total_seconds() for n in many]
            time.sleep(5.0)  # a late duplicate would show up by now
            counts = Counter({n: len(rs) for n, rs in runs_by_runbook(client).items()})
        server.should_exit = True
    return {
        "single": single,
        "burst": burst_lat,
        "runs_per_runbook": sorted(set(counts[n] for n in singles + many)),
    }


def _child(api_url: str, trials: int, burst: int) -> dict:
    env = {**os.environ, "PREFECT_API_URL": api_url, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.topology_latency", "measure", str(trials), str(burst)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    from lifeboat_dr.testing.prefect_servers import PostgresMissing, postgres_cluster, prefect_server

    trials = int(os.environ.get("LIFEBOAT_BENCH_TRIALS", "20"))
    burst = int(os.environ.get("LIFEBOAT_BENCH_BURST", "50"))
    results = {}
    with prefect_server() as api:
        results["SQLite"] = _child(api, trials, burst)
    try:
        with postgres_cluster() as db, prefect_server(db) as api:
            results["PostgreSQL"] = _child(api, trials, burst)
    except PostgresMissing as e:
        print(f"PostgreSQL skipped: {e}")
    print(f"alert POST -> failover run created; {trials} runbooks one at a time, then {burst} at once")
    print("| database | runbooks alerting | p50 | p99 | max | failover runs per runbook |")
    print("| --- | --- | --- | --- | --- | --- |")
    for db, r in results.items():
        for label, xs in (("1", r["single"]), (str(burst), r["burst"])):
            print(
                f"| {db} | {label} | {_percentile(xs, 0.5) * 1000:.0f} ms | {_percentile(xs, 0.99) * 1000:.0f} ms "
                f"| {max(xs) * 1000:.0f} ms | {', '.join(map(str, r['runs_per_runbook']))} |"
            )
    for db, r in results.items():
        verdict = (
            "exactly once" if r["runs_per_runbook"] == [1] else f"NOT exactly once: {r['runs_per_runbook']}"
        )
        print(f"{db}: each failover created {verdict}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["measure"]:
        print(json.dumps(measure(int(sys.argv[2]), int(sys.argv[3]))))
    else:
        main()
