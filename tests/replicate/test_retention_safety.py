"""Retention never leaves zero certifiable checkpoints: it counts certifiable ones, and deletes
nothing when none certifies or the primary cannot be read (an outage is when they matter)."""

from __future__ import annotations

import pytest

from lifeboat_dr.core.checkpoints.inventory import StoredCheckpoint
from lifeboat_dr.core.retention import plan_retention
from lifeboat_dr.providers.storage.local import LocalStore
from lifeboat_dr.providers.storage.s3 import S3Store
from lifeboat_dr.shell.cli import main
from lifeboat_dr.standins.checkpoints import replicate, write_checkpoint
from tests.runbook_yaml import two_site_runbook

S3_DOWN = {"infra": "aws/us-east-1", "store": "s3://primary-bucket/run", "endpoint_url": "http://127.0.0.1:9"}


def ckpts(*steps):
    return [StoredCheckpoint(f"step-{s}", s) for s in steps]


def test_nothing_certifiable_means_nothing_deleted():
    verdicts = plan_retention(ckpts(100, 200, 300), keep_last=1, certifiable=[])
    assert all(v.keep for v in verdicts)
    assert {v.reason for v in verdicts} == {"nothing certifiable: retention deletes nothing"}


def test_keep_last_counts_certifiable_checkpoints_and_keeps_the_newer_bad_ones():
    verdicts = plan_retention(ckpts(100, 200, 300, 400), keep_last=1, certifiable=["step-200"])
    assert [(v.checkpoint.step, v.keep) for v in verdicts] == [
        (400, True),
        (300, True),
        (200, True),
        (100, False),
    ]
    assert verdicts[0].reason == "not certifiable; kept until 1 newer ones certify"


def _site(tmp_path, monkeypatch, *, layout="dcp", keep_last=1, primary=None):
    monkeypatch.chdir(tmp_path)
    source, secondary = LocalStore(tmp_path / "primary"), LocalStore(tmp_path / "secondary")
    path = tmp_path / "runbook.yaml"
    path.write_text(
        two_site_runbook(
            "keep",
            primary=primary or f"file://{source.root}",
            secondary=f"file://{secondary.root}",
            checkpoint={"layout": layout, "retention": {"keep_last": keep_last}},
            targets={"rpo": "30m"},
        )
    )
    return source, secondary, str(path)


def _rot_newest(source, secondary, layout, steps):
    dirs = [write_checkpoint(source, layout, s) for s in steps]
    for d in dirs:
        replicate(source, secondary, d)
    newest = next(i.key for i in secondary.list(f"{dirs[-1]}/") if "shard" in i.key or "distcp" in i.key)
    secondary.put(newest, b"R" * secondary.head(newest).size)  # same size, other bytes
    return dirs


def _dirs(store):
    """The checkpoint folders (the site state in `_lifeboat/` is not one)."""
    return sorted(
        {i.key.split("/")[0] for i in store.list() if "/" in i.key and not i.key.startswith("_lifeboat/")}
    )


@pytest.mark.parametrize("only", [True, False], ids=["retention-only", "replicate"])
def test_s3_primary_down_deletes_nothing(tmp_path, monkeypatch, capsys, only):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setattr(S3Store, "backoff_base", 0.0)  # every attempt at the refused port, no waiting
    source, secondary, runbook = _site(tmp_path, monkeypatch, primary=S3_DOWN)
    _rot_newest(source, secondary, "dcp", (10, 20, 30))
    before = _dirs(secondary)
    code = main(["replicate", runbook, *(["--retention-only"] if only else [])])
    out, err = capsys.readouterr()
    assert _dirs(secondary) == before == ["step_0000010", "step_0000020", "step_0000030"]
    if only:
        assert code == 0
        assert "keep step_0000010 (step 10): source unreachable (" in out
        assert "retention deletes nothing" in out and "deleted" not in out
    else:  # the copy cannot even list the primary: one line, and retention never runs
        assert code == 1 and err.count("\n") == 1 and "s3://primary-bucket/run" in err


def test_primary_gone_and_newest_replica_corrupt_keeps_every_step(tmp_path, monkeypatch, capsys):
    source, secondary, runbook = _site(tmp_path, monkeypatch)
    _rot_newest(source, secondary, "dcp", (10, 20, 30))
    for info in list(source.list()):  # the primary region's bucket is gone
        source.delete(info.key)
    assert main(["replicate", runbook]) == 0
    out = capsys.readouterr().out
    assert "nothing certifiable: retention deletes nothing" in out
    assert _dirs(secondary) == ["step_0000010", "step_0000020", "step_0000030"]


def test_retention_keeps_the_newest_certifiable_when_newer_replicas_are_corrupt(
    tmp_path, monkeypatch, capsys
):
    source, secondary, runbook = _site(tmp_path, monkeypatch)
    _rot_newest(source, secondary, "dcp", (10, 20, 30))
    assert main(["replicate", runbook, "--retention-only"]) == 0
    out = capsys.readouterr().out
    assert "keep step_0000020 (step 20): among the newest 1 certifiable" in out
    assert "deleted step_0000010 (step 10): outside the retention policy" in out
    assert main(["certify", runbook]) in (0, 1)
    assert "CERTIFIED step 20" in capsys.readouterr().out


def test_retention_twice_is_the_same_as_once(tmp_path, monkeypatch, capsys):
    source, secondary, runbook = _site(tmp_path, monkeypatch, keep_last=2)
    _rot_newest(source, secondary, "dcp", (10, 20, 30, 40))
    for _ in range(2):
        assert main(["replicate", runbook, "--retention-only"]) == 0
    assert _dirs(secondary) == ["step_0000020", "step_0000030", "step_0000040"]


def test_lag_log_that_cannot_be_written_is_one_line_naming_it(tmp_path, monkeypatch, capsys):
    source, secondary, runbook = _site(tmp_path, monkeypatch)
    write_checkpoint(source, "dcp", 10)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    assert main(["replicate", runbook, "--lag-log", str(blocker / "lag.jsonl")]) == 1
    err = capsys.readouterr().err
    assert err == f"lifeboat replicate: cannot write the lag log {blocker / 'lag.jsonl'}: File exists\n"


def test_the_pre_failure_loss_log_replicates_with_the_checkpoints(tmp_path, monkeypatch, capsys):
    from lifeboat_dr.flows.wiring import loss_log_for_failover
    from lifeboat_dr.runbooks.loader import load_runbook

    source, secondary, runbook = _site(tmp_path, monkeypatch)
    with open(runbook, "a") as f:
        f.write(f'verify: {{parity_steps: 3, loss_log: "file://{source.root}/logs/loss.jsonl"}}\n')
    write_checkpoint(source, "dcp", 10)
    source.put("logs/loss.jsonl", b'{"step": 11, "loss": 2.5}\n')
    assert main(["replicate", runbook]) == 0
    assert b"".join(secondary.read("logs/loss.jsonl")) == b'{"step": 11, "loss": 2.5}\n'
    # the failover reads the secondary's copy: the primary is what went down
    assert loss_log_for_failover(load_runbook(runbook)) == f"file://{secondary.root}/logs/loss.jsonl"
    source.put("logs/loss.jsonl", b'{"step": 11, "loss": 2.5}\n{"step": 12, "loss": 2.4}\n')
    assert main(["replicate", runbook]) == 0  # grows with the run: copied again
    assert b"".join(secondary.read("logs/loss.jsonl")).count(b"\n") == 2
