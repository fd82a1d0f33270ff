"""`lifeboat certify` and `lifeboat manifest write` as an on-call and a training job use them."""

import json
from datetime import UTC, datetime

import pytest

from lifeboat_dr.core.checkpoints.manifest import MANIFEST_NAME, Manifest
from lifeboat_dr.providers.storage.local import LocalStore
from lifeboat_dr.shell.cli import main
from lifeboat_dr.standins.checkpoints import replicate, write_checkpoint
from tests.runbook_yaml import two_site_runbook

WRITTEN = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


@pytest.fixture
def runbook(tmp_path):
    primary, secondary = LocalStore(tmp_path / "primary"), LocalStore(tmp_path / "secondary")
    for step in (100, 200):
        replicate(primary, secondary, write_checkpoint(primary, "manifest", step, created=WRITTEN))
    path = tmp_path / "runbook.yaml"
    path.write_text(
        two_site_runbook(
            "cli-test",
            primary=f"file://{primary.root}",
            secondary=f"file://{secondary.root}",
            checkpoint={"layout": "manifest"},
            targets={"rpo": "30m"},
        )
    )
    return path


def test_certify_within_the_rpo_target_exits_0_with_a_table(runbook, capsys):
    assert main(["certify", str(runbook), "--at", "2026-11-30T08:20:00Z"]) == 0
    out = capsys.readouterr().out
    assert "CERTIFIED step 200" in out and "RPO       20m (target 30m): within target" in out


def test_certify_over_the_rpo_target_exits_1(runbook, capsys):
    assert main(["certify", str(runbook), "--at", "2026-11-30T09:00:00Z"]) == 1
    assert "TARGET EXCEEDED" in capsys.readouterr().out


def test_certify_with_nothing_certifiable_exits_2_and_json_says_why(runbook, capsys):
    secondary = LocalStore(runbook.parent / "secondary")
    for step in ("0000100", "0000200"):
        secondary.delete(f"step_{step}/shard-000000.bin")
    assert main(["certify", str(runbook), "--json", "--at", "2026-11-30T08:20:00Z"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["certified"] is None and doc["exit"] == 2
    assert [r["reason"] for r in doc["rejected"]] == ["missing shard", "missing shard"]


def test_certify_json_is_machine_readable(runbook, capsys):
    assert main(["certify", str(runbook), "--json", "--at", "2026-11-30T08:20:00Z", "--deep"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["certified"]["step"] == 200 and doc["rpo"] == 1200.0 and doc["rpo_target"] == 1800.0
    assert doc["mode"] == "deep" and doc["object_bytes_read"] > 0


def test_certify_rejects_a_bad_time(runbook, capsys):
    assert main(["certify", str(runbook), "--at", "yesterday"]) == 1
    assert "not an ISO 8601 time" in capsys.readouterr().err


def test_manifest_write_commits_a_local_checkpoint_last(tmp_path, capsys):
    ckpt = tmp_path / "step_300"
    ckpt.mkdir()
    (ckpt / "model.bin").write_bytes(b"w" * 1000)
    (ckpt / "optim.bin").write_bytes(b"o" * 10)
    assert main(["manifest", "write", str(ckpt)]) == 0
    assert "step 300, 2 shards, 1010 bytes" in capsys.readouterr().out
    manifest = Manifest.from_json((ckpt / MANIFEST_NAME).read_bytes())
    assert [(s.path, s.size) for s in manifest.shards] == [("model.bin", 1000), ("optim.bin", 10)]
    assert main(["manifest", "write", str(ckpt), "--step", "300"]) == 1  # committed once only
    assert "already committed" in capsys.readouterr().err


def test_certify_with_the_outage_confirmed_certifies_on_the_manifests_alone(runbook, capsys):
    assert main(["certify", str(runbook), "--primary-down", "--json", "--at", "2026-11-30T08:20:00Z"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["certified"]["step"] == 200 and doc["mode"] == "manifest-only-source-down"
    assert doc["source_error"] == "not asked: the outage is confirmed (--primary-down)"
    assert doc["calls"].get("source.list", 0) == 0
