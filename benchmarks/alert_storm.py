"""200 runbooks alerting at once (a region loss), on Prefect with PostgreSQL: each failover
created exactly once, and alert -> run-created p99 beside a bare Prefect client's.

The real path: `prefect server start` on a private PostgreSQL cluster, the failover deployment
with prefect.yaml's failover-on-confirmed-outage automation (no worker: runs are created, not
executed), and `lifeboat serve` as its own process guarding every runbook. Each runbook's
outage is confirmed by two Alertmanager alert groups (two independent sources), and each group
is delivered twice, as two Alertmanager replicas of one HA pair send it: all 4 x N POSTs start
at once; a POST that fails is retried with backoff, as Alertmanager retries a notification,
and every attempt's outcome is counted. Latency: the run's server-side `created` minus the moment that runbook's first POST
started. Baseline, in the same run on the same server: a bare Prefect client creating N runs of
the same deployment at once (`create_flow_run_from_deployment`), timed the same way.

    python -m benchmarks alert_storm        (LIFEBOAT_BENCH_RUNBOOKS=200; --quick: 20)
"""

from __future__ import annotations

import asyncio
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

TOKEN = "storm-token"
RATIO = 1.2  # the goal: the alert path's p99 within 1.2x of the bare client's
ATTEMPTS = 4  # tries of one webhook notification, 0.5 s, 1 s, 2 s apart


@dataclass
class StormResult:
    """What one storm measured: seconds per runbook, runs per runbook, the POSTs' outcomes."""

    alert_latency: dict[str, float]
    bare_latency: dict[str, float]
    runs: Counter  # failover runs per runbook stem (storm and bare runbooks alike)
    attempts: Counter = field(default_factory=Counter)  # each POST attempt's outcome; "lost": gave up
    decided: dict[str, float] = field(default_factory=dict)  # first POST -> the receiver's confirmation

    @property
    def lost(self) -> int:
        return self.attempts["lost"]

    def p99(self, xs: dict[str, float]) -> float:
        return percentile(list(xs.values()), 0.99)


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def _wait_answers(url: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except urllib.error.HTTPError:  # it answers (405 for GET on a POST route)
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not come up (exit {proc.poll()})") from None
            time.sleep(0.3)


async def _runs_by_runbook(client, deployment_id) -> Counter:
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    counts: Counter = Counter()
    offset = 0
    while True:
        page = await client.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
            limit=200,
            offset=offset,
        )
        counts.update(Path(str(r.parameters.get("runbook"))).stem for r in page)
        if len(page) < 200:
            return counts
        offset += 200


async def _created(client, deployment_id, names: list[str], timeout: float) -> dict[str, datetime]:
    """Each runbook's first failover run's `created`, once all have one."""
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    deadline = time.monotonic() + timeout
    first: dict[str, datetime] = {}
    wanted = set(names)
    while time.monotonic() < deadline:
        offset = 0
        while True:
            page = await client.read_flow_runs(
                deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
                limit=200,
                offset=offset,
            )
            for r in page:
                stem = Path(str(r.parameters.get("runbook"))).stem
                if stem in wanted and (stem not in first or r.created < first[stem]):
                    first[stem] = r.created
            if len(page) < 200:
                break
            offset += 200
        if wanted <= first.keys():
            return first
        await asyncio.sleep(0.2)
    missing = sorted(wanted - first.keys())
    raise TimeoutError(f"no failover run for {len(missing)} runbook(s) within {timeout:.0f}s: {missing[:5]}")


