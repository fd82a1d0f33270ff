"""The periods `lifeboat deploy` gives each runbook's watch, replicate and certify come from its
targets, and `lifeboat validate` says, with the figures, when they cannot meet them.

Issue #29: every runbook was deployed replicating and certifying every 5 minutes and watched
every minute, so the demo (RPO 30 s) and chat-serving (RTO 10 s) could not meet their targets
deployed, and nothing warned."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lifeboat_dr.flows.deploy import deployment_plan, runbook_target
from lifeboat_dr.shell.cli import main
from tests.runbook_yaml import two_site_runbook

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = yaml.safe_load((ROOT / "prefect.yaml").read_text())
EXAMPLES = sorted(p.stem for p in (ROOT / "runbooks").glob("*.yaml"))


def _periods(runbook: str | Path) -> dict[str, int]:
    """flow -> its deployed interval in seconds, for the one runbook's plan."""
    plan = deployment_plan(TEMPLATE, [runbook_target(runbook, ROOT)], ROOT)
    out: dict[str, set[int]] = {}
    for d in plan["deployments"]:
        flow = d["entrypoint"].rsplit(":", 1)[1]
        if flow in ("watch", "replicate", "certify"):
            out.setdefault(flow, set()).add(d["schedules"][0]["interval"])
    assert all(len(v) == 1 for v in out.values()), out  # both vantages' watches at one period
    return {flow: v.pop() for flow, v in out.items()}


def test_the_demo_is_replicated_often_enough_for_its_30s_rpo_and_watched_within_its_window():
    # RPO 30s = a checkpoint every 3s + replicate every 27s; the watch at detection.window
    # (30s): 4s (stall_after, the 2nd signal of the quorum) + 30s + 30s expected_ready < RTO 2m
    assert _periods("runbooks/demo.yaml") == {"watch": 30, "replicate": 27, "certify": 27}


def test_chat_serving_is_watched_often_enough_for_its_10s_rto():
    # RTO 10s = the quorum's signals at once + one watch + the 1.5s canary budget: a watch every 8s
    assert _periods("chat-serving")["watch"] == 8


def test_a_runbook_that_meets_its_targets_at_the_templates_periods_keeps_them():
    # llama-70b: RPO 2h, a checkpoint every 30m; RTO 30m, 15m of it to recover
    assert _periods("llama-70b-pretrain") == {"watch": 60, "replicate": 300, "certify": 300}


def _runbook(tmp_path: Path, **sections) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(
        two_site_runbook(
            "job",
            checkpoint={"cadence": "1m"},
            targets={"rpo": "10m", "rto": "20m"},
            failover={"expected_ready": "5m"},
            **sections,
        )
    )
    return path


def test_periods_the_runbook_sets_are_deployed_as_given(tmp_path):
    path = _runbook(tmp_path, cadences={"watch": "20s", "replicate": "2m", "certify": "3m"})
    assert _periods(path) == {"watch": 20, "replicate": 120, "certify": 180}


def test_validate_warns_with_the_figures_when_the_runbooks_periods_miss_its_targets(tmp_path, capsys):
    path = _runbook(
        tmp_path,
        cadences={"watch": "15m", "replicate": "10m"},
        detection={"signals": ["provider", "checkpoint_freshness"], "window": "20m"},
    )
    assert main(["validate", str(path)]) == 0  # a warning, not a refusal
    out = capsys.readouterr()
    assert (
        f"{path}: deployed: watch every 15m (runbook), replicate every 10m (runbook), certify every 5m"
        in (out.out)
    )
    warnings = [line for line in out.err.splitlines() if ": cadences." in line]
    assert warnings == [
        f"{path}: warning: cadences.replicate: every 10m, the newest copy on the secondary may be 11m old "
        "(checkpoint every 1m + replicate every 10m): over the RPO target 10m (every 9m at most)",
        # checkpoint_freshness reads failing 1m x 3 (freshness_factor) after the last checkpoint
        f"{path}: warning: cadences.watch: every 15m, an outage may be recovered from 23m after it "
        "starts (checkpoint_freshness after 3m, quorum 2, + one watch 15m + failover.expected_ready "
        "5m): over the RTO target 20m (a watch every 12m at most)",
    ]


def test_validate_warns_when_no_period_can_meet_the_rpo(tmp_path, capsys):
    path = _runbook(tmp_path, cluster={"gpus": 8, "gpu_hour_usd": 2, "mtbf": "8h", "checkpoint_write": "9m"})
    assert main(["validate", str(path)]) == 0
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "RPO target" in line]
    assert line == (
        f"{path}: warning: checkpoint.cadence: checkpoint every 1m + write 9m = 10m, over the RPO "
        "target 10m before any replicate period"
    )


