"""The guarded torch trainer under torchrun (2 CPU ranks, gloo): an injected NCCL or CUDA
error ends in an emergency checkpoint, a SIGSTOPped rank in the watchdog's stop within its
bound, and each resumes with losses bitwise those of a run that never stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lifeboat_dr.core.resume import parse_loaded, parse_losses
from lifeboat_dr.providers.orchestrator.fake_events import FileEvents
from lifeboat_dr.standins.trainer.jobs import TRAINERS, rank_pid

TORCH = TRAINERS["torch"]
pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(TORCH.missing() is not None, reason=TORCH.missing() or ""),
]

REPO = Path(__file__).resolve().parents[2]
STEPS, EVERY = 12, 5
FLOOR_S = 2.0  # the watchdog's floor here: steps take milliseconds on two shared cores


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LIFEBOAT_", "PREFECT_API_URL"))}
    return env | {"PYTHONPATH": str(REPO), "LIFEBOAT_GUARD_EVENTS": str(tmp_path / "events.jsonl")} | extra


def _train(tmp_path: Path, name: str, *, env: dict[str, str], **kw) -> subprocess.CompletedProcess:
    argv = TORCH.argv(
        steps=STEPS, every=EVERY, ckpt_dir=tmp_path / "ckpt", loss_log=tmp_path / f"{name}.jsonl", **kw
    )
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def expected(tmp_path_factory) -> dict[int, float]:
    root = tmp_path_factory.mktemp("uninterrupted")
    TORCH.run(steps=STEPS, every=EVERY, ckpt_dir=root / "ckpt", loss_log=root / "loss.jsonl")
    return parse_losses((root / "loss.jsonl").read_text())


def _resume_matches(tmp_path: Path, expected: dict[int, float], from_step: int) -> None:
    done = _train(tmp_path, "resumed", env=_env(tmp_path), resume=str(tmp_path / "ckpt"))
    assert done.returncode == 0, done.stderr[-2000:]
    text = (tmp_path / "resumed.jsonl").read_text()
    assert parse_loaded(text)[0] == from_step
    resumed = parse_losses(text)
    assert sorted(resumed) == list(range(from_step + 1, STEPS + 1))
    assert resumed == {s: expected[s] for s in resumed}  # float equality: bit for bit


@pytest.mark.parametrize(("kind", "code"), [("nccl-error", 80), ("cuda-error", 81)])
def test_an_injected_fault_ends_in_an_emergency_checkpoint_and_an_exact_resume(
    kind, code, expected, tmp_path
):
    from lifeboat_dr.core.certify import certify_replica
    from lifeboat_dr.providers.storage.local import LocalStore

    run = _train(tmp_path, "faulted", env=_env(tmp_path, LIFEBOAT_INJECT=f"{kind}@8"))

    assert run.returncode == code, run.stderr[-3000:]
    said = [line for line in run.stderr.splitlines() if line.startswith("guard:")]
    assert len(said) == 1 and "emergency checkpoint of step 7" in said[0], run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    assert max(parse_losses((tmp_path / "faulted.jsonl").read_text())) == 7
    record = json.loads((tmp_path / "ckpt" / "step-00000007" / "lifeboat-commit.json").read_text())
    assert record["step"] == 7 and record["emergency"]["consistent"] is True
    assert record["emergency"]["fault"] == kind.split("-")[0] and record["emergency"]["step"] == 8
    (event,) = FileEvents(tmp_path / "events.jsonl").read(unique=True)
    assert event["event"] == "lifeboat.training.fault"
    payload = event["payload"]
    assert (payload["kind"], payload["step"], payload["exit_code"]) == (kind.split("-")[0], 8, code)
    assert (payload["emergency_checkpoint"], payload["last_committed"], payload["ranks"]) == (7, 5, [0, 1])
    store = LocalStore(tmp_path / "ckpt")
    assert certify_replica(store, store, layout="dcp").certified.step == 7

    _resume_matches(tmp_path, expected, 7)


def test_an_nccl_error_on_one_rank_alone_ends_the_job_without_a_checkpoint(tmp_path):
    """Rank 1's communicator fails; rank 0 waits in the all-reduce for it (a hang, to rank 0):
    no two ranks hold one step, so nothing is written, and the job still ends at once."""
    env = _env(tmp_path, LIFEBOAT_INJECT="nccl-error@8:1", LIFEBOAT_HANG_FLOOR_S=str(FLOOR_S))
    run = _train(tmp_path, "faulted", env=env)

    assert run.returncode == 80, run.stderr[-3000:]
    by_kind = {e["payload"]["kind"]: e["payload"] for e in FileEvents(tmp_path / "events.jsonl").read()}
    assert set(by_kind) == {"nccl", "hang"}
    assert (by_kind["nccl"]["rank"], by_kind["nccl"]["emergency_checkpoint"]) == (1, None)
    assert "a rank did not answer" in by_kind["nccl"]["checkpoint_note"]
    assert by_kind["hang"]["reported_by"] == 0 and by_kind["hang"]["emergency_checkpoint"] is None
    assert TORCH.newest_committed(tmp_path / "ckpt").name == "step-00000005"
    assert not (tmp_path / "ckpt" / "step-00000007").exists()


def test_a_sigstopped_rank_is_stopped_by_the_watchdog_within_its_bound(expected, tmp_path):
    """The seed's "suspend the network interface" drill: rank 1 stops answering, raising
    nothing; rank 0 waits in DDP's all-reduce. The watchdog stops the job, names rank 1."""
    env = _env(tmp_path, LIFEBOAT_HANG_FLOOR_S=str(FLOOR_S))
    log = tmp_path / "hung.jsonl"
    argv = TORCH.argv(steps=40, every=EVERY, ckpt_dir=tmp_path / "ckpt", loss_log=log, step_seconds=0.2)
    job = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while max(parse_losses(log.read_text() if log.exists() else ""), default=0) < 7:
            assert job.poll() is None and time.monotonic() < deadline, "the job never reached step 7"
            time.sleep(0.05)
        pid = rank_pid(str(tmp_path / "ckpt"), 1)
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        out, err = job.communicate(timeout=60)
        ended_after = time.monotonic() - stopped_at
    finally:
        if job.poll() is None:
            job.kill()

    assert job.returncode == 83, err[-3000:]
    (event,) = FileEvents(tmp_path / "events.jsonl").read(unique=True)
    payload = event["payload"]
    assert (payload["kind"], payload["rank"], payload["reported_by"]) == ("hang", 1, 0)
    assert payload["emergency_checkpoint"] is None and payload["last_committed"] == 5
    assert payload["bound"] == FLOOR_S and FLOOR_S < payload["elapsed"] <= FLOOR_S + 0.5
    assert f"rank 1 (pid {pid}) is stopped" in payload["detail"]
    assert "in train_step" in err and "Thread 0x" in err, "rank 0's stacks, every thread"
    # stopped within the bound: the step that hangs starts at most one sleep after the stop
    assert ended_after <= 0.2 + FLOOR_S + 0.5 + 5.0, ended_after  # + torchrun noticing the exit
    assert rank_pid(str(tmp_path / "ckpt"), 1) is None and rank_pid(str(tmp_path / "ckpt"), 0) is None
    newest = TORCH.newest_committed(tmp_path / "ckpt")
    assert newest.name == "step-00000005"

    _resume_matches(tmp_path, expected, 5)