async def _alert_storm(serve_url: str, names: list[str]) -> tuple[dict[str, datetime], Counter]:
    """Every runbook's two alert groups, each sent by two replicas, all at once. A failed
    POST is retried with backoff, as Alertmanager retries a notification: the Counter has
    each attempt's outcome (HTTP status, or the client's error and which of the replica's two
    POSTs it was) and `lost`, the notifications that failed every attempt."""
    import httpx

    from tests.alertmanager_webhooks import two_sources

    bodies = {n: two_sources(n) for n in names}  # one notification per group, sent twice
    started: dict[str, datetime] = {}
    attempts: Counter = Counter()
    go = asyncio.Event()
    # One client per replica, made before the clock starts, as each Alertmanager holds its own
    # connection: one client's pool of 800 connections costs the sender ~10 ms of CPU a POST
    # (it walks its pool on every request), which the receiver would be blamed for.
    tls = ssl.create_default_context()  # unused on http://, but each client would load its own
    replicas = [
        (n, httpx.AsyncClient(base_url=serve_url, timeout=120, verify=tls)) for n in names for _ in range(2)
    ]

    async def deliver(http, body: dict, nth: str) -> None:
        for attempt in range(ATTEMPTS):
            try:
                r = await http.post(
                    "/alerts/alertmanager", json=body, headers={"Authorization": f"Bearer {TOKEN}"}
                )
                outcome = str(r.status_code)
            except httpx.HTTPError as e:
                outcome = type(e).__name__
            if outcome == "200":
                attempts["200"] += 1
                return
            attempts[f"{outcome} on the {nth} POST"] += 1
            await asyncio.sleep(0.5 * 2**attempt)
        attempts["lost"] += 1

    async def replica(name: str, http) -> None:
        async with http:
            await go.wait()
            started.setdefault(name, datetime.now(UTC))
            for nth, body in zip(("first", "second"), bodies[name], strict=True):
                await deliver(http, body, nth)

    tasks = [asyncio.create_task(replica(n, http)) for n, http in replicas]
    await asyncio.sleep(0.1)
    go.set()
    await asyncio.gather(*tasks)
    return started, attempts


async def _confirmed_at(api_url: str, names: list[str]) -> dict[str, datetime]:
    """When the receiver decided each runbook's outage: its `lifeboat.outage.confirmed` event's
    `occurred` (the receiver's clock at that request), as the Prefect server stored it."""
    import httpx

    wanted, found = set(names), {}
    body = {"filter": {"event": {"name": ["lifeboat.outage.confirmed"]}}, "limit": 50}
    async with httpx.AsyncClient(timeout=60) as http:
        page = (await http.post(f"{api_url}/events/filter", json=body)).raise_for_status().json()
        while True:
            for e in page["events"]:
                name = e["resource"].get("prefect.resource.name")
                if name in wanted:
                    found[name] = datetime.fromisoformat(e["occurred"])
            if not page.get("next_page"):
                return found
            page = (await http.get(page["next_page"])).raise_for_status().json()


async def _bare_storm(client, deployment_id, paths: list[Path]) -> dict[str, datetime]:
    """A bare Prefect client creating one run per runbook, all at once."""
    started: dict[str, datetime] = {}
    go = asyncio.Event()

    async def create(path: Path) -> None:
        await go.wait()
        started[path.stem] = datetime.now(UTC)
        await client.create_flow_run_from_deployment(deployment_id, parameters={"runbook": str(path)})

    tasks = [asyncio.create_task(create(p)) for p in paths]
    await asyncio.sleep(0.1)
    go.set()
    await asyncio.gather(*tasks)
    return started


