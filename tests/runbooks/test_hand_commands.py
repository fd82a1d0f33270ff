"""The rendered runbooks' by-hand commands are ones an on-call can paste.

Each shipped runbook's Markdown is read back: the launch block runs in bash (from a copy of
the repository layout, with `sky` replaced by a printer), the `sky launch` it prints is
parsed by SkyPilot's own CLI (`sky.client.cli.command.launch`) and turned into a task by the
CLI's own override code, and the checksum commands are split like a shell would and checked
against the stores they name; the local one is run.
"""

from __future__ import annotations

import base64
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from lifeboat_dr.kernel.crc32c import crc32c
from lifeboat_dr.runbooks.loader import load_runbook

ROOT = Path(__file__).resolve().parents[2]
SKYPILOT_RUNBOOKS = ["llama-70b-pretrain", "mistral-7b-sft", "batch-embed"]  # chat-serving moves traffic


@pytest.fixture(scope="module", autouse=True)
def _offline_sky():
    from lifeboat_dr.providers.compute.skypilot import SkyPilotCompute

    SkyPilotCompute(offline=True)


def _markdown(name: str) -> str:
    return (ROOT / "runbooks" / f"{name}.md").read_text()


def _inline_commands(text: str, program: str) -> list[list[str]]:
    prose = re.sub(r"```.*?```", "", text, flags=re.S)  # fenced blocks are read apart
    return [shlex.split(c) for c in re.findall(r"`([^`]+)`", prose) if c.startswith(program + " ")]


def _run_launch_block(name: str, tmp_path: Path) -> tuple[list[str], Path]:
    (block,) = re.findall(r"```bash\n(.*?)```", _markdown(name), re.S)
    lines = block.splitlines()
    assert lines[-1].startswith("sky launch ")
    script = "\n".join([*lines[:-1], "printf '%s\\0' " + lines[-1]]) + "\n"
    (tmp_path / "runbooks" / "jobs").mkdir(parents=True)
    out = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, check=True)
    return out.stdout.decode().rstrip("\0").split("\0"), tmp_path


@pytest.mark.parametrize("name", SKYPILOT_RUNBOOKS)
def test_the_hand_launch_is_what_skypilots_cli_accepts_and_resumes_on_the_secondary(
    name, tmp_path, monkeypatch
):
    from sky.client.cli import command

    rb = load_runbook(ROOT / "runbooks" / f"{name}.yaml")
    argv, cwd = _run_launch_block(name, tmp_path)
    assert argv[:2] == ["sky", "launch"]
    ctx = command.launch.make_context("launch", argv[2:])
    p = ctx.params
    first = rb.secondary.candidates[0]
    assert (
        p["cluster"] == f"{name}-dr" and p["infra"] == first.infra and bool(p["use_spot"]) == first.use_spot
    )
    (entrypoint,) = p["entrypoint"]
    assert entrypoint.startswith("runbooks/jobs/")  # relative to the repository root
    checkpoint = f"{rb.secondary.store.rstrip('/')}/CHECKPOINT"
    assert dict(p["env"]) == {
        (rb.job.resume.env or "LIFEBOAT_CHECKPOINT"): checkpoint,
        "LIFEBOAT_EPOCH": "1",  # the fence's epoch: the job's guarded commits go through under it
        "LIFEBOAT_STORE": rb.secondary.store,
    }

    monkeypatch.chdir(cwd)
    cloud, region, zone = command._handle_infra_cloud_region_zone_options(p["infra"], None, None, None)
    task = command._make_task_or_dag_from_entrypoint_with_overrides(
        p["entrypoint"],
        cloud=cloud,
        region=region,
        zone=zone,
        gpus=p["gpus"],
        use_spot=p["use_spot"],
        env=list(p["env"]),
    )
    (res,) = list(task.resources)
    assert (res.cloud.canonical_name(), res.region) == tuple(first.infra.split("/"))
    primary_bucket = re.compile(re.escape("://" + rb.primary.store.split("/")[2]) + r"(/|$|')")
    for mount in task.storage_mounts.values():  # nothing left pointing at the failed site's bucket
        assert not primary_bucket.search(mount.source)
    assert not primary_bucket.search(str(task.envs))
    if rb.job.resume.arg:
        assert task.run.rstrip().endswith(rb.job.resume.arg.replace("{checkpoint}", '"$LIFEBOAT_CHECKPOINT"'))


