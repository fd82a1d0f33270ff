"""Drills for the inference classes: serving failovers under load, and a batch resume.

    serving-kill           the primary model server is SIGKILLed under client load; the
                           verified standby takes all traffic; the client-visible error window
                           (an independent client process) meets the RTO target
    serving-stale-standby  the standby serves other weights than the certified ones: it is
                           refused and traffic stays where it was
    serving-degraded       the standby passes verification, then fails half its requests:
                           the watch would revert, but the primary is dead: traffic is
                           held on the standby and a person is paged
    serving-rto            the client-visible RTO through the deployed path: the primary is
                           SIGKILLed under client load at a random point of the watch's
                           schedule; the watch's probes and quorum tick at the period
                           `lifeboat deploy` gives this runbook until they confirm; the
                           `failover` flow's serving path runs with the watch's evidence (task
                           runs); the client's error window must be within the RTO target
    batch-resume           the batch job dies mid-way on the primary; resumed on the secondary
                           from its certified progress, every output is there exactly once

Serving drills run in `lifeboat_dr.flows.serving_sandbox` (toy servers behind a real HAProxy on
loopback) and rehearse the serving walk the `failover` flow runs
(`lifeboat_dr.core.serving.failover.serving_failover`, its steps on threads instead of task
runs); the batch drill runs over `file://` stores in the sandbox folder. Each returns the same
`DrillResult` as the training drills, and records a ledger entry marked as a drill.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from lifeboat_dr.core.ledger import ClientWindow
from lifeboat_dr.flows.drills.base import Check, DrillResult, stop_process
from lifeboat_dr.kernel.durations import format_duration as fd

SERVING_KINDS = ("serving-kill", "serving-stale-standby", "serving-degraded", "serving-rto")
BATCH_KINDS = ("batch-resume",)


def run_inference_drill(rb, kind: str, drill_id: str, folder: Path) -> tuple[list[Check], str | None]:
    """Run one inference drill in `folder`; (checks, failover outcome)."""
    if kind in BATCH_KINDS:
        return _batch_resume(rb, drill_id, folder)
    if kind == "serving-rto":
        return _deployed_rto_checks(rb, measure_deployed_rto(rb, folder, drill_id, kind))
    return _serving(rb, kind, drill_id, folder)


@contextmanager
def _client_load(frontend: str, samples: Path) -> Iterator[None]:
    """The independent client process (40 req/s, 4 workers, 1 s timeouts), after its first 20
    good answers; stopped on the way out."""
    from lifeboat_dr.standins.serving_client import read_samples

    client = subprocess.Popen(
        [sys.executable, "-m", "lifeboat_dr.standins.serving_client", "--url", f"{frontend}/v1/infer",
         "--rate", "40", "--workers", "4", "--out", str(samples)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 15
        while sum(s["ok"] for s in read_samples(samples)) < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        yield
    finally:
        stop_process(client)


@dataclass(frozen=True)
class DeployedRto:
    """One serving-rto measurement (the drill's checks and benchmarks/serving_deployed_rto.py)."""

    outcome: str | None  # the serving failover's
    period: timedelta  # the watch's
    period_why: str  # runbook's cadences.watch, derived from the targets, the template's
    ticks: int  # watch ticks after the kill until the quorum confirmed (0: it never did)
    detect: timedelta | None  # kill -> confirmed
    switch: timedelta | None  # confirmed -> all traffic on the standby
    window: ClientWindow
    failures: str


def measure_deployed_rto(rb, folder: Path, run_id: str, drill: str | None = None) -> DeployedRto:
    """Kill the sandboxed primary under load, tick the watch at its deployed period until the
    quorum confirms (at most the RTO target plus two periods), run the serving failover with
    the watch's evidence, and read the client's error window. Emits no outage event: the
    watch's signal log is the sandbox's own, so no automation of the runbook is woken."""
    from lifeboat_dr.core.detection.quorum import OutageState
    from lifeboat_dr.core.detection.shared_state import open_signal_log
    from lifeboat_dr.flows.deploy import deployed_period
    from lifeboat_dr.flows.serving import rehearse
    from lifeboat_dr.flows.serving_sandbox import serving_sandbox
    from lifeboat_dr.flows.watch import observe
    from lifeboat_dr.flows.wiring import build_ledger
    from lifeboat_dr.standins.serving_client import client_window, read_samples

    period, why = deployed_period(rb, "watch")
    rng = random.Random(run_id)
    samples, result, ticks, confirmed = folder / "client.jsonl", None, 0, None
    with serving_sandbox(rb, folder / "sites") as box, _client_load(box.frontend, samples):
        log = open_signal_log(box.rb.name, folder / "signals")
        observe(box.rb, log)  # a healthy tick before the kill: the signals' baseline
        killed = datetime.now(UTC)
        box.kill_primary()
        time.sleep(rng.uniform(0, period.total_seconds()))  # the schedule's next tick: any time after
        give_up = time.monotonic() + (rb.rto_target + 2 * period).total_seconds()
        while time.monotonic() < give_up:
            tick = time.monotonic()
            decision = observe(box.rb, log)
            ticks += 1
            if decision.state == OutageState.confirmed:
                confirmed = datetime.now(UTC)
                break
            time.sleep(max(0.0, period.total_seconds() - (time.monotonic() - tick)))
        if confirmed is not None:
            evidence = [f"{r.signal}: {r.summary}" for r in decision.evidence]
            result = rehearse(
                box.rb, run_id=run_id, outage_started_at=killed, detected_at=confirmed, evidence=evidence
            )
            time.sleep(0.3)  # a few good answers after the switch
    ledger = build_ledger(box.rb, run_id=run_id, drill=drill or "dry-run", reopen=True)
    switched = ledger.entry.phases.get("traffic_switched")
    window = client_window(
        read_samples(samples), switched or datetime.now(UTC), "drill client, 40 req/s, 4 workers"
    )
    if result is not None:  # the run's entry, finished again with what the client saw
        ledger.client_window(window)
        if drill:
            ledger.note("drill", drill)
        ledger.finish(result["outcome"])
    return DeployedRto(
        outcome=result["outcome"] if result else None,
        period=period,
        period_why=why,
        ticks=ticks if confirmed else 0,
        detect=confirmed - killed if confirmed else None,
        switch=switched - confirmed if switched and confirmed else None,
        window=window,
        failures="; ".join(result["failures"]) if result else "",
    )


def _deployed_rto_checks(rb, m: DeployedRto) -> tuple[list[Check], str | None]:
    secs = lambda td: f"{td.total_seconds():.2f} s" if td is not None else "never"  # noqa: E731
    target = rb.rto_target
    checks = [
        Check(
            "the watch confirmed the outage at its deployed period",
            m.detect is not None,
            f"watch every {fd(m.period)} ({m.period_why}), {m.ticks} tick(s): kill → confirmed {secs(m.detect)}",
        ),
        Check("failover completed", m.outcome == "completed", m.failures or str(m.outcome)),
    ]
    if m.detect is None:
        return checks, m.outcome
    ok = m.window.window is not None and m.window.window <= target and m.switch is not None
    checks.append(
        Check(
            "client-visible error window within the RTO target",
            ok,
            f"{secs(m.window.window)} ({m.window.errors}/{m.window.requests} requests failed; "
            f"confirmed → switched {secs(m.switch)}), target {fd(target)}",
        )
    )
    return checks, m.outcome


def _serving(rb, kind: str, drill_id: str, folder: Path) -> tuple[list[Check], str | None]:
    from lifeboat_dr.core.failover.contract import Confirmation
    from lifeboat_dr.core.serving.failover import serving_failover
    from lifeboat_dr.flows.guard import Guard
    from lifeboat_dr.flows.serving import primary_site
    from lifeboat_dr.flows.serving_sandbox import serving_sandbox
    from lifeboat_dr.flows.wiring import (
        build_ledger,
        build_router,
        certified_weights_digest,
        serving_settings,
    )
    from lifeboat_dr.providers.serving.http import HttpEndpoint
    from lifeboat_dr.standins.serving_client import client_window, read_samples

    checks: list[Check] = []
    pages: list[str] = []
    with serving_sandbox(rb, folder, stale_standby=kind == "serving-stale-standby") as box:
        router, samples = build_router(box.rb), folder / "client.jsonl"
        client = subprocess.Popen(
            [sys.executable, "-m", "lifeboat_dr.standins.serving_client", "--url", f"{box.frontend}/v1/infer",
             "--rate", "40", "--workers", "4", "--out", str(samples)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 15
            while sum(s["ok"] for s in read_samples(samples)) < 20 and time.monotonic() < deadline:
                time.sleep(0.05)
            before = router.weights()
            outage = datetime.now(UTC)
            box.kill_primary()
            detected, evidence = box.confirm_outage(router)
            ledger = build_ledger(box.rb, run_id=drill_id, drill=kind)
            ledger.note("drill", kind)

            def degrade(_ledger) -> bool:  # verified; now the standby starts failing
                _post(f"{box.urls['secondary']}/admin/faults", {"error_rate": 0.5})
                return True

            with Guard(box.rb, drill_id, action="drill", rehearsal=True).acting(ledger):
                entry = serving_failover(
                    serving_settings(box.rb),
                    router=router,
                    standby=HttpEndpoint(box.rb.serving.standby_url),
                    expected_digest=certified_weights_digest(box.rb),
                    ledger=ledger,
                    outage_started_at=outage,
                    detected_at=detected,
                    confirm=lambda: Confirmation(
                        outage, detected, tuple(evidence)
                    ),  # the sandbox's two signals
                    approve=degrade if kind == "serving-degraded" else None,
                    sites=primary_site(box.rb),
                    page=pages.append,  # drills page nobody: the check reads what was sent
                )
            time.sleep(0.3)
        finally:
            stop_process(client)
        after = router.weights()
        window = client_window(
            read_samples(samples),
            entry.phases.get("traffic_switched") or datetime.now(UTC),
            "drill client, 40 req/s, 4 workers",
        )
        ledger.client_window(window)
    failures = "; ".join(f.error for f in entry.failures)
    if kind == "serving-kill":
        checks.append(Check("failover completed", entry.outcome == "completed", failures or entry.outcome))
        checks.append(
            Check("all traffic on the standby", after == {"primary": 0, "secondary": 255}, str(after))
        )
        ok = window.window is not None and window.window <= rb.rto_target
        checks.append(
            Check(
                "client-visible error window within the RTO target",
                ok,
                f"{window.window} of {rb.rto_target}, {window.errors}/{window.requests} failed",
            )
        )
    elif kind == "serving-stale-standby":
        checks.append(Check("standby refused for its model version", "model version" in failures, failures))
        checks.append(Check("traffic stayed where it was", after == before, str(after)))
    else:
        held = entry.outcome == "held" and "error rate" in entry.notes.get("held", "")
        checks.append(
            Check(
                "the error rate breached, and with the primary dead the revert was held",
                held,
                entry.notes.get("held") or entry.notes.get("reverted") or entry.outcome,
            )
        )
        checks.append(
            Check(
                "traffic stays on the standby, never back to the dead primary",
                after == {"primary": 0, "secondary": 255},
                str(after),
            )
        )
        checks.append(Check("a person was paged", len(pages) == 1, pages[0] if pages else "no page"))
    checks.append(Check("ledger entry marked as a drill", entry.drill and entry.table == "serving"))
    return checks, entry.outcome


def _post(url: str, body: dict) -> None:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    urllib.request.urlopen(req, timeout=2).close()


def _batch_resume(rb, drill_id: str, folder: Path) -> tuple[list[Check], str | None]:
    from lifeboat_dr.core.certify import certify_replica
    from lifeboat_dr.core.serving.batch import audit_outputs, run_batch
    from lifeboat_dr.providers.storage.local import LocalStore

    shards = [f"shard-{i:03d}" for i in range(24)]
    records = lambda shard: [f"{shard} item {j}" for j in range(4)]  # noqa: E731
    infer = lambda text: text[::-1]  # noqa: E731
    primary, secondary = LocalStore(folder / "primary"), LocalStore(folder / "secondary")
    died = run_batch(primary, shards, records, infer, every=4, stop_after=14)  # dies after shard 14
    for info in primary.list():  # replication, as the replicate flow leaves it
        secondary.put(info.key, b"".join(primary.read(info.key)))
    report = certify_replica(secondary, None, layout="manifest")
    checks = [
        Check("a progress checkpoint certified on the secondary", report.certified is not None, report.mode)
    ]
    if report.certified is None:
        return checks, "failed"
    resumed = run_batch(secondary, shards, records, infer, every=4, resume_from=report.certified.uri)
    again = run_batch(secondary, shards, records, infer, every=4, resume_from=resumed.checkpoints[-1])
    problems = audit_outputs(secondary, shards, records)
    checks += [
        Check("done shards skipped, the rest processed", set(resumed.skipped) | set(resumed.processed) == set(shards),
              f"{len(resumed.skipped)} skipped, {len(resumed.processed)} processed ({len(died.processed)} done before the crash)"),
        Check("every output exactly once", not problems, "; ".join(problems[:3])),
        Check("a second resume processes nothing", again.processed == [], f"{len(again.processed)} processed"),
    ]  # fmt: skip
    return checks, "completed" if not problems else "failed"


def inference_drill(
    rb, kind: str, *, root: Path, drill_id: str, started: float, keep: bool = False
) -> DrillResult:
    folder = (root / drill_id).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    try:
        checks, outcome = run_inference_drill(rb, kind, drill_id, folder)
    except Exception as e:  # an injection or check that could not run is a failed drill
        checks, outcome = [Check("drill ran to the end", False, f"{type(e).__name__}: {e}")], None
    passed = all(c.ok for c in checks)
    if passed and not keep:
        shutil.rmtree(folder, ignore_errors=True)
    return DrillResult(
        kind=kind,
        passed=passed,
        checks=tuple(checks),
        run_id=drill_id,
        outcome=outcome,
        seconds=time.monotonic() - started,
    )
