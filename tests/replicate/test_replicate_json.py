"""`lifeboat replicate --json`: one JSON document on stdout (what was copied, skipped, refused,
failed, the lag, what retention did), the progress lines on stderr, the exit code as before."""

from __future__ import annotations

import json

from lifeboat_dr.shell.cli import main
from tests.replicate.test_replicate import prefix, write_run


def replicate(capsys, *argv) -> tuple[int, dict, str]:
    code = main(["replicate", *map(str, argv), "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def test_the_result_is_json_on_stdout_and_the_progress_goes_to_stderr(
    runbook_file, primary, secondary, write_checkpoint, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    write_run(primary, write_checkpoint)

    code, doc, err = replicate(capsys, runbook_file)

    assert code == doc["exit"] == 0
    assert (doc["runbook"], doc["source"], doc["destination"]) == ("trainer", primary.uri, secondary.uri)
    assert doc["site_state"].startswith("primary is active (epoch 0")
    # newest first; keep_last 2 and every 100th step: 50 is never copied
    assert [c["checkpoint"] for c in doc["checkpoints"]] == [
        f"{secondary.uri}/{prefix(s)}" for s in (200, 150, 100)
    ]
    assert all(
        c["copied"] == 5 and c["skipped"] == 0 and c["bytes_copied"] > 12000 for c in doc["checkpoints"]
    )
    assert (doc["copied"], doc["skipped"], doc["refused"], doc["failed"]) == (15, 0, [], {})
    assert [(lag["step"], lag["complete"], lag["exceeded"]) for lag in doc["lag"]] == [
        (200, True, False),
        (150, True, False),
        (100, True, False),
    ]
    assert [k["prefix"] for k in doc["retention"]["kept"]] == [prefix(s) for s in (200, 150, 100)]
    assert doc["retention"]["deleted"] == []
    assert f"{secondary.uri}/{prefix(200)}: copied 5 object(s)" in err and "lag " in err

    code, doc, err = replicate(capsys, runbook_file)

    assert code == 0 and doc["copied"] == 0 and doc["skipped"] == 15
    assert "up to date (5 objects)" in err


def test_a_dry_run_says_what_it_would_copy_and_delete(
    runbook_file, primary, secondary, write_checkpoint, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    write_run(primary, write_checkpoint, steps=(200,))
    write_run(secondary, write_checkpoint, steps=(50, 150, 160))

    code, doc, _ = replicate(capsys, runbook_file, "--dry-run")

    assert code == 0 and doc["dry_run"] is True
    ((planned,),) = [[c["planned"] for c in doc["checkpoints"]]]
    assert planned == 5 and doc["copied"] == 0
    assert [d["prefix"] for d in doc["retention"]["deleted"]] == [prefix(50)]


def test_a_failed_checkpoint_is_in_the_document_and_exits_1(
    runbook_file, primary, secondary, write_checkpoint, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    write_run(primary, write_checkpoint, steps=(100,))
    (primary.root / prefix(100) / "shard-001.bin").write_bytes(b"truncated")  # list size != manifest

    code, doc, err = replicate(capsys, runbook_file)

    assert code == doc["exit"] == 1
    assert list(doc["failed"]) == [prefix(100)] and f"FAILED {prefix(100)}" in err
    assert [(lag["step"], lag["complete"]) for lag in doc["lag"]] == [(100, False)]