@pytest.mark.parametrize("name", SKYPILOT_RUNBOOKS)
def test_checksum_commands_print_checksums_of_the_named_stores(name):
    rb = load_runbook(ROOT / "runbooks" / f"{name}.yaml")
    text = _markdown(name)
    aws = _inline_commands(text, "aws")
    gsutil = _inline_commands(text, "gsutil")
    checksums = [c for c in aws if c[1:3] == ["s3api", "head-object"]] + [c for c in gsutil if c[1] == "stat"]
    assert len(checksums) == 2  # the secondary's and the primary's
    for store in (rb.secondary.store, rb.primary.store):
        bucket, _, prefix = store.split("://", 1)[1].partition("/")
        (argv,) = [c for c in checksums if _names_bucket(c, bucket)]
        if argv[0] == "aws":
            opts = dict(zip(argv[3::2], argv[4::2], strict=False))
            assert opts["--checksum-mode"] == "ENABLED" and opts["--bucket"] == bucket
            assert opts["--key"] == f"{prefix}/CHECKPOINT/SHARD" and "ChecksumCRC32C" in opts["--query"]
        else:
            assert argv[1:] == ["stat", f"gs://{bucket}/{prefix}/CHECKPOINT/SHARD"]  # prints Hash (crc32c)
        checksums.remove(argv)
    assert not any(c[1:3] == ["s3", "ls"] and "CRC" in " ".join(c) for c in aws)


def _names_bucket(argv: list[str], bucket: str) -> bool:
    if argv[0] == "aws":
        return argv[argv.index("--bucket") + 1] == bucket
    return argv[2].startswith(f"gs://{bucket}/")


@pytest.mark.processes
def test_the_local_checksum_command_prints_the_crc32c_that_s3_and_gcs_show(tmp_path):
    text = _markdown("demo")
    checksums = [c for c in re.findall(r"`([^`]+)`", text) if c.startswith("python -c") and "crc32c" in c]
    secondary, primary, copied = checksums  # the third: of a shard copied here (`shard.bin`)
    assert shlex.split(copied)[-1] == "shard.bin"
    # paths from the repository root, where the on-call pastes them
    assert shlex.split(secondary)[-1] == ".lifeboat/demo/secondary/CHECKPOINT/SHARD"
    assert shlex.split(primary)[-1] == ".lifeboat/demo/primary/CHECKPOINT/SHARD"
    assert "`ls -lR .lifeboat/demo/secondary`" in text
    cmd = secondary
    shard = tmp_path / "shard.bin"
    shard.write_bytes(b"lifeboat" * 1000)
    argv = shlex.split(cmd)
    argv[-1] = str(shard)
    out = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, check=True)
    size, b64 = out.stdout.split()
    assert (
        int(size) == 8000 and b64 == base64.b64encode(crc32c(shard.read_bytes()).to_bytes(4, "big")).decode()
    )


def test_the_local_hand_run_resumes_from_the_certified_checkpoint(tmp_path):
    (block,) = re.findall(r"```bash\n(.*?)```", _markdown("demo"), re.S)
    ckpt_line, epoch_line, run_line = block.strip().splitlines()
    assert ckpt_line.startswith("CKPT=.lifeboat/demo/secondary/CHECKPOINT")
    assert epoch_line.startswith("EPOCH=1  # the epoch `lifeboat fence` printed")
    argv = shlex.split(run_line)
    assert argv[:2] == ["LIFEBOAT_EPOCH=$EPOCH", "LIFEBOAT_STORE=file://.lifeboat/demo/secondary"]
    assert argv[2:5] == ["python", "-m", "lifeboat_dr.standins.trainer"] and argv[-2:] == [
        "--resume",
        "$CKPT",
    ]
    rb = load_runbook(ROOT / "runbooks" / "demo.yaml")
    assert rb.job.resume.arg == "--resume {checkpoint}"  # what the failover appends, the same way


def test_prestage_names_where_weights_land_and_the_mirror_to_pull_through():
    from lifeboat_dr.core.prestage import destination_for

    rb = load_runbook(ROOT / "runbooks" / "llama-70b-pretrain.yaml")
    text = _markdown("llama-70b-pretrain")
    (weights,) = rb.prestage.weights
    assert f"`{destination_for(rb.secondary.store, weights)}`" in text
    pulls = [c for c in _inline_commands(text, "docker") if c[1] == "pull"]
    assert pulls == [["docker", "pull", "us-central1-docker.pkg.dev/acme/nvcr/nvidia/pytorch:24.05-py3"]]
