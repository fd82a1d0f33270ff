"""The control plane's side of the partition drill, run in its namespace (see partition_drill.py).

    python -m lifeboat_dr.flows.drills.partition.control RUNBOOK TAG RESULT_JSON

Every wait has a deadline; the result (checks and figures) is written even when a phase fails.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from subprocess import PIPE

from prefect import flow

from lifeboat_dr.flows.drills.partition.netns import Sites

VANTAGE_TIMEOUT_S = 40  # one probe round at the secondary, interpreter start-up included
DETECTION_ROUNDS = 3


def utcnow() -> datetime:
    return datetime.now(UTC)


def http_up(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2):
        return True


def probe_round(runbook: str, sites: Sites) -> list:
    """The runbook's probes from the control plane and, at once, from the secondary's namespace."""
    from lifeboat_dr.core.detection.signals import Reading
    from lifeboat_dr.flows.drills.partition.sites import vantage_round

    remote: dict = {}

    def at_secondary() -> None:
        argv = [
            sys.executable,
            "-m",
            "lifeboat_dr.flows.drills.partition.sites",
            "vantage",
            runbook,
            "secondary",
        ]
        try:
            done = sites.run(
                "secondary", argv, timeout=VANTAGE_TIMEOUT_S, stdout=PIPE, stderr=PIPE, text=True
            )
            remote["lines"] = done.stdout.splitlines()
            if done.returncode:
                remote["error"] = done.stderr.strip()[-500:]
        except Exception as e:  # a vantage that does not report is simply not heard
            remote["error"] = str(e)

    worker = threading.Thread(target=at_secondary)
    worker.start()
    readings = vantage_round(runbook, "control-plane")
    worker.join(VANTAGE_TIMEOUT_S + 5)
    return readings + [
        Reading.from_dict(json.loads(line)) for line in remote.get("lines", ()) if line.strip()
    ]


def detect_once(runbook: str, rb, sites: Sites) -> dict:
    from lifeboat_dr.core.detection.quorum import QuorumPolicy, decide

    readings = probe_round(runbook, sites)
    decision = decide(readings, utcnow(), QuorumPolicy.from_detection(rb.detection))
    return {
        "state": decision.state.value,
        "summary": decision.summary,
        "readings": [f"{r.source} {r.status}: {r.summary[:120]}" for r in readings],
    }


def detect(runbook: str, rb, sites: Sites, cut_at: float) -> dict:
    from lifeboat_dr.core.detection.quorum import OutageState, QuorumPolicy, decide

    policy, decision, readings, rounds = QuorumPolicy.from_detection(rb.detection), None, [], 0
    while rounds < DETECTION_ROUNDS and (decision is None or decision.state is not OutageState.confirmed):
        rounds += 1
        readings += probe_round(runbook, sites)
        decision = decide(readings, utcnow(), policy, decision)
    return {
        "seconds": round(time.monotonic() - cut_at, 1),
        "rounds": rounds,
        "state": decision.state.value,
        "summary": decision.summary,
        "confirmed_at": decision.at.isoformat(),
        "independent": decision.independent,
        "sources": list(decision.sources),
        "readings": [f"{r.source} {r.status}: {r.summary}" for r in readings],
        "votes": [
            {
                "signal": r.signal,
                "source": r.source,
                "summary": r.summary,
                "vantages": r.evidence.get("vantages", []),
            }
            for r in decision.evidence
        ],
    }


@flow(name="partition-drill-failover", log_prints=True)
def failover_in_partition(
    runbook: str, run_id: str, started: str, detected: str, evidence: list[str]
) -> dict:
    """The real failover (the drill's path: console approval, drill cluster) on this server."""
    import random

    from lifeboat_dr.flows.drill import run_failover
    from lifeboat_dr.flows.drills.base import Rig
    from lifeboat_dr.runbooks.loader import load_runbook

    rb = load_runbook(runbook)
    rig = Rig(
        kind="partition",
        drill_id=run_id,
        rb=rb,
        root=rb.base_dir,
        rng=random.Random(0),
        evidence=evidence,
        outage_started_at=datetime.fromisoformat(started),
        detected_at=datetime.fromisoformat(detected),
    )
    outcome = run_failover(rig)
    entry, steps = outcome.entry, outcome.steps
    fence, certified = steps.get("fence"), steps.get("certify")
    phases = {k: v.isoformat() for k, v in entry.phases.items()}
    return {
        "outcome": entry.outcome,
        "error": f"{type(outcome.error).__name__}: {outcome.error}" if outcome.error else None,
        "rto_s": round(entry.rto.total_seconds(), 1) if entry.rto else None,
        "rpo_s": round(entry.rpo.total_seconds(), 1) if entry.rpo else None,
        "checkpoint": entry.checkpoint,
        "certify_mode": getattr(certified, "mode", None),
        "certified_step": getattr(getattr(certified, "certified", None), "step", None),
        "fenced_on": list(getattr(fence, "stores", ())),
        "fence_epoch": getattr(fence, "epoch", None),
        "fence_s": _took(entry, "fenced"),
        "steps_s": {m: _took(entry, m) for m in entry.began},
        "phases": phases,
        "failures": [f"{f.phase}: {f.error}" for f in entry.failures],
    }


def _took(entry, milestone: str) -> float | None:
    began, reached = entry.began.get(milestone), entry.phases.get(milestone)
    return round((reached - began).total_seconds(), 1) if began and reached else None


def main(runbook: str, tag: str, result_path: str) -> int:
    from lifeboat_dr.flows.drills.partition.checks import (
        after_the_partition,
        before_the_partition,
        judge,
        wait_for,
    )
    from lifeboat_dr.runbooks.loader import load_runbook

    rb, sites, result = load_runbook(runbook), Sites(tag), {"checks": []}
    try:
        wait_for("the Prefect server", lambda: http_up(f"{_api()}/health"), 150)
        before_the_partition(rb, sites, result, lambda: detect_once(runbook, rb, sites))
        sites.partition()
        cut_at, cut = time.monotonic(), utcnow()
        result["detection"] = detect(runbook, rb, sites, cut_at)
        evidence = [v["summary"] for v in result["detection"]["votes"]]
        started = time.monotonic()
        result["failover"] = failover_in_partition(
            runbook, f"partition-{tag}", cut.isoformat(), result["detection"]["confirmed_at"], evidence
        )
        result["failover"]["wall_s"] = round(time.monotonic() - started, 1)
        sites.restore()
        after_the_partition(rb, result)
    except Exception:
        result["error"] = traceback.format_exc()[-3000:]
    finally:
        sites.close()  # the vantage processes this script started; the namespaces stay
        judge(result)
        Path(result_path).write_text(json.dumps(result, default=str))
    return 0


def _api() -> str:
    import os

    return os.environ["PREFECT_API_URL"]


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
