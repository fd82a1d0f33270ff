"""`lifeboat replicate` and the replication core: newest first, retention-aware, lag recorded."""

from __future__ import annotations

import json
from datetime import timedelta

from lifeboat_dr.core.checkpoints.inventory import StoredCheckpoint
from lifeboat_dr.core.checkpoints.manifest import MANIFEST_NAME
from lifeboat_dr.core.replication.copying import replicate_checkpoints
from lifeboat_dr.core.replication.lag import LagLog
from lifeboat_dr.shell.cli import main

STEPS = (50, 100, 150, 200)


def prefix(step: int) -> str:
    return f"step-{step:06d}"


def write_run(store, write_checkpoint, steps=STEPS) -> None:
    for step in steps:
        write_checkpoint(store, prefix(step), step)


def test_replicate_copies_what_retention_keeps_and_a_rerun_is_up_to_date(
    runbook_file, primary, secondary, write_checkpoint, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    write_run(primary, write_checkpoint)
    assert main(["replicate", str(runbook_file)]) == 0
    out = capsys.readouterr().out
    # keep_last 2 (200, 150) and every 100th step (100): 50 is never copied
    assert {i.key.rsplit("/", 1)[0] for i in secondary.list() if not i.key.startswith("_lifeboat/")} == {
        prefix(200),
        prefix(150),
        prefix(100),
    }
    assert out.index(prefix(200)) < out.index(prefix(150)) < out.index(prefix(100))
    lags = LagLog(tmp_path / ".lifeboat/trainer/replication-lag.jsonl").read()
    assert [r.step for r in lags] == [200, 150, 100] and not any(r.exceeded for r in lags)

    assert main(["replicate", str(runbook_file)]) == 0
    assert capsys.readouterr().out.count("up to date (5 objects)") == 3


def test_dry_run_lists_copies_and_deletions_and_changes_nothing(
    runbook_file, primary, secondary, write_checkpoint, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    write_run(primary, write_checkpoint, steps=(200,))
    write_run(secondary, write_checkpoint, steps=(50, 150, 160))
    before = sorted(i.key for i in secondary.list())
    assert main(["replicate", str(runbook_file), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would copy 5 object(s)" in out
    assert f"would delete {prefix(50)}" in out
    assert f"keep {prefix(160)} (step 160): among the newest 2 certifiable" in out
    assert sorted(i.key for i in secondary.list()) == before
    assert not (tmp_path / ".lifeboat").exists()


def test_retention_only_spares_a_checkpoint_a_failover_resumes_from(
    runbook_file, primary, secondary, write_checkpoint, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    write_run(secondary, write_checkpoint, steps=(10, 20, 30, 40))
    code = main(["replicate", str(runbook_file), "--retention-only", "--protect", prefix(10)])
    assert code == 0
    left = {i.key.rsplit("/", 1)[0] for i in secondary.list() if not i.key.startswith("_lifeboat/")}
    assert left == {prefix(10), prefix(30), prefix(40)}
    assert [i.key for i in primary.list()] == ["_lifeboat/lease.json"]  # named for this runbook only


def test_a_replica_completed_later_than_the_rpo_target_is_flagged(primary, secondary, write_checkpoint):
    write_run(primary, write_checkpoint, steps=(100,))
    written = max(i.updated for i in primary.list())
    report = replicate_checkpoints(
        primary,
        secondary,
        [StoredCheckpoint(prefix(100), 100)],
        rpo_target=timedelta(minutes=30),
        clock=lambda: written + timedelta(minutes=45),
    )
    (lag,) = report.exceeded
    assert lag.lag == timedelta(minutes=45) and lag.complete
    assert json.loads(json.dumps(lag.to_dict()))["exceeded"] is True


def test_a_checkpoint_that_cannot_be_replicated_reports_its_growing_lag(
    primary, secondary, write_checkpoint, faults, no_sleep
):
    write_run(primary, write_checkpoint, steps=(100, 200))
    written = max(i.updated for i in primary.list())
    report = replicate_checkpoints(
        primary,
        faults.Throttling(secondary, every=1),
        [StoredCheckpoint(prefix(100), 100), StoredCheckpoint(prefix(200), 200)],
        rpo_target=timedelta(minutes=30),
        retry=no_sleep,
        clock=lambda: written + timedelta(hours=1),
    )
    assert sorted(report.failed) == [prefix(100), prefix(200)]
    assert [(r.step, r.complete, r.exceeded) for r in report.lags] == [(200, False, True), (100, False, True)]


def test_a_failed_replication_exits_1_and_names_the_checkpoint(
    runbook_file, primary, secondary, write_checkpoint, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    write_run(primary, write_checkpoint, steps=(100,))
    (primary.root / prefix(100) / "shard-001.bin").write_bytes(b"truncated")  # list size != manifest
    assert main(["replicate", str(runbook_file)]) == 1
    assert f"FAILED {prefix(100)}" in capsys.readouterr().err
    assert not [i.key for i in secondary.list() if i.key.endswith(MANIFEST_NAME)]


def test_retention_keeps_the_newest_certified_checkpoint_when_newer_replicas_are_corrupt(
    runbook_file, primary, secondary, write_checkpoint, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    write_run(secondary, write_checkpoint, steps=(10, 20, 30, 40))
    for step in (30, 40):  # bit rot on the two newest replicas: their shards contradict the manifest
        secondary.put(f"{prefix(step)}/shard-001.bin", b"rotten" * 500)
    assert main(["replicate", str(runbook_file), "--retention-only"]) == 0
    out = capsys.readouterr().out
    # keep_last 2 counts certifiable checkpoints: 20 and 10; the rotten newer ones stay too
    assert f"keep {prefix(40)} (step 40): not certifiable; kept until 2 newer ones certify" in out
    assert f"keep {prefix(20)} (step 20): among the newest 2 certifiable" in out
    assert f"keep {prefix(10)} (step 10): among the newest 2 certifiable" in out
    assert {i.key.rsplit("/", 1)[0] for i in secondary.list() if not i.key.startswith("_lifeboat/")} == {
        prefix(s) for s in (10, 20, 30, 40)
    }


def test_the_progress_bar_shows_bytes_per_second(
    runbook_file, primary, write_checkpoint, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    write_run(primary, write_checkpoint, steps=(100,))
    assert main(["replicate", str(runbook_file), "--progress"]) == 0
    err = capsys.readouterr().err
    assert prefix(100) in err and "/s" in err and "12.4 kB" in err


def test_retention_spares_the_checkpoint_an_in_progress_failover_resumes_from(
    runbook_file, primary, secondary, write_checkpoint, tmp_path, monkeypatch, capsys
):
    from datetime import UTC, datetime

    from lifeboat_dr.core.ledger import LedgerStore
    from lifeboat_dr.flows.wiring import new_ledger
    from lifeboat_dr.runbooks.loader import load_runbook

    monkeypatch.chdir(tmp_path)
    write_run(secondary, write_checkpoint, steps=(10, 20, 30, 40))
    rb = load_runbook(runbook_file)
    ledger = new_ledger(rb, "run-42", sink=LedgerStore(secondary))
    ledger.checkpoint(f"{secondary.uri}/{prefix(10)}", datetime.now(UTC))  # resuming, not finished

    assert main(["replicate", str(runbook_file), "--retention-only"]) == 0
    assert f"keep {prefix(10)} (step 10): in use by failover run run-42" in capsys.readouterr().out
    assert len(list(secondary.list(prefix(10) + "/"))) == 5

    ledger.finish("completed")
    assert main(["replicate", str(runbook_file), "--retention-only"]) == 0
    assert not list(secondary.list(prefix(10) + "/"))


def test_recheck_finds_a_replica_shard_that_rotted_at_rest(
    runbook_file, primary, secondary, write_checkpoint, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    write_run(primary, write_checkpoint, steps=(100,))
    assert main(["replicate", str(runbook_file)]) == 0
    rotten = f"{prefix(100)}/shard-002.bin"
    secondary.put(rotten, b"\x00" * secondary.head(rotten).size)
    assert main(["replicate", str(runbook_file), "--recheck"]) == 0
    assert "copied 2 object(s)" in capsys.readouterr().out  # the shard, then its manifest again
    assert b"".join(secondary.read(rotten)) == b"".join(primary.read(rotten))
