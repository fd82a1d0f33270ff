"""The torch trainer under torchrun (2 CPU ranks, gloo): real DCP saves, killed, resumed exactly.

Every run is a real `torchrun` (about 5-10 s each on two shared cores); the uninterrupted
reference run is shared by the module.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lifeboat_dr.core.resume import parse_loaded, parse_losses
from lifeboat_dr.providers.compute.base import JobSpec, JobState, PlanOption
from lifeboat_dr.providers.compute.local import LocalCompute
from lifeboat_dr.standins.trainer.jobs import TRAINERS

TORCH = TRAINERS["torch"]
pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(TORCH.missing() is not None, reason=TORCH.missing() or ""),
]

REPO = Path(__file__).resolve().parents[2]
LOCAL = PlanOption(infra="local", instance_type=None, accelerators=None, use_spot=False, hourly_usd=0.0)
STEPS, EVERY = 20, 5
ENV = {"PYTHONPATH": str(REPO)}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> tuple[Path, dict[int, float]]:
    """A run that never stopped: its checkpoint folder and its losses."""
    root = tmp_path_factory.mktemp("uninterrupted")
    TORCH.run(steps=STEPS, every=EVERY, ckpt_dir=root / "ckpt", loss_log=root / "loss.jsonl")
    losses = parse_losses((root / "loss.jsonl").read_text())
    assert sorted(losses) == list(range(1, STEPS + 1))
    return root / "ckpt", losses


def _ranks_alive(marker: str) -> list[str]:
    """Command lines of live processes that mention `marker` (a run's own folder)."""
    out = subprocess.run(["ps", "-eo", "stat=,args="], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if marker in line and not line.lstrip().startswith("Z")]


def _files(step) -> list[str]:
    """A checkpoint folder's files (LocalStore's checksum sidecars aside)."""
    return sorted(p.name for p in step.iterdir() if not p.name.endswith(".crc32c"))


def test_each_save_is_one_distcp_per_rank_committed_by_metadata_then_the_guarded_commit(uninterrupted):
    from lifeboat_dr.core.checkpoints.inventory import stored_checkpoints
    from lifeboat_dr.providers.storage.local import LocalStore

    ckpt, _ = uninterrupted
    step = ckpt / "step-00000020"
    assert _files(step) == [".metadata", "__0_0.distcp", "__1_0.distcp", "lifeboat-commit.json"]
    assert all(p.stat().st_size > 0 for p in step.iterdir())
    shards = [step / "__0_0.distcp", step / "__1_0.distcp"]
    assert (step / ".metadata").stat().st_mtime_ns >= max(p.stat().st_mtime_ns for p in shards)
    assert (step / "lifeboat-commit.json").stat().st_mtime_ns >= (step / ".metadata").stat().st_mtime_ns
    found = stored_checkpoints(LocalStore(ckpt), "auto")
    assert [(c.step, c.complete) for c in found] == [(20, True), (15, True), (10, True), (5, True)]


def test_replicated_dcp_checkpoints_certify_and_a_flipped_byte_falls_back(uninterrupted, tmp_path):
    from datetime import timedelta

    from lifeboat_dr.core.certify import certify_replica
    from lifeboat_dr.core.checkpoints.inventory import committed_checkpoints
    from lifeboat_dr.core.replication.copying import replicate_checkpoints
    from lifeboat_dr.providers.storage.local import LocalStore

    ckpt, _ = uninterrupted
    primary, replica = LocalStore(ckpt), LocalStore(tmp_path / "replica")
    report = replicate_checkpoints(
        primary, replica, committed_checkpoints(primary, "dcp"), rpo_target=timedelta(minutes=1)
    )
    assert not report.failed
    assert certify_replica(replica, primary, layout="dcp").certified.step == 20

    shard = tmp_path / "replica" / "step-00000020" / "__1_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01  # same size, one bit off
    shard.write_bytes(bytes(data))
    result = certify_replica(replica, primary, layout="dcp")
    assert result.certified.step == 15
    assert [(r.step, r.reason) for r in result.rejected] == [(20, "crc mismatch")]


def test_killed_at_a_random_step_resumes_with_bitwise_identical_losses(uninterrupted, tmp_path):
    _, expected = uninterrupted
    kill_after = random.Random(14).randint(7, 14)  # between checkpoints 5 and 15
    compute = LocalCompute(tmp_path / "clusters")
    ckpt, primary_log = tmp_path / "ckpt", tmp_path / "primary.jsonl"
    command = TORCH.command(steps=STEPS, every=EVERY, ckpt_dir=ckpt, loss_log=primary_log, step_seconds=0.2)
    try:
        compute.launch("torch-primary", LOCAL, JobSpec(name="t", command=command, env=ENV))
        deadline = time.monotonic() + 120
        while (
            max(parse_losses(primary_log.read_text() if primary_log.exists() else ""), default=0) < kill_after
        ):
            assert compute.status("torch-primary").job is JobState.RUNNING, compute.logs("torch-primary")
            assert time.monotonic() < deadline, "the primary never reached the kill step"
            time.sleep(0.02)
        compute.preempt("torch-primary")  # SIGKILL the job's process group: a lost node
        assert compute.status("torch-primary").job is JobState.FAILED
        time.sleep(0.5)
        assert _ranks_alive(str(ckpt)) == [], "a rank outlived its launcher"
        killed_at = max(parse_losses(primary_log.read_text()))
        assert kill_after <= killed_at < STEPS
        compute.teardown("torch-primary")

        newest = TORCH.newest_committed(ckpt)
        resumed_from = int(newest.name.split("-")[1])
        assert resumed_from in (5, 10, 15) and resumed_from <= killed_at
        secondary = JobSpec(
            name="t",
            command=TORCH.command(
                steps=STEPS, every=EVERY, ckpt_dir=ckpt, loss_log=tmp_path / "resumed.jsonl"
            ),
            env=ENV,
            resume_arg="--resume {checkpoint}",
            checkpoint=f"file://{newest}",
        )
        compute.launch("torch-secondary", LOCAL, secondary)
        deadline = time.monotonic() + 120
        while not compute.status("torch-secondary").job.finished:
            assert time.monotonic() < deadline, compute.logs("torch-secondary")
            time.sleep(0.1)
        log = compute.logs("torch-secondary")
        assert compute.status("torch-secondary").job is JobState.SUCCEEDED, log
    finally:
        for name in compute.clusters():
            compute.teardown(name)

    assert parse_loaded(log)[0] == resumed_from
    resumed = parse_losses(log)
    assert sorted(resumed) == list(range(resumed_from + 1, STEPS + 1))
    assert {s: expected[s] for s in resumed} == resumed  # float equality: bit for bit
    assert parse_losses((tmp_path / "resumed.jsonl").read_text()) == resumed


def test_a_rollback_to_an_older_checkpoint_rewrites_the_newer_steps_whole(uninterrupted, tmp_path):
    """Resumed from step 5 while step 10 exists (a rollback, a second resume): step 10 is
    written anew, nothing of the older lineage's step 10 is left, the losses still match."""
    import shutil

    from lifeboat_dr.core.checkpoints.inventory import stored_checkpoints
    from lifeboat_dr.providers.storage.local import LocalStore

    source, expected = uninterrupted
    ckpt = tmp_path / "ckpt"
    shutil.copytree(source, ckpt)
    (ckpt / "step-00000010" / "__2_0.distcp").write_bytes(b"a shard of an older, wider lineage")
    TORCH.run(
        steps=12,
        every=EVERY,
        ckpt_dir=ckpt,
        loss_log=tmp_path / "l.jsonl",
        resume=str(ckpt / "step-00000005"),
    )
    text = (tmp_path / "l.jsonl").read_text()
    assert parse_loaded(text)[0] == 5
    assert parse_losses(text) == {s: expected[s] for s in range(6, 13)}
    assert _files(ckpt / "step-00000010") == [
        ".metadata",
        "__0_0.distcp",
        "__1_0.distcp",
        "lifeboat-commit.json",
    ]
    assert all(c.complete for c in stored_checkpoints(LocalStore(ckpt), "dcp"))


def test_resumes_that_drop_optimizer_or_rng_state_drift(uninterrupted, tmp_path):
    """The negative control: what the exact resume keeps is what the comparison detects."""
    ckpt, expected = uninterrupted
    out = tmp_path / "naive.json"
    subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(Path(__file__).with_name("naive_resume.py")), str(ckpt / "step-00000010"), str(STEPS), str(out)],
        check=True, capture_output=True, env={**os.environ, **ENV}, timeout=120,
    )  # fmt: skip
    found = {
        name: {int(s): v for s, v in losses.items()} for name, losses in json.loads(out.read_text()).items()
    }
    fresh, no_rng = found["fresh_optimizer"], found["no_rng"]
    assert fresh[11] == expected[11], "same weights, same batch: the first step agrees"
    assert any(fresh[s] != expected[s] for s in range(12, STEPS + 1)), "Adam's moments lost: drift"
    assert no_rng[11] != expected[11], "another batch at once"


