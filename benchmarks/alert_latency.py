"""Alert POST -> failover flow run created: the detection path's latency (target: 1 s median).

A local Prefect server (prefect_test_harness), the failover automation from prefect.yaml
on a deployment of the failover flow (no worker: the run is created, not executed), and `lifeboat serve`'s app under uvicorn on loopback.
Each trial POSTs two Alertmanager webhooks (two alert groups, hence two independent
sources) with two signals of a fresh runbook, so the quorum confirms on the second;
latency is the run's server-side `created` time minus the moment the first POST started. Baseline: the same
`lifeboat.outage.confirmed` event emitted directly, without the receiver.

    python -m benchmarks alert_latency        (LIFEBOAT_BENCH_TRIALS=20 for more trials)
"""

from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from benchmarks._goals import goal
from tests.alertmanager_webhooks import alerting_runbook, two_sources

TARGET_S = 1.0
TOKEN = "bench-token"


def _serve(app):
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.02)
    return server, server.servers[0].sockets[0].getsockname()[1]


def _wait_for_run(client, deployment_id, runbook: str, timeout: float = 30.0):
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = client.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id]))
        )
        for run in runs:
            if run.parameters.get("runbook") == runbook:
                return run
        time.sleep(0.01)
    raise TimeoutError(f"no failover run for {runbook} within {timeout}s")


def _stats(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return statistics.median(xs), xs[min(len(xs) - 1, round(0.9 * (len(xs) - 1)))]


def main() -> None:
    import httpx
    from prefect.client.orchestration import get_client
    from prefect.testing.utilities import prefect_test_harness

    from lifeboat_dr.core.detection.events import outage_event
    from lifeboat_dr.core.detection.quorum import QuorumPolicy, decide
    from lifeboat_dr.core.detection.signals import Reading, Status
    from lifeboat_dr.flows.automation import failover_triggers
    from lifeboat_dr.flows.failover import failover
    from lifeboat_dr.providers.orchestrator.prefect_api import emit_spec as emit
    from lifeboat_dr.shell.alertmanager import AlertmanagerSettings, alertmanager_routes
    from lifeboat_dr.shell.server import create_app

    trials = int(os.environ.get("LIFEBOAT_BENCH_TRIALS", "10"))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    with tempfile.TemporaryDirectory() as tmp, prefect_test_harness(server_startup_timeout=120):
        folder = Path(tmp)
        deployment_id = failover.to_deployment(name="failover", triggers=failover_triggers()).apply()
        names = [f"bench-{i:03d}" for i in range(trials)]
        paths = {n: alerting_runbook(folder, n) for n in names}
        settings = AlertmanagerSettings(
            bearer_token=TOKEN, runbooks=list(paths.values()), state_dir=folder / "state"
        )
        server, port = _serve(create_app(alertmanager_routes(settings)))
        time.sleep(1.0)  # let the server's automation cache pick up the trigger

        receiver, bare = [], []
        with (
            get_client(sync_client=True) as client,
            httpx.Client(base_url=f"http://127.0.0.1:{port}") as http,
        ):
            for name in names:
                started = datetime.now(UTC)
                for body in two_sources(name):
                    r = http.post(
                        "/alerts/alertmanager", json=body, headers={"Authorization": f"Bearer {TOKEN}"}
                    )
                    r.raise_for_status()
                run = _wait_for_run(client, deployment_id, str(paths[name]))
                receiver.append((run.created - started).total_seconds())

            policy = QuorumPolicy(signals=("gpu_health", "alertmanager"), quorum=2)
            for i in range(trials):
                name = f"bare-{i:03d}"
                started = datetime.now(UTC)
                readings = [Reading(s, s, Status.failing, started, s) for s in policy.signals]
                emit(outage_event(decide(readings, started, policy), name, name))
                run = _wait_for_run(client, deployment_id, name)
                bare.append((run.created - started).total_seconds())
        server.should_exit = True

    med, p90 = _stats(receiver)
    bmed, bp90 = _stats(bare)
    print(f"trials: {trials} (alert POST -> failover flow run created, via the prefect.yaml automation)")
    print(f"receiver: median {med * 1000:.0f} ms, p90 {p90 * 1000:.0f} ms, max {max(receiver) * 1000:.0f} ms")
    print(f"bare emit_event baseline: median {bmed * 1000:.0f} ms, p90 {bp90 * 1000:.0f} ms")
    print("receiver trials (ms):", " ".join(f"{x * 1000:.0f}" for x in receiver))
    print("bare trials (ms):", " ".join(f"{x * 1000:.0f}" for x in bare))
    print(f"receiver / bare (median): {med / bmed:.2f}x")
    goal(
        "alert_latency alert POST -> failover run created, median",
        med <= TARGET_S,
        f"{med * 1000:.0f} ms ({med / bmed:.2f}x)",
        f"a bare emit_event {bmed * 1000:.0f} ms",
        f"<= {TARGET_S:.0f} s",
    )


if __name__ == "__main__":
    main()
