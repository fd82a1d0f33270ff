"""`make demo` end to end: its own Prefect server, a killed trainer, detection, failover."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from lifeboat_dr.demo import training as demo
from lifeboat_dr.standins.trainer import jobs

TORCH_MISSING = jobs.TRAINERS["torch"].missing()


def _play(monkeypatch, *args: str) -> int:
    monkeypatch.chdir(demo.ROOT)  # the demo works from the repository root; restore cwd after
    monkeypatch.setenv("LIFEBOAT_STATE_DIR", os.environ.get("LIFEBOAT_STATE_DIR", ""))
    monkeypatch.setenv("LIFEBOAT_LEDGER", str(demo.ROOT / ".lifeboat" / "demo" / "ledger.jsonl"))
    return demo.main(list(args))


def _assert_passed(out: str, seed: int) -> None:
    assert "2. SIGKILL at step " in out and f"(seed {seed})" in out
    assert "confirmed: 2 of 2 signal(s) agree" in out
    assert ": met" in out and "MISSED" not in out
    assert "losses identical to an uninterrupted run" in out
    assert "demo passed" in out
    assert not list((demo.ROOT / "runbooks/.lifeboat/clusters").glob("*/state.json")), (
        "the demo leaked a cluster"
    )


@pytest.mark.integration
def test_demo_kills_fails_over_and_proves_identical_losses(monkeypatch, capsys):
    assert _play(monkeypatch, "--seed", "7") == 0
    _assert_passed(capsys.readouterr().out, 7)


@pytest.mark.integration
@pytest.mark.skipif(TORCH_MISSING is not None, reason=TORCH_MISSING or "")
def test_torch_demo_resumes_dcp_checkpoints_under_torchrun_bit_for_bit():
    # As `make demo DEMO_ARGS=--trainer torch` runs it: a process of its own (Prefect's
    # logging and settings are per process), which must leave no process behind.
    env = {**os.environ, "PYTHONPATH": str(demo.ROOT), "LIFEBOAT_STATE_DIR": ""}
    env["LIFEBOAT_LEDGER"] = str(demo.ROOT / ".lifeboat" / "demo" / "ledger.jsonl")
    done = subprocess.run(
        [sys.executable, "-m", "lifeboat_dr.demo.training", "--trainer", "torch", "--seed", "3"],
        cwd=demo.ROOT, env=env, capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    _assert_passed(done.stdout, 3)
    assert "PyTorch, 2 ranks under torchrun, DCP" in done.stdout
    secondary = demo.ROOT / ".lifeboat" / "demo" / "secondary"
    newest = max(secondary.glob("step-*/.metadata")).parent  # the resumed job's own saves
    # one .distcp per rank, DCP's .metadata, then the guarded commit's marker (LocalStore keeps
    # the marker's CRC32C in its sidecar): the resumed job committed each save under the fence
    assert sorted(p.name for p in newest.iterdir()) == [
        ".lifeboat-commit.json.crc32c",
        ".metadata",
        "__0_0.distcp",
        "__1_0.distcp",
        "lifeboat-commit.json",
    ]
    marker = newest / "lifeboat-commit.json"
    assert marker.stat().st_mtime_ns >= (newest / ".metadata").stat().st_mtime_ns
    committed = json.loads(marker.read_text())
    assert committed["step"] == int(newest.name.removeprefix("step-"))
    assert committed["epoch"] >= 1, committed  # under the failover's epoch, not the primary's 0
    ps = subprocess.run(["ps", "-eo", "stat=,args="], capture_output=True, text=True).stdout
    left = [line for line in ps.splitlines() if str(demo.ROOT / ".lifeboat" / "demo") in line]
    assert not [line for line in left if not line.lstrip().startswith("Z")], left


def test_demo_with_a_trainer_whose_framework_is_missing_says_how_to_install_it(monkeypatch, capsys):
    absent = dataclasses.replace(jobs.TRAINERS["torch"], needs="lifeboat_no_such_framework")
    monkeypatch.setitem(jobs.TRAINERS, "torch", absent)
    assert demo.main(["--trainer", "torch"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("make demo: the torch trainer needs lifeboat_no_such_framework: pip install -e '.[torch]'")