def test_a_checkpoint_saved_by_two_ranks_refuses_one_rank(uninterrupted, tmp_path):
    ckpt, _ = uninterrupted
    args = TORCH.argv(
        steps=STEPS, every=EVERY, ckpt_dir=tmp_path / "ckpt", loss_log=tmp_path / "l.jsonl", resume=str(ckpt)
    )
    args[args.index("2")] = "1"  # --nproc-per-node 1
    done = subprocess.run(args, capture_output=True, text=True, env={**os.environ, **ENV}, timeout=120)
    assert done.returncode != 0
    assert "step-00000020: saved by 2 rank(s), this job has 1; resume with the same --nproc-per-node" in (
        done.stderr
    )
    assert not (tmp_path / "l.jsonl").exists() or not parse_losses((tmp_path / "l.jsonl").read_text())


def test_a_fenced_out_torch_primary_commits_nothing_more_and_stops_in_one_line(tmp_path):
    """The torch trainer commits each save through the guarded commit, as the numpy one does:
    once a failover fenced its store, its next save is refused and every rank stops."""
    from lifeboat_dr.core.fencing import COMMIT_MARKER, fence, read_lease
    from lifeboat_dr.providers.storage.local import LocalStore

    ckpt = tmp_path / "ckpt"
    TORCH.run(steps=10, every=EVERY, ckpt_dir=ckpt, loss_log=tmp_path / "first.jsonl")
    store = LocalStore(ckpt)
    assert read_lease(store)[0].commits == 2
    assert all((ckpt / f"step-{s:08d}" / COMMIT_MARKER).exists() for s in (5, 10))
    fence(store, run_id="failover-1", holder="lifeboat:dr")

    env = {k: v for k, v in os.environ.items() if k != "LIFEBOAT_EPOCH"}  # the zombie: epoch 0
    argv = TORCH.argv(
        steps=STEPS,
        every=EVERY,
        ckpt_dir=ckpt,
        loss_log=tmp_path / "zombie.jsonl",
        resume=str(ckpt / "step-00000010"),
    )
    run = subprocess.run(argv, capture_output=True, text=True, timeout=300, env={**env, **ENV})

    assert run.returncode != 0, run.stdout + run.stderr
    fenced = [line for line in run.stderr.splitlines() if "fenced out" in line]
    assert len(fenced) == 1 and "Traceback" not in run.stderr, run.stderr
    assert not (ckpt / "step-00000015" / COMMIT_MARKER).exists()
    assert not (ckpt / "step-00000020").exists()
    assert read_lease(store)[0].epoch == 1
