"""The watch flow's composition root, the events it emits, and `lifeboat serve`'s routes."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path

import pytest

from lifeboat_dr.core.detection.alerts import Seen
from lifeboat_dr.core.detection.events import outage_event
from lifeboat_dr.core.detection.quorum import QuorumPolicy, decide
from lifeboat_dr.core.detection.signals import Reading, Status
from lifeboat_dr.flows.wiring import build_probes
from lifeboat_dr.runbooks.loader import load_runbook
from lifeboat_dr.shell.cli import main as lifeboat

REPO = Path(__file__).resolve().parents[2]


def test_probes_follow_the_runbooks_signals(guarded_path):
    rb = load_runbook(guarded_path)
    assert [p.signal for p in build_probes(rb)] == ["gpu_health", "provider"]  # no heartbeat configured


def test_the_demo_runbook_watches_its_heartbeat_checkpoints_and_store(tmp_path):
    rb = load_runbook(REPO / "runbooks" / "demo.yaml")
    rb.detection.heartbeat = str(tmp_path / "hb.json")
    probes = build_probes(rb)
    assert [p.signal for p in probes] == ["training_progress", "checkpoint_freshness", "provider"]
    readings = [p.check() for p in probes]
    assert readings[0].status is Status.unknown  # no heartbeat written yet
    assert readings[2].status is Status.ok  # the primary folder answers


def test_a_heartbeat_store_uri_reads_the_object(tmp_path):
    rb = load_runbook(REPO / "runbooks" / "demo.yaml")
    (tmp_path / "hb").write_text(json.dumps({"step": 7}))
    rb.detection.heartbeat = f"file://{tmp_path}/hb"
    (probe,) = [p for p in build_probes(rb) if p.signal == "training_progress"]
    assert probe.check().evidence["step"] == 7


def test_only_a_changed_decision_becomes_an_event(clock):
    policy = QuorumPolicy(signals=("provider", "gpu_health"), quorum=2)
    both = [Reading(s, s, Status.failing, clock(), s) for s in policy.signals]
    first = decide(both, clock(), policy)
    spec = outage_event(first, "guarded", "runbooks/guarded.yaml")
    assert spec.event == "lifeboat.outage.confirmed"
    assert spec.resource == {
        "prefect.resource.id": "lifeboat.runbook.guarded",
        "prefect.resource.name": "guarded",
        "lifeboat.runbook.path": "runbooks/guarded.yaml",
    }
    assert outage_event(decide(both, clock(), policy, first), "guarded", None) is None


def test_seen_forgets_after_its_ttl(clock):
    seen = Seen(timedelta(hours=1), clock=clock)
    assert seen.first("k") and not seen.first("k")
    clock.advance(hours=2)
    assert seen.first("k")


def test_serve_refuses_to_start_without_credentials(guarded_path, monkeypatch, capsys):
    for var in (
        "LIFEBOAT_ALERTMANAGER_TOKEN",
        "LIFEBOAT_ALERTMANAGER_USER",
        "LIFEBOAT_ALERTMANAGER_PASSWORD",
    ):
        monkeypatch.delenv(var, raising=False)
    assert lifeboat(["serve", str(guarded_path)]) == 1
    assert "needs credentials" in capsys.readouterr().err


def test_serve_composes_every_route_in_one_list(guarded_path, monkeypatch, tmp_path):
    from lifeboat_dr.shell.cli import build_parser
    from lifeboat_dr.shell.commands.serve import routes

    monkeypatch.setenv("LIFEBOAT_ALERTMANAGER_TOKEN", "t")
    monkeypatch.delenv("SLACK_SIGNING_SECRET", raising=False)
    argv = ["serve", str(guarded_path)]
    args = build_parser(argv).parse_args(argv)
    assert [r.path for r in routes(args)] == ["/alerts/alertmanager"]
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "s")
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-test")
    from lifeboat_dr.core.approval_keys import generate

    generate(tmp_path / "signing.pem")
    monkeypatch.setenv("LIFEBOAT_APPROVAL_SIGNING_KEY_FILE", str(tmp_path / "signing.pem"))
    assert [r.path for r in routes(args)] == ["/alerts/alertmanager", "/slack/actions"]
    monkeypatch.setenv("LIFEBOAT_PROXY_SECRET", "p")
    assert [r.path for r in routes(args)][2:] == [  # the identity proxy's: decisions, and the card's read
        "/api/flow_runs/{id}/resume",
        "/api/flow_runs/{id}/set_state",
        "/api/flow_runs/{id}/input/{key}",
    ]


@pytest.mark.skipif(
    not os.environ.get("LIFEBOAT_GPU_SMOKE"), reason="opt-in: LIFEBOAT_GPU_SMOKE=1 on a GPU host"
)
def test_smoke_real_gpus_answer_nvml():  # pragma: no cover - needs a GPU
    from lifeboat_dr.providers.health.nvml import NvmlHealth

    health = NvmlHealth(xid_wait_ms=100).check()
    assert health.state in ("ok", "degraded") and health.gpus and health.driver_version


def test_prefect_yaml_schedules_the_watch_flow_and_wires_the_failover_automation():
    import yaml

    from lifeboat_dr.flows.automation import failover_triggers

    doc = yaml.safe_load((REPO / "prefect.yaml").read_text())
    watch = next(d for d in doc["deployments"] if d["name"] == "watch")
    assert watch["entrypoint"] == "lifeboat_dr.flows.watch:watch" and watch["schedules"]
    (trigger,) = failover_triggers()
    assert trigger.expect == {"lifeboat.outage.confirmed"}
    assert trigger.parameters["runbook"] == "{{ event.resource['lifeboat.runbook.path'] }}"
