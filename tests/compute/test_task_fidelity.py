"""The user's own SkyPilot task, as a new user writes it: a pinned region, a typo, the
checkpoint bucket of the failed region mounted. Checked by SkyPilot's own schema before any
approval, adapted for the secondary, and dry-run through SkyPilot's own launch path.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.providers.compute.base import JobSpec, PlanOption
from lifeboat_dr.providers.compute.skycheck import load_runbook_and_task
from lifeboat_dr.providers.compute.skypilot import SkyPilotCompute, build_task
from lifeboat_dr.runbooks.loader import RunbookInvalid
from lifeboat_dr.runbooks.skytask import map_store_uri

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LIFEBOAT_CACHE_DIR", str(tmp_path / "memo"))
    monkeypatch.setenv("LIFEBOAT_SKY_HOME", str(tmp_path / "no-sky-setup"))


@pytest.fixture(scope="module", autouse=True)
def _offline_sky():
    SkyPilotCompute(offline=True)  # the shipped catalog, before anything imports sky


def _runbook(
    tmp_path: Path, task: str, *, primary="s3://acme-ckpt-use1/llama", secondary="gs://acme-dr/llama"
):
    """The llama example runbook with `task` as its job's task YAML."""
    text = (REPO / "runbooks" / "llama-70b-pretrain.yaml").read_text()
    text = text.replace("s3://acme-ckpt-use1/llama-70b", primary).replace(
        "gs://acme-ckpt-dr-usc1/llama-70b", secondary
    )
    (tmp_path / "jobs").mkdir(exist_ok=True)
    (tmp_path / "jobs" / "llama-70b.sky.yaml").write_text(task)
    path = tmp_path / "rb.yaml"
    path.write_text(text)
    return path


PINNED = """\
name: llama
num_nodes: 2
resources:
  infra: aws/us-east-1
  accelerators: H100:8
file_mounts:
  /ckpt:
    source: s3://acme-ckpt-use1
    mode: MOUNT
envs:
  CKPT_URI: s3://acme-ckpt-use1/llama/latest
run: torchrun train.py
"""


def _opt(infra: str) -> PlanOption:
    return PlanOption(infra=infra, instance_type=None, accelerators="H100:8", use_spot=False, hourly_usd=None)


@pytest.mark.parametrize(
    "location",
    [
        "infra: aws/us-east-1",
        "cloud: aws\n  region: us-east-1",
        "cloud: aws\n  region: us-east-1\n  zone: us-east-1a",
    ],
)
def test_a_task_pinned_to_the_failed_region_runs_where_the_candidate_says(tmp_path, location):
    task = tmp_path / "task.yaml"
    task.write_text(PINNED.replace("infra: aws/us-east-1", location))
    job = JobSpec(
        name="llama",
        task_yaml=task,
        store_uri="gs://acme-dr/llama",
        primary_store_uri="s3://acme-ckpt-use1/llama",
    )
    built = build_task(
        job, _opt("gcp/us-central1")
    )  # was: ValueError: Cannot specify both infra and cloud...
    (res,) = list(built.resources)
    assert (res.infra.cloud.lower(), res.infra.region, res.infra.zone) == ("gcp", "us-central1", None)


def test_the_checkpoint_mount_and_env_of_the_failed_region_point_at_the_secondary(tmp_path):
    task = tmp_path / "task.yaml"
    task.write_text(PINNED)
    job = JobSpec(
        name="llama",
        task_yaml=task,
        store_uri="gs://acme-dr/llama",
        primary_store_uri="s3://acme-ckpt-use1/llama",
    )
    built = build_task(job, _opt("gcp/us-central1"))
    assert built.storage_mounts["/ckpt"].source == "gs://acme-dr"
    assert built.envs["CKPT_URI"] == "gs://acme-dr/llama/latest"
    twice = build_task(job, _opt("gcp/us-central1"))  # building again changes nothing more
    assert twice.envs["CKPT_URI"] == "gs://acme-dr/llama/latest"


def test_store_uris_map_only_when_the_layout_carries_over():
    p, s = "s3://a-use1/llama", "gs://a-dr/llama"
    assert map_store_uri("s3://a-use1/llama/step-5", p, s) == "gs://a-dr/llama/step-5"
    assert map_store_uri("s3://a-use1", p, s) == "gs://a-dr"  # same prefix: bucket to bucket
    assert map_store_uri("s3://a-use1x/llama", p, s) is None  # another bucket that shares a prefix
    assert map_store_uri("s3://corpus/shards", p, s) is None
    with pytest.raises(ValueError, match="outside the checkpoint store"):
        map_store_uri("s3://a-use1/other", p, "gs://a-dr/elsewhere")


def test_validate_catches_the_typo_at_its_line_in_skypilots_words(tmp_path, capsys):
    rb = _runbook(tmp_path, PINNED.replace("  accelerators: H100:8", "  acelerators: H100:8"))
    with pytest.raises(RunbookInvalid) as err:
        load_runbook_and_task(rb)
    (problem,) = err.value.problems
    assert problem.file.endswith("llama-70b.sky.yaml") and problem.line == 5 and problem.field == "job.task"
    assert str(problem).endswith(
        "job.task: resources.acelerators: Instead of 'acelerators', did you mean 'accelerators'?"
    )


