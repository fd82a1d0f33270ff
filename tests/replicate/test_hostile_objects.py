"""Odd and hostile objects never cross a checkpoint's bounds: a key with `..`, an empty or
`.` segment in an S3 primary, and a symlink leaving a local store, are refused one line per
object by `lifeboat replicate`; every other checkpoint still copies, and `lifeboat certify`
still certifies the newest whole one."""

from __future__ import annotations

import json
import os

import pytest

from lifeboat_dr.providers.storage.local import LocalStore
from lifeboat_dr.shell.cli import main
from tests.runbook_yaml import two_site_runbook


def _runbook(tmp_path, primary_uri: str, secondary: LocalStore, endpoint: str | None = None) -> str:
    path = tmp_path / "hostile.yaml"
    primary = {"store": primary_uri, **({"endpoint_url": endpoint} if endpoint else {})}
    path.write_text(
        two_site_runbook(
            "hostile",
            primary=primary,
            secondary=f"file://{secondary.root}",
            checkpoint={"layout": "manifest", "retention": {"keep_last": 3}},
        )
    )
    return str(path)


def _certified(runbook: str, capsys) -> dict:
    capsys.readouterr()
    assert main(["certify", runbook, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _body(store, key: str) -> bytes:
    return b"".join(store.read(key))


@pytest.mark.integration
@pytest.mark.parametrize(
    "hostile",
    [
        "step-000020/../step-000010/shard-000.bin",  # lands on step 10's shard on a file:// store
        "step-000020/../../outside.bin",  # out of the standby's root
        "step-000020//shard-000.bin",  # the same file as step 20's own shard-000.bin
    ],
)
def test_a_hostile_key_in_an_s3_primary_is_refused_and_every_other_checkpoint_copies_and_certifies(
    hostile, make_store, write_checkpoint, tmp_path, monkeypatch, capsys
):
    import boto3

    monkeypatch.chdir(tmp_path)
    primary = make_store("s3")
    write_checkpoint(primary, "step-000010", 10)
    write_checkpoint(primary, "step-000020", 20)
    s3 = boto3.client("s3", endpoint_url=primary.endpoint_url, region_name="us-east-1")
    s3.put_object(
        Bucket=primary.bucket, Key=f"{primary.prefix}/{hostile}", Body=b"EVIL" * 750
    )  # behind Lifeboat
    secondary = LocalStore(tmp_path / "standby")
    runbook = _runbook(tmp_path, primary.uri, secondary, primary.endpoint_url)

    assert main(["replicate", runbook, "--no-progress"]) == 1
    err = capsys.readouterr().err
    refused = [line for line in err.splitlines() if line.startswith("REFUSED")]
    assert len(refused) == 1 and hostile in refused[0], err
    assert "FAILED step-000020" in err
    assert _body(secondary, "step-000010/shard-000.bin") == _body(primary, "step-000010/shard-000.bin")
    assert not (tmp_path / "outside.bin").exists()
    assert _body(secondary, "step-000020/shard-000.bin") == _body(primary, "step-000020/shard-000.bin")

    doc = _certified(runbook, capsys)
    assert doc["certified"]["step"] == 10  # step 20 holds an object no replica may hold: not whole


def test_a_symlink_leaving_a_local_primary_is_refused_and_the_other_checkpoints_copy_and_certify(
    primary, secondary, write_checkpoint, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    secret = tmp_path / "secret.key"
    secret.write_bytes(b"private key material")
    write_checkpoint(primary, "step-000010", 10)
    write_checkpoint(primary, "step-000020", 20)
    os.symlink(secret, primary.root / "step-000020" / "tokenizer.bin")  # a trainer's stray link
    runbook = _runbook(tmp_path, primary.uri, secondary)

    assert main(["replicate", runbook, "--no-progress"]) == 1
    err = capsys.readouterr().err
    refused = [line for line in err.splitlines() if line.startswith("REFUSED")]
    assert len(refused) == 1 and "step-000020/tokenizer.bin" in refused[0] and "symlink" in refused[0], err
    assert not any(b"private key" in _body(secondary, i.key) for i in secondary.list())
    assert {i.key.split("/")[0] for i in secondary.list()} >= {"step-000010"}

    doc = _certified(runbook, capsys)
    assert doc["certified"]["step"] == 10
    assert doc["rejected"][0]["step"] == 20


def test_a_symlink_in_the_newest_replica_rejects_it_and_certification_falls_back(
    primary, secondary, write_checkpoint, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    for step in (10, 20):
        write_checkpoint(primary, f"step-{step:06d}", step)
    runbook = _runbook(tmp_path, primary.uri, secondary)
    assert main(["replicate", runbook, "--no-progress"]) == 0
    # someone "deduplicates" the standby: the shard now points at a file outside the store
    outside = tmp_path / "elsewhere.bin"
    outside.write_bytes(_body(secondary, "step-000020/shard-001.bin"))
    shard = secondary.root / "step-000020" / "shard-001.bin"
    shard.unlink()
    os.symlink(outside, shard)

    doc = _certified(runbook, capsys)
    assert doc["certified"]["step"] == 10
    rejected = doc["rejected"][0]
    assert rejected["step"] == 20 and "step-000020/shard-001.bin" in rejected["detail"]
    assert "symlink leaving the store" in rejected["detail"]


def test_a_standby_shard_linked_to_another_step_is_replaced_never_written_through(
    primary, secondary, write_checkpoint, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    for step in (10, 20):
        write_checkpoint(primary, f"step-{step:06d}", step)
    runbook = _runbook(tmp_path, primary.uri, secondary)
    assert main(["replicate", runbook, "--no-progress"]) == 0
    step10 = _body(secondary, "step-000010/shard-000.bin")
    link = secondary.root / "step-000020" / "shard-000.bin"
    link.unlink()
    os.symlink("../step-000010/shard-000.bin", link)

    assert main(["replicate", runbook, "--no-progress", "--recheck"]) == 0
    assert _body(secondary, "step-000010/shard-000.bin") == step10
    assert not link.is_symlink()
    doc = _certified(runbook, capsys)
    assert doc["certified"]["step"] == 20


@pytest.mark.integration
def test_a_hostile_key_in_an_s3_standby_is_skipped_by_retention_which_trims_the_rest(
    primary, make_store, write_checkpoint, tmp_path, monkeypatch, capsys
):
    """Retention deletes old replicas object by object; one whose key no store may name (it
    was put there behind Lifeboat) is left with one line, and the rest are still trimmed."""
    import boto3

    monkeypatch.chdir(tmp_path)
    standby = make_store("s3")
    for step in (10, 20, 30):
        write_checkpoint(primary, f"step-{step:06d}", step)
    for step in (10, 20):  # replicated by earlier runs
        write_checkpoint(standby, f"step-{step:06d}", step)
    s3 = boto3.client("s3", endpoint_url=standby.endpoint_url, region_name="us-east-1")
    stray = "step-000020//shard-000.bin"  # an empty segment: no store may delete it by that name
    s3.put_object(Bucket=standby.bucket, Key=f"{standby.prefix}/{stray}", Body=b"stray")
    path = tmp_path / "hostile.yaml"
    path.write_text(
        two_site_runbook(
            "hostile",
            primary=primary.uri,
            secondary={"store": standby.uri, "endpoint_url": standby.endpoint_url},
            checkpoint={"layout": "manifest", "retention": {"keep_last": 1}},
        )
    )

    code = main(["replicate", str(path), "--no-progress"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    refused = [line for line in err.splitlines() if line.startswith("REFUSED")]
    assert len(refused) == 1 and stray in refused[0] and "\n" not in refused[0], out + err
    assert "deleted step-000010" in out and "deleted step-000020" in out
    left = {i.key for i in standby.list() if i.key.startswith("step-")}
    assert {k.split("/")[0] for k in left} == {"step-000020", "step-000030"}
    assert [k for k in left if not k.startswith("step-000030/")] == [stray]