def test_a_period_under_a_second_is_refused_naming_the_field(tmp_path, capsys):
    path = _runbook(tmp_path, cadences={"watch": "500ms"})
    assert main(["validate", str(path)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert (
        line.startswith(f"{path}:") and "cadences.watch: a scheduled flow runs at most once a second" in line
    )


# shipped example -> (watch, replicate, certify) in seconds, and the warnings it must print:
# each figure worked out by hand from the YAML (see each comment)
SHIPPED = {
    # RPO 15m: a checkpoint every 5m leaves 10m, the template's 5m is within; RTO 10m, but
    # failover.expected_ready (default 15m) alone is over it: no watch can help, so a warning
    "batch-embed": (
        (5, 300, 300),
        [
            "failover.expected_ready: confirmation (provider at once, quorum 2) + "
            "failover.expected_ready 15m = 15m, over the RTO target 10m before any watch period"
        ],
    ),
    "chat-serving": ((8, 300, 300), []),  # RTO 10s - canary 1.5s; RPO 0 (immutable weights)
    "demo-serving": ((9, 300, 300), []),  # RTO 10s - canary 500ms (window 10s)
    "demo-torch": ((30, 27, 27), []),  # as the demo
    "demo": ((30, 27, 27), []),
    "llama-70b-pretrain": ((60, 300, 300), []),
    "mistral-7b-sft": ((60, 300, 300), []),  # RPO 4h, checkpoint every 1h; RTO 1h, 15m to recover
}


# the examples whose loss log is in the primary store: a quarter of a 30m / 1h checkpoint
# interval, the template's 1m at most
LOSS_LOG = {"llama-70b-pretrain": ", loss_log every 1m", "mistral-7b-sft": ", loss_log every 1m"}


def test_every_shipped_example_is_listed():
    assert sorted(SHIPPED) == EXAMPLES


@pytest.mark.parametrize("name", EXAMPLES)
def test_validate_on_each_shipped_example_prints_its_deployed_periods_and_what_they_miss(name, capsys):
    (watch, replicate, certify), expected = SHIPPED[name]
    assert main(["validate", name]) == 0
    out = capsys.readouterr()
    fmt = lambda s: f"{s // 60}m" if s >= 60 and s % 60 == 0 else f"{s}s"  # noqa: E731
    assert (
        f"{name}: deployed: watch every {fmt(watch)}, replicate every {fmt(replicate)}, "
        f"certify every {fmt(certify)}{LOSS_LOG.get(name, '')}\n" in out.out
    )
    cadence_fields = (
        "cadences.",
        "checkpoint.",
        "failover.expected_ready",
        "serving.",
        "cluster.",
        "detection.",
    )
    said = [
        line.removeprefix(f"{name}: warning: ")
        for line in out.err.splitlines()
        if line.removeprefix(f"{name}: warning: ").startswith(cadence_fields)
    ]
    assert said == expected
    assert _periods(name) == {"watch": watch, "replicate": replicate, "certify": certify}


def _loss_log_runbook(tmp_path: Path, **sections) -> Path:
    """A runbook whose loss log lives in its primary store (checkpoint every 1m)."""
    path = _runbook(tmp_path, **sections)
    with path.open("a") as f:
        f.write(f'verify: {{loss_log: "file://{tmp_path}/primary/loss.jsonl"}}\n')
    return path


def _loss_log_periods(path: Path) -> list[int]:
    plan = deployment_plan(TEMPLATE, [runbook_target(path, ROOT)], ROOT)
    return [
        d["schedules"][0]["interval"] for d in plan["deployments"] if d["entrypoint"].endswith(":loss_log")
    ]


def test_a_loss_log_in_the_primary_store_is_shipped_four_times_per_checkpoint_interval(tmp_path):
    # issue #34: the log travelled only with `replicate` (every 9m here): a failover found no
    # logged step after the newest checkpoint. A checkpoint every 1m: the log every 15s.
    assert _loss_log_periods(_loss_log_runbook(tmp_path)) == [15]
    assert _loss_log_periods(_loss_log_runbook(tmp_path, cadences={"loss_log": "20s"})) == [20]


def test_a_runbook_without_a_loss_log_in_its_store_deploys_no_loss_log_pass(tmp_path):
    assert _loss_log_periods(_runbook(tmp_path)) == []
    assert _loss_log_periods(ROOT / "runbooks/demo.yaml") == []  # a local file beside the trainer


def test_validate_warns_when_the_loss_log_is_shipped_no_more_often_than_checkpoints(tmp_path, capsys):
    path = _loss_log_runbook(tmp_path, cadences={"loss_log": "2m"})
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr()
    assert "certify every 5m, loss_log every 2m (runbook)\n" in out.out
    assert (
        f"{path}: warning: cadences.loss_log: every 2m, not more often than a checkpoint every 1m: a "
        "failover rarely finds logged steps after the newest checkpoint and proves it by replay "
        "(every 15s or less)"
    ) in out.err.splitlines()