def storm(api_url: str, runbooks: int, *, settle_s: float = 5.0, timeout: float = 300) -> StormResult:
    """Against the Prefect server at `api_url`: deploy the failover with its automation,
    start `lifeboat serve` on `runbooks` generated runbooks, alert them all at once (each
    group twice), then create as many runs with a bare client; count and time both."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from lifeboat_dr.flows.automation import failover_triggers
    from lifeboat_dr.flows.failover import failover
    from lifeboat_dr.testing.prefect_servers import free_port
    from tests.alertmanager_webhooks import alerting_runbook

    with (
        tempfile.TemporaryDirectory(prefix="lifeboat-storm-") as tmp,
        temporary_settings({PREFECT_API_URL: api_url}),
    ):
        folder = Path(tmp)
        deployment_id = failover.to_deployment(name="failover", triggers=failover_triggers()).apply()
        names = [f"storm-{i:03d}" for i in range(runbooks)]
        guarded = [alerting_runbook(folder, n) for n in ["warm-up", *names]]
        bare = [folder / f"bare-{i:03d}.yaml" for i in range(runbooks)]  # names only: never read
        port = free_port()
        env = {
            **os.environ,
            "PREFECT_API_URL": api_url,
            "LIFEBOAT_ALERTMANAGER_TOKEN": TOKEN,
            "LIFEBOAT_STATE_DIR": str(folder / "state"),
        }
        with open(folder / "serve.log", "wb") as log:
            serve = subprocess.Popen(
                [sys.executable, "-m", "lifeboat_dr", "serve", *map(str, guarded), "--port", str(port)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        serve_url = f"http://127.0.0.1:{port}"
        try:
            _wait_answers(f"{serve_url}/alerts/alertmanager", serve)

            async def measure() -> StormResult:
                async with get_client() as client:
                    # One runbook first: the automation is live once its run appears.
                    await _alert_storm(serve_url, ["warm-up"])
                    await _created(client, deployment_id, ["warm-up"], timeout)
                    began, attempts = await _alert_storm(serve_url, names)
                    created = await _created(client, deployment_id, names, timeout)
                    bare_began = await _bare_storm(client, deployment_id, bare)
                    bare_created = await _created(client, deployment_id, [p.stem for p in bare], timeout)
                    await asyncio.sleep(settle_s)  # a late duplicate would show by now
                    runs = await _runs_by_runbook(client, deployment_id)
                decided = await _confirmed_at(api_url, names)
                return StormResult(
                    {n: (created[n] - began[n]).total_seconds() for n in names},
                    {n: (bare_created[n] - bare_began[n]).total_seconds() for n in bare_began},
                    runs,
                    attempts,
                    {n: (decided[n] - began[n]).total_seconds() for n in decided},
                )

            return asyncio.run(measure())
        finally:
            if os.environ.get("LIFEBOAT_BENCH_SERVE_LOG"):
                shutil.copy(folder / "serve.log", os.environ["LIFEBOAT_BENCH_SERVE_LOG"])
            from lifeboat_dr.testing.emulators import stop

            stop(serve)


def main() -> None:
    from lifeboat_dr.testing.prefect_servers import postgres_cluster, postgres_database, prefect_server

    quick = os.environ.get("LIFEBOAT_BENCH_QUICK") == "1"
    n = int(os.environ.get("LIFEBOAT_BENCH_RUNBOOKS", "20" if quick else "200"))
    with postgres_cluster() as cluster, prefect_server(postgres_database(cluster, "alert_storm")) as api:
        result = storm(api, n)
    storm_counts = [result.runs[f"storm-{i:03d}"] for i in range(n)]
    bare_counts = [result.runs[f"bare-{i:03d}"] for i in range(n)]
    alert, base = result.alert_latency.values(), result.bare_latency.values()
    print(f"{n} runbooks alerting at once on PostgreSQL; 2 alert groups each, each group sent twice")
    print(f"alert POST attempts: {dict(sorted(result.attempts.items()))} (outcome: count)")
    print(f"failover runs per runbook: {dict(sorted(Counter(storm_counts).items()))} (runs: runbooks)")
    print(f"bare client runs per runbook: {dict(sorted(Counter(bare_counts).items()))}")
    after = [result.alert_latency[n] - d for n, d in result.decided.items()]
    for label, xs in (
        ("alert -> run", list(alert)),
        ("  receiver", list(result.decided.values())),  # POST -> outage confirmed
        ("  automation", after),  # confirmed -> run created: event, trigger, action
        ("bare client", list(base)),
    ):
        print(
            f"{label:13s} p50 {percentile(xs, 0.5):.2f} s  p90 {percentile(xs, 0.9):.2f} s  "
            f"p99 {percentile(xs, 0.99):.2f} s  max {max(xs):.2f} s"
        )
    p99, bare_p99 = result.p99(result.alert_latency), result.p99(result.bare_latency)
    once = set(storm_counts) == {1} and not result.lost
    ok = once and p99 <= RATIO * bare_p99
    print(
        f"GOAL alert-storm-{n}: {'PASS' if ok else 'FAIL'} {p99:.2f} s vs {bare_p99:.2f} s "
        f"(<= {RATIO}x){'' if once else f'; NOT exactly once ({result.lost} notifications lost)'}"
    )


if __name__ == "__main__":
    main()
