"""Site state across both stores, the trainer's guarded commits, and commit_or_exit."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lifeboat_dr.core.commit import FENCED_EXIT, commit_or_exit
from lifeboat_dr.core.fencing import fence, fence_job, read_lease
from lifeboat_dr.core.sitestate import read_site_state
from lifeboat_dr.kernel.errors import ProviderUnavailable, SiteStateUnknown, StopFailover
from lifeboat_dr.providers.storage.local import LocalStore


class Down:
    def __init__(self, uri="file:///down"):
        self.uri, self.capabilities = uri, LocalStore("/tmp").capabilities

    def head(self, key):
        raise ProviderUnavailable(f"{self.uri}: connection refused")

    def read(self, key, start=0, end=None):
        raise ProviderUnavailable(f"{self.uri}: connection refused")


def test_site_state_answers_with_the_primary_down_and_the_newest_epoch_wins(tmp_path):
    primary, secondary = LocalStore(tmp_path / "p"), LocalStore(tmp_path / "s")
    assert read_site_state({"primary": primary, "secondary": secondary}).lineage == "primary@0"
    fence_job(secondary, Down(), run_id="failover-1", holder="dr")  # the primary missed it
    both = read_site_state({"primary": primary, "secondary": secondary})
    assert (both.lineage, both.stale) == ("secondary@1", ("primary",))
    assert read_site_state({"primary": Down(), "secondary": secondary}).lineage == "secondary@1"
    # without the secondary's store the view is unknown: the primary's may have missed the fence
    with pytest.raises(SiteStateUnknown, match="cannot be opened"):
        read_site_state({"primary": primary, "secondary": None})
    with pytest.raises(SiteStateUnknown, match="file:///down.*file:///also-down.*did not answer"):
        read_site_state({"primary": Down(), "secondary": Down("file:///also-down")})


def test_failback_makes_the_primary_active_again_on_both_stores(tmp_path):
    primary, secondary = LocalStore(tmp_path / "p"), LocalStore(tmp_path / "s")
    fence_job(secondary, primary, run_id="failover-1", holder="dr")
    lease, other = fence_job(
        primary, secondary, run_id="failback-1", holder="home", active="primary", expect_epoch=1
    )
    assert (lease.epoch, lease.active, other.epoch) == (2, "primary", 2)
    assert [s.active for s in lease.history] == ["primary", "secondary"]
    again = fence_job(
        primary, secondary, run_id="failback-1", holder="home", active="primary", expect_epoch=1
    )
    assert again[0] == lease  # a retried failback does not bump twice


@pytest.mark.parametrize(
    "body, why",
    [
        (b"\x00\xffnot json", "JSONDecodeError"),
        (b'{"epoch": 1}', "KeyError"),
        (b'{"epoch": "one", "holder": "x", "acquired_at": "2026-01-01T00:00:00+00:00"}', "ValueError"),
        (
            b'{"epoch": 3, "holder": "x", "acquired_at": "2026-01-01T00:00:00+00:00", "active": "moon"}',
            "moon",
        ),
    ],
)
def test_a_garbage_site_state_stops_whoever_reads_it_in_one_line_naming_it(tmp_path, body, why):
    primary, secondary = LocalStore(tmp_path / "p"), LocalStore(tmp_path / "s")
    fence_job(secondary, primary, run_id="failover-1", holder="dr")
    secondary.put("_lifeboat/lease.json", body)

    with pytest.raises(StopFailover) as e:
        read_site_state({"primary": primary, "secondary": secondary})
    line = str(e.value)
    assert "\n" not in line and why in line, line
    assert line.startswith(f"{secondary.uri.rstrip('/')}/_lifeboat/lease.json is not a readable site state")


def _train(ckpt, *, epoch: int | None, steps: int = 10):
    env = {**os.environ, "LIFEBOAT_STORE": f"file://{ckpt}"}
    env.pop("LIFEBOAT_EPOCH", None)
    if epoch is not None:
        env["LIFEBOAT_EPOCH"] = str(epoch)
    cmd = [sys.executable, "-m", "lifeboat_dr.standins.trainer", "--steps", str(steps), "--every", "5"]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.processes
def test_the_trainer_commits_every_checkpoint_and_a_fenced_trainer_exits_in_one_line(tmp_path):
    ckpt = tmp_path / "primary"
    assert _train(ckpt, epoch=None).returncode == 0
    store = LocalStore(ckpt)
    assert read_lease(store)[0].commits == 2  # step 5 and step 10, each counted in the lease
    fence(store, run_id="failover-1", holder="dr")
    run = _train(ckpt, epoch=0, steps=20)  # the zombie: still epoch 0
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert run.returncode == FENCED_EXIT and len(lines) == 1 and "fenced out" in lines[0], run.stderr
    assert not (ckpt / "step-00000015" / "lifeboat-manifest.json").exists()
    assert not (ckpt / "step-00000015" / "lifeboat-commit.json").exists()
    assert (tmp_path / "primary-loss.jsonl").exists()  # the default loss log sits beside the store
    assert _train(ckpt, epoch=1, steps=20).returncode == 0  # the new lease holder may


def test_commit_or_exit_exits_with_one_line_when_fenced(tmp_path, capsys):
    store = LocalStore(tmp_path)
    assert commit_or_exit("step-1", 1, store=store, epoch=0) == 1
    fence(store, run_id="failover-1", holder="dr")
    with pytest.raises(SystemExit) as exit_:
        commit_or_exit("step-2", 2, store=f"file://{tmp_path}", epoch=0)
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == FENCED_EXIT and len(err) == 1 and err[0].startswith("lifeboat: fenced out")