def test_validate_catches_an_unknown_top_level_field_and_a_bad_value(tmp_path):
    rb = _runbook(tmp_path, PINNED + "setpu: pip install -r requirements.txt\n")
    with pytest.raises(RunbookInvalid, match=r"llama-70b.sky.yaml:13: job.task: setpu: .*'setup'"):
        load_runbook_and_task(rb)
    rb = _runbook(tmp_path, PINNED.replace("num_nodes: 2", "num_nodes: two"))
    with pytest.raises(RunbookInvalid, match=r"llama-70b.sky.yaml:2: job.task: num_nodes: "):
        load_runbook_and_task(rb)


def test_validate_refuses_a_primary_reference_it_cannot_move_naming_the_line(tmp_path):
    task = PINNED.replace("source: s3://acme-ckpt-use1\n", "source: s3://acme-ckpt-use1/tokenizers\n")
    rb = _runbook(tmp_path, task, secondary="gs://acme-dr/other-prefix")
    with pytest.raises(RunbookInvalid) as err:
        load_runbook_and_task(rb)
    lines = [str(p) for p in err.value.problems]
    assert any(
        ":8: job.task: file_mounts./ckpt.source: s3://acme-ckpt-use1/tokenizers names the primary bucket" in x
        for x in lines
    )
    rb = _runbook(
        tmp_path, PINNED.replace("run: torchrun train.py", "run: aws s3 sync s3://acme-ckpt-use1/llama /ckpt")
    )
    with pytest.raises(
        RunbookInvalid, match=r":12: job.task: run: names the primary store's bucket s3://acme-ckpt-use1"
    ):
        load_runbook_and_task(rb)


def test_the_pinned_task_with_the_primary_mount_validates(tmp_path):
    rb = load_runbook_and_task(_runbook(tmp_path, PINNED))
    assert rb.name == "llama-70b-pretrain"


def test_validate_remembers_skypilots_verdict_by_the_task_content(tmp_path, monkeypatch):
    from lifeboat_dr.providers.compute import skycheck

    rb = _runbook(tmp_path, PINNED)
    load_runbook_and_task(rb)
    calls = []
    monkeypatch.setattr(skycheck, "schema_problems", lambda *a, **k: calls.append(1) or [])
    load_runbook_and_task(rb)
    assert calls == []  # same content: SkyPilot not asked again
    (tmp_path / "jobs" / "llama-70b.sky.yaml").write_text(PINNED.replace("H100:8", "acelerators"))
    load_runbook_and_task(rb)
    assert calls == [1]  # changed content: asked again


@pytest.mark.processes  # on a fresh machine SkyPilot builds its own wheel first (`python -m pip wheel`)
@pytest.mark.parametrize("name", ["llama-70b-pretrain", "mistral-7b-sft", "batch-embed", "chat-serving"])
def test_each_example_runbook_goes_through_skypilots_dry_run_launch(name):
    from lifeboat_dr.flows.wiring import sky_dry_run
    from lifeboat_dr.runbooks.loader import load_runbook

    rb = load_runbook(REPO / "runbooks" / f"{name}.yaml")
    result = sky_dry_run(rb)
    assert "sky.execution.launch(dryrun=True)" in " ".join(result.calls)
    assert result.cluster_yaml and result.option.feasible
    region = result.option.infra.split("/")[1]
    assert region in result.cluster_yaml and result.option.instance_type in result.cluster_yaml
    if name == "llama-70b-pretrain":  # pinned to aws/us-east-1, its /ckpt on the failed bucket
        assert result.option.infra == "gcp/us-central1"
        assert "/ckpt <- gs://acme-ckpt-dr-usc1" in result.skipped_mounts


def test_dry_run_reports_what_skypilot_refuses_as_one_line(tmp_path):
    from lifeboat_dr.flows.wiring import sky_dry_run
    from lifeboat_dr.runbooks.loader import load_runbook

    # SkyPilot mounts whole buckets only: a sub-path in MOUNT mode is its StorageModeError
    task = PINNED.replace(
        "file_mounts:\n", "file_mounts:\n  /data:\n    source: s3://corpus/shards\n    mode: MOUNT\n"
    )
    rb = load_runbook(_runbook(tmp_path, task))
    with pytest.raises(ConfigError, match="llama-70b.sky.yaml") as err:
        sky_dry_run(rb)
    assert "\n" not in str(err.value) and "StorageModeError" in str(err.value)


def test_the_shipped_snapshot_has_what_the_dry_run_needs():
    from lifeboat_dr.providers.compute.skyplan import SHIPPED_CATALOG

    for cloud in ("aws", "gcp"):
        assert (SHIPPED_CATALOG / cloud / "images.csv").exists()


@pytest.mark.parametrize("command", ["validate", "plan", "failover"])
def test_the_typo_is_one_line_before_any_approval_from_every_command(tmp_path, capsys, command):
    from lifeboat_dr.shell.cli import main

    rb = _runbook(tmp_path, PINNED.replace("  accelerators: H100:8", "  acelerators: H100:8"))
    argv = [command, str(rb)] + (["--dry-run"] if command == "failover" else [])
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(
        "llama-70b.sky.yaml:5: job.task: resources.acelerators: Instead of 'acelerators', did you mean 'accelerators'?"
    )
