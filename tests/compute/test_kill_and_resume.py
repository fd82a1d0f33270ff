"""The demo trainer killed mid-run resumes through LocalCompute with identical losses."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import pytest

from lifeboat_dr.providers.compute.base import JobSpec, JobState, PlanOption, wait_for
from lifeboat_dr.providers.compute.local import LocalCompute
from lifeboat_dr.standins.trainer import Trainer, newest_committed

REPO = Path(__file__).resolve().parents[2]
LOCAL = PlanOption(infra="local", instance_type=None, accelerators=None, use_spot=False, hourly_usd=0.0)
STEPS, EVERY = 60, 10


def _losses(path: Path) -> dict[int, float]:
    out = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if "loss" in rec:  # the trainer also logs {"event": "loaded", ...} when it resumes
            out[rec["step"]] = rec["loss"]
    return out


def _trainer_cmd(ckpt: Path, log: Path, step_seconds: float = 0.0) -> str:
    return " ".join(
        shlex.quote(a)
        for a in [
            sys.executable,
            "-m",
            "lifeboat_dr.standins.trainer",
            "--steps",
            str(STEPS),
            "--every",
            str(EVERY),
            "--ckpt-dir",
            str(ckpt),
            "--loss-log",
            str(log),
            "--step-seconds",
            str(step_seconds),
        ]
    )


@pytest.mark.processes
def test_trainer_killed_mid_run_resumes_with_the_uninterrupted_losses(tmp_path):
    baseline = Trainer(tmp_path / "baseline-ckpt", tmp_path / "baseline.jsonl").run(STEPS, EVERY)
    assert baseline.step == STEPS
    expected = _losses(tmp_path / "baseline.jsonl")

    compute = LocalCompute(tmp_path / "clusters")
    ckpt = tmp_path / "ckpt"
    env = {"PYTHONPATH": str(REPO)}
    primary = JobSpec(
        name="demo", command=_trainer_cmd(ckpt, tmp_path / "primary.jsonl", 0.02), workdir=tmp_path, env=env
    )
    try:
        compute.launch("demo-primary", LOCAL, primary)
        deadline = time.monotonic() + 60
        while (newest := newest_committed(ckpt)) is None or newest.name < "step-00000020":
            assert compute.status("demo-primary").job is JobState.RUNNING, compute.logs("demo-primary")
            assert time.monotonic() < deadline, "the trainer never committed step 20"
            time.sleep(0.02)
        compute.preempt("demo-primary")  # SIGKILL mid-run, between checkpoints or inside one
        assert compute.status("demo-primary").job is JobState.FAILED
        killed_at = max(_losses(tmp_path / "primary.jsonl"))
        assert killed_at < STEPS
        compute.teardown("demo-primary")

        resume_from = newest_committed(ckpt)
        resumed_step = int(resume_from.name.split("-")[1])
        secondary = JobSpec(
            name="demo",
            command=_trainer_cmd(ckpt, tmp_path / "secondary.jsonl"),
            workdir=tmp_path,
            env=env,
            resume_env="LIFEBOAT_RESUME_FROM",
            checkpoint=f"file://{resume_from}",
        )
        compute.launch("demo-secondary", LOCAL, secondary)
        done = wait_for(compute, "demo-secondary", lambda s: s.job.finished, timeout=60)
        assert done.job is JobState.SUCCEEDED, compute.logs("demo-secondary")
    finally:
        for name in compute.clusters():
            compute.teardown(name)
    assert compute.clusters() == []

    resumed = _losses(tmp_path / "secondary.jsonl")
    assert min(resumed) == resumed_step + 1
    heartbeat = json.loads((ckpt / "heartbeat.json").read_text())
    assert heartbeat["step"] == STEPS and heartbeat["loss"] == expected[STEPS]
    assert resumed == {s: expected[s] for s in range(resumed_step + 1, STEPS + 1)}


def test_a_checkpoint_without_its_manifest_is_never_resumed_from(tmp_path):
    t = Trainer(tmp_path / "ckpt", tmp_path / "loss.jsonl")
    t.run(20, 10)
    torn = tmp_path / "ckpt" / "step-00000030"
    torn.mkdir()
    (torn / "model.npy").write_bytes(b"half a shard")
    assert newest_committed(tmp_path / "ckpt").name == "step-00000020"
    assert t.load(f"file://{tmp_path / 'ckpt'}").step == 20
