"""`lifeboat fence RUNBOOK --by NAME --reason TEXT`: the old primary fenced by hand, with
Prefect down (issue #29, the rendered runbook's fence step).

The incident: the primary's region is gone (its S3 endpoint refuses every connection), the
control plane with it, and a zombie trainer may still be committing to the primary's bucket
from inside the partition. The on-call fences from a laptop, straight against the stores: the
secondary's lease goes to epoch 1, the old epoch sealed at the highest commit replication
brought over, so whatever the zombie commits later never counts. Twice is one epoch; a store
that does not answer is unknown (exit 75, nothing written); another runbook's lease and a
failover running now are refused; and a failover started later fences once more, on top.

Real peers: S3 on moto on loopback, a port nothing listens on for the dead endpoint, local
folders; the CLI in-process (its own parser and exit codes)."""

from __future__ import annotations

import json

import pytest

from lifeboat_dr.core.commit import commit_checkpoint
from lifeboat_dr.core.fencing import (
    COMMIT_MARKER,
    LEASE_KEY,
    fence_job,
    guarded_commit,
    marker_is_fenced_out,
    peek_lease,
)
from lifeboat_dr.core.ledger import LedgerFile
from lifeboat_dr.core.lock import LOCK_KEY, RunbookLock
from lifeboat_dr.kernel.errors import NotFound, StopFailover
from lifeboat_dr.providers.storage.local import LocalStore
from lifeboat_dr.shell.cli import main
from lifeboat_dr.standins.checkpoints import write_checkpoint
from lifeboat_dr.testing.emulators import AWS_TEST_ENV

RUNBOOK = """\
name: trainer
workload: finetuning
targets: {{rpo: 30m}}
primary: {{infra: local, store: "{primary}"{primary_endpoint}}}
secondary: {{infra: local, store: "{secondary}"{secondary_endpoint}, candidates: [{{infra: local}}]}}
job: {{command: "python train.py"}}
checkpoint: {{layout: manifest, cadence: 5m}}
"""


def runbook_file(tmp_path, primary: str, secondary: str, *, primary_endpoint=None, secondary_endpoint=None):
    def endpoint(url):
        return f', endpoint_url: "{url}"' if url else ""

    path = tmp_path / "trainer.yaml"
    path.write_text(
        RUNBOOK.format(
            primary=primary,
            secondary=secondary,
            primary_endpoint=endpoint(primary_endpoint),
            secondary_endpoint=endpoint(secondary_endpoint),
        )
    )
    return path


@pytest.fixture(autouse=True)
def ledger(tmp_path, monkeypatch):
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("LIFEBOAT_LEDGER", str(path))
    monkeypatch.setenv("LIFEBOAT_STORE_DEADLINE", "3")
    for name, value in AWS_TEST_ENV.items():  # a store that does not answer, not one we may not ask
        monkeypatch.setenv(name, value)
    return path


def commit(store, step: int, epoch: int = 0) -> str:
    name = write_checkpoint(store, "manifest", step)
    commit_checkpoint(store, name, step, epoch)
    return name


def replicate(source, destination, name: str) -> None:
    """What replication does for one checkpoint: every object, the marker among them."""
    for o in source.list(f"{name}/"):
        destination.put(o.key, b"".join(source.read(o.key)))


