"""The rendered runbook's by-hand fence, certify and parity, followed with the primary down
and Lifeboat's automation with it (issue #29): each command is run by the real CLI it names
(`aws` against moto on loopback, SkyPilot's own argument parser, Python), and none of them
reads the primary's dead store.

`aws` is pip's awscli, in the test extras."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from lifeboat_dr.kernel.crc32c import crc32c, to_b64
from lifeboat_dr.runbooks.loader import load_runbook
from tests.peers import needs
from tests.s3_objects import put_composite_multipart

ROOT = Path(__file__).resolve().parents[2]
AWS = Path(sys.executable).parent / "aws"
needs_aws = needs(None if AWS.exists() else f"no {AWS}: pip install -e '.[test]' installs awscli")
S3_RUNBOOK = "mistral-7b-sft"  # both sites on S3, its loss log in the primary store


def _markdown(name: str) -> str:
    return (ROOT / "runbooks" / f"{name}.md").read_text()


def _inline(text: str, starts: str) -> list[str]:
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return [c for c in re.findall(r"`([^`]+)`", prose) if c.startswith(starts)]


def _section(text: str, title: str) -> str:
    return text.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def _aws(argv: list[str], endpoint: str, cwd: Path) -> subprocess.CompletedProcess:
    assert argv[0] == "aws"
    env = {**os.environ, "AWS_ENDPOINT_URL": endpoint}
    return subprocess.run([str(AWS), *argv[1:]], cwd=cwd, env=env, capture_output=True, text=True)


def _bucket(endpoint: str, name: str):
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
        s3.create_bucket(Bucket=name)
    return s3


def test_no_hand_command_names_the_primarys_store_but_the_comparison_while_it_answers():
    rb = load_runbook(ROOT / "runbooks" / f"{S3_RUNBOOK}.yaml")
    text = _markdown(S3_RUNBOOK)
    primary_bucket = rb.primary.store.split("/")[2]
    for title in ("2. Certify", "3. Fence", "8. Verify"):
        commands = _inline(_section(text, title), ("aws ", "gsutil ", "sky ", "python ", "cp "))
        on_primary = [c for c in commands if primary_bucket in c]
        # the one command on the primary: its checksum, "if it answers"
        assert len(on_primary) == (1 if title == "2. Certify" else 0), on_primary
    assert "if it answers" in _section(text, "2. Certify")


def test_the_hand_certify_says_which_checksums_compare_across_s3_and_gcs():
    text = _section(_markdown("llama-70b-pretrain"), "2. Certify")  # primary S3, secondary GCS
    assert "`FULL_OBJECT`" in text and "`COMPOSITE`" in text and "`Hash (crc32c)`" in text
    assert "neither ETags nor MD5 compare across S3 and GCS" in text


@needs_aws
@pytest.mark.processes
def test_the_s3_checksum_command_prints_a_full_object_crc32c_and_says_composite(s3_endpoint, tmp_path):
    rb = load_runbook(ROOT / "runbooks" / f"{S3_RUNBOOK}.yaml")
    bucket, _, prefix = rb.secondary.store.split("://", 1)[1].partition("/")
    s3 = _bucket(s3_endpoint, bucket)
    data = b"lifeboat" * 1000
    s3.put_object(
        Bucket=bucket,
        Key=f"{prefix}/step-100/shard-0",
        Body=data,
        ChecksumAlgorithm="CRC32C",
        ChecksumCRC32C=to_b64(crc32c(data)),
    )
    put_composite_multipart(s3_endpoint, bucket, f"{prefix}/step-100/shard-1", data)
    (head,) = [c for c in _inline(_section(_markdown(S3_RUNBOOK), "2. Certify"), "aws s3api") if bucket in c]

    full = _aws(shlex.split(head.replace("CHECKPOINT/SHARD", "step-100/shard-0")), s3_endpoint, tmp_path)
    composite = _aws(shlex.split(head.replace("CHECKPOINT/SHARD", "step-100/shard-1")), s3_endpoint, tmp_path)

    assert full.returncode == 0, full.stderr
    size, full_value, kind = json.loads(full.stdout)
    assert (size, full_value) == (8000, base64.b64encode(crc32c(data).to_bytes(4, "big")).decode())
    assert kind in ("FULL_OBJECT", None)  # S3 says FULL_OBJECT; moto 5.2.5 sends no type for one PUT
    size, value, kind = json.loads(composite.stdout)
    assert (size, kind) == (8000, "COMPOSITE")
    assert value.split("-")[0] != full_value  # of the parts' checksums: equal to no full-object one


@needs_aws
@pytest.mark.processes
def test_the_hand_parity_reads_the_secondarys_copy_and_never_passes_a_nan(s3_endpoint, tmp_path):
    rb = load_runbook(ROOT / "runbooks" / f"{S3_RUNBOOK}.yaml")
    text = _section(_markdown(S3_RUNBOOK), "8. Verify")
    (fetch,) = _inline(text, "aws s3 cp")
    (parity,) = _inline(text, "python -c")
    bucket, _, key = shlex.split(fetch)[3].removeprefix("s3://").partition("/")
    assert bucket == rb.secondary.store.split("/")[2]  # the copy replication made, not the dead primary's
    s3 = _bucket(s3_endpoint, bucket)
    n = rb.verify.parity_steps

    def run(pre: list[float], resumed: list[float]) -> subprocess.CompletedProcess:
        lines = [json.dumps({"step": 100 + i, "loss": x}) for i, x in enumerate(pre)]
        s3.put_object(Bucket=bucket, Key=key, Body="\n".join(lines).encode())
        assert _aws(shlex.split(fetch), s3_endpoint, tmp_path).returncode == 0
        (tmp_path / "resumed.jsonl").write_text(
            "\n".join(json.dumps({"step": 100 + i, "loss": x}) for i, x in enumerate(resumed))
        )
        argv = shlex.split(parity)
        return subprocess.run([sys.executable, *argv[1:]], cwd=tmp_path, capture_output=True, text=True)

    same = [2.0 + i / 100 for i in range(n)]
    assert run(same, same).returncode == 0
    nan_last = [*same[:-1], float("nan")]
    failed = run(nan_last, [x * 99 for x in same])
    assert failed.returncode == 1 and "not finite or over tolerance" in failed.stdout
    assert run(same[:1], same).returncode == 1  # 1 of n steps compared is not a pass


def test_the_hand_fence_stops_the_primary_with_a_command_skypilot_parses():
    from lifeboat_dr.providers.compute.skypilot import SkyPilotCompute

    SkyPilotCompute(offline=True)  # SkyPilot imported with the offline catalogs, as the other tests do
    from sky.client.cli import command

    text = _section(_markdown(S3_RUNBOOK), "3. Fence")
    (down,) = _inline(text, "sky down")
    argv = shlex.split(down)
    ctx = command.down.make_context("down", argv[2:])
    assert ctx.params["clusters"] == ("PRIMARY_CLUSTER",) and ctx.params["yes"]
    assert "replace `PRIMARY_CLUSTER`" in text  # the runbook names no primary.cluster


def test_the_hand_fence_fences_in_the_stores_with_the_primarys_endpoint_dead(
    s3_endpoint, tmp_path, monkeypatch, capsys
):
    """Step 2 of the fence, pasted: the runbook's own file, its secondary bucket on moto and
    the primary's R2 endpoint a port nothing listens on; the CLI is Lifeboat's own parser."""
    import yaml

    from lifeboat_dr.core.commit import commit_checkpoint
    from lifeboat_dr.core.fencing import COMMIT_MARKER, peek_lease
    from lifeboat_dr.providers.storage.local import LocalStore
    from lifeboat_dr.providers.storage.s3 import S3Store
    from lifeboat_dr.shell.cli import main
    from lifeboat_dr.testing.emulators import dead_port

    text = _section(_markdown(S3_RUNBOOK), "3. Fence")
    (pasted,) = _inline(text, "lifeboat fence")
    assert "`YOUR_NAME` and `REASON`" in text  # said to be replaced
    argv = shlex.split(pasted.replace("YOUR_NAME", "alice").replace("REASON", "ord1 is dark"))
    assert argv[:2] == ["lifeboat", "fence"] and argv[3:] == ["--by", "alice", "--reason", "ord1 is dark"]
    doc = yaml.safe_load((ROOT / argv[2]).read_text())
    doc["primary"]["endpoint_url"] = dead_port()
    doc["secondary"]["endpoint_url"] = s3_endpoint
    (tmp_path / argv[2]).parent.mkdir(parents=True)
    (tmp_path / argv[2]).write_text(yaml.safe_dump(doc))
    (tmp_path / "runbooks" / "jobs").mkdir()
    task = ROOT / "runbooks" / doc["job"]["task"]
    (tmp_path / "runbooks" / doc["job"]["task"]).write_text(task.read_text())
    bucket, _, prefix = doc["secondary"]["store"].removeprefix("s3://").partition("/")
    _bucket(s3_endpoint, bucket)
    secondary = S3Store(bucket, prefix, endpoint_url=s3_endpoint)
    primary_side = LocalStore(tmp_path / "primary-side")  # what replication brought over: one commit
    commit_checkpoint(primary_side, "checkpoint-100", 100, 0)
    marker = f"checkpoint-100/{COMMIT_MARKER}"
    secondary.put(marker, b"".join(primary_side.read(marker)))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LIFEBOAT_LEDGER", str(tmp_path / "ledger.jsonl"))
    monkeypatch.setenv("LIFEBOAT_STORE_DEADLINE", "3")

    assert main(argv[1:]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "fenced mistral-7b-sft: epoch 0 -> 1, secondary active" in out, out
    assert "sealed epoch 0 (primary@0) at commit 1" in out and "LIFEBOAT_EPOCH=1" in out, out
    lease = peek_lease(secondary)
    assert (lease.epoch, lease.holder, lease.seal(0).commits) == (1, "manual:alice", 1)

    assert main(argv[1:]) == 0  # pasted twice: one epoch
    assert "already fenced at epoch 1" in capsys.readouterr().out
    assert peek_lease(secondary) == lease