def fence(capsys, runbook, *args) -> tuple[int, str, str]:
    code = main(["fence", str(runbook), *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def outage(s3_endpoint, tmp_path):
    """The primary's bucket as the zombie sees it (steps 10, 20, 30 committed at epoch 0), the
    secondary's with steps 10 and 20 replicated, and a runbook whose primary endpoint is dead."""
    from lifeboat_dr.providers.storage.s3 import S3Store
    from lifeboat_dr.testing.emulators import dead_port, new_s3_bucket

    pbucket, sbucket = new_s3_bucket(s3_endpoint), new_s3_bucket(s3_endpoint)
    zombie_side = S3Store(pbucket, "ckpt", endpoint_url=s3_endpoint)
    secondary = S3Store(sbucket, "ckpt", endpoint_url=s3_endpoint)
    for step in (10, 20):
        replicate(zombie_side, secondary, commit(zombie_side, step))
    late = commit(zombie_side, 30)  # after the last replication pass
    runbook = runbook_file(
        tmp_path,
        f"s3://{pbucket}/ckpt",
        f"s3://{sbucket}/ckpt",
        primary_endpoint=dead_port(),
        secondary_endpoint=s3_endpoint,
    )
    return runbook, zombie_side, secondary, late


def test_a_hand_fence_with_the_primary_dead_raises_the_epoch_once_on_the_secondary(outage, capsys, ledger):
    runbook, zombie_side, secondary, late = outage

    code, out, err = fence(capsys, runbook, "--by", "alice", "--reason", "us-east-1 is gone", "--json")

    assert code == 0, err
    doc = json.loads(out)
    assert (doc["fenced"], doc["epoch_before"], doc["epoch"], doc["active"]) == (True, 0, 1, "secondary")
    assert doc["seal"]["epoch"] == 0 and doc["seal"]["commits"] == 2 and doc["seal"]["basis"] == "replicated"
    assert doc["written"] == [secondary.uri] and doc["not_reached"] == [zombie_side.uri]
    lease = peek_lease(secondary)
    assert (lease.epoch, lease.active, lease.holder, lease.runbook) == (
        1,
        "secondary",
        "manual:alice",
        "trainer",
    )
    # the zombie's step 30 (seq 3), were it ever copied over, is not of the active lineage
    assert marker_is_fenced_out(b"".join(zombie_side.read(f"{late}/{COMMIT_MARKER}")), lease)
    (entry,) = LedgerFile(ledger).read("trainer")
    assert (entry.kind, entry.outcome, entry.run_id) == ("manual fence", "completed", doc["run_id"])
    assert entry.notes["by"] == "alice" and entry.notes["reason"] == "us-east-1 is gone"
    assert "fenced" in entry.phases

    code, out, err = fence(capsys, runbook, "--by", "bob", "--reason", "again, to be sure")

    assert code == 0, err
    assert "already fenced at epoch 1" in out and "nothing raised" in out, out
    assert peek_lease(secondary) == lease  # one epoch raised, by the first
    assert len(LedgerFile(ledger).read("trainer")) == 1


def test_the_primarys_store_back_is_caught_up_and_the_zombies_next_commit_is_refused(
    outage, capsys, s3_endpoint
):
    runbook, zombie_side, secondary, _ = outage
    assert fence(capsys, runbook, "--by", "alice", "--reason", "region down")[0] == 0
    guarded_commit(zombie_side, f"step_0000040/{COMMIT_MARKER}", 0, 40)  # the partition: it still lands there

    # The region is back: the same command, the primary's endpoint answering.
    runbook_file(
        runbook.parent,
        zombie_side.uri,
        secondary.uri,
        primary_endpoint=s3_endpoint,
        secondary_endpoint=s3_endpoint,
    )
    code, out, err = fence(capsys, runbook, "--by", "alice", "--reason", "region back", "--json")

    assert code == 0, err
    doc = json.loads(out)
    assert (doc["fenced"], doc["epoch"], doc["caught_up"]) == (False, 1, [zombie_side.uri])
    assert peek_lease(zombie_side).epoch == 1
    with pytest.raises(StopFailover, match="fenced out by manual:alice"):
        guarded_commit(zombie_side, f"step_0000050/{COMMIT_MARKER}", 0, 50)
    with pytest.raises(NotFound):
        zombie_side.head(f"step_0000050/{COMMIT_MARKER}")


def test_with_both_stores_answering_the_zombies_guarded_commit_is_refused(tmp_path, capsys):
    primary, secondary = LocalStore(tmp_path / "primary"), LocalStore(tmp_path / "secondary")
    ten = commit(primary, 10)
    replicate(primary, secondary, ten)
    runbook = runbook_file(tmp_path, f"file://{tmp_path / 'primary'}", f"file://{tmp_path / 'secondary'}")

    code, out, err = fence(capsys, runbook, "--by", "alice", "--reason", "GPUs dead, job hung")

    assert code == 0, err
    assert "epoch 0 -> 1" in out and "sealed epoch 0 (primary@0) at commit 1" in out, out
    assert peek_lease(primary).epoch == peek_lease(secondary).epoch == 1
    assert peek_lease(secondary).seal(0).basis == "fence"  # counted on the writers' own store: exact
    with pytest.raises(StopFailover, match="fenced out"):
        guarded_commit(primary, f"step_0000020/{COMMIT_MARKER}", 0, 20)
    with pytest.raises(NotFound):
        primary.head(f"step_0000020/{COMMIT_MARKER}")


def test_the_secondarys_store_not_answering_is_one_line_exit_75_and_nothing_written(tmp_path, capsys, ledger):
    from lifeboat_dr.testing.emulators import dead_port

    primary = LocalStore(tmp_path / "primary")
    commit(primary, 10)
    before = {o.key: o.version for o in primary.list()}
    runbook = runbook_file(
        tmp_path, f"file://{tmp_path / 'primary'}", "s3://dr-bucket/ckpt", secondary_endpoint=dead_port()
    )

    code, out, err = fence(capsys, runbook, "--by", "alice", "--reason", "region down")

    assert code == 75
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "s3://dr-bucket/ckpt" in lines[0] and "did not answer" in lines[0], err
    assert "nothing was written" in lines[0] and out == ""
    assert {o.key: o.version for o in primary.list()} == before
    assert LedgerFile(ledger).read("trainer") == []


def test_a_lease_naming_another_runbook_is_refused_in_one_line(tmp_path, capsys):
    primary, secondary = LocalStore(tmp_path / "primary"), LocalStore(tmp_path / "secondary")
    fence_job(secondary, None, run_id="theirs", holder="lifeboat:other-dr", runbook="other")
    before = peek_lease(secondary)
    runbook = runbook_file(tmp_path, f"file://{tmp_path / 'primary'}", f"file://{tmp_path / 'secondary'}")

    code, _, err = fence(capsys, runbook, "--by", "alice", "--reason", "region down")

    assert code == 1
    assert err.count("\n") == 1 and "is the site state of runbook other, not trainer" in err, err
    assert peek_lease(secondary) == before and peek_lease(primary) is None
    with pytest.raises(NotFound):
        secondary.head(LOCK_KEY)  # refused before the lock was taken


def test_a_failover_running_now_holds_the_lock_so_the_hand_fence_changes_nothing(tmp_path, capsys):
    primary, secondary = LocalStore(tmp_path / "primary"), LocalStore(tmp_path / "secondary")
    commit(primary, 10)
    runbook = runbook_file(tmp_path, f"file://{tmp_path / 'primary'}", f"file://{tmp_path / 'secondary'}")

    with RunbookLock(secondary, "trainer", "failover-7", action="failover"):
        code, out, err = fence(capsys, runbook, "--by", "alice", "--reason", "region down")

    assert code == 75, out + err
    assert "holds its lock: failover run failover-7" in err and err.count("\n") == 1, err
    assert peek_lease(secondary) is None and peek_lease(primary).epoch == 0


def test_a_failover_after_the_hand_fence_fences_once_more_on_top(tmp_path, capsys, monkeypatch):
    """The walk takes its own epoch over a hand fence (it cannot tell whether a job resumed by
    hand writes under the hand fence's): the zombie stays sealed where the hand fence sealed
    it, and a job resumed by hand under epoch 1 is fenced out in its turn."""
    from lifeboat_dr.flows.wiring import build_steps
    from lifeboat_dr.runbooks.loader import load_runbook

    primary, secondary = LocalStore(tmp_path / "primary"), LocalStore(tmp_path / "secondary")
    for step in (10, 20):
        replicate(primary, secondary, commit(primary, step))
    runbook = runbook_file(tmp_path, f"file://{tmp_path / 'primary'}", f"file://{tmp_path / 'secondary'}")
    assert fence(capsys, runbook, "--by", "alice", "--reason", "region down")[0] == 0
    by_hand = peek_lease(secondary)
    thirty = commit(
        secondary, 30, epoch=1
    )  # the job the on-call resumed by hand, under the hand fence's epoch

    steps = build_steps(load_runbook(runbook), run_id="failover-1", evidence=("primary: down",))
    steps.confirm()
    steps.recheck("fence")
    fenced = steps.fence()

    lease = peek_lease(secondary)
    assert fenced.epoch == lease.epoch == 2 and lease.run_id == "failover-1"
    assert lease.seal(0) == by_hand.seal(0)  # the zombie's epoch: sealed once, by hand
    assert lease.seal(1).commits == 1 and lease.seal(1).run_id == by_hand.run_id  # counted where it committed
    assert not marker_is_fenced_out(b"".join(secondary.read(f"{thirty}/{COMMIT_MARKER}")), lease)
    for epoch, name in ((0, "step_0000040"), (1, "step_0000050")):
        with pytest.raises(StopFailover, match="fenced out by lifeboat:trainer-dr"):
            guarded_commit(secondary, f"{name}/{COMMIT_MARKER}", epoch, 40)


def test_a_serving_runbook_has_no_writer_to_fence(capsys):
    code, _, err = fence(capsys, "chat-serving", "--by", "alice", "--reason", "region down")
    assert code == 1 and err.count("\n") == 1 and "serves traffic" in err, err


def test_who_fences_is_required(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("USER", raising=False)
    monkeypatch.delenv("LOGNAME", raising=False)
    runbook = runbook_file(tmp_path, f"file://{tmp_path / 'primary'}", f"file://{tmp_path / 'secondary'}")
    code, _, err = fence(capsys, runbook, "--reason", "region down")
    assert code == 1 and "--by NAME" in err and err.count("\n") == 1, err
    with pytest.raises(NotFound):
        LocalStore(tmp_path / "secondary").head(LEASE_KEY)
