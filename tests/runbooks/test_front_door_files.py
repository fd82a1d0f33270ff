"""What a runbook can make Lifeboat read or call, tried as an attacker would (#26, front-door
hygiene): its SkyPilot task file is read like the runbook itself (bounded, UTF-8, a regular
file inside the runbook's repository, never echoed when refused), a store URI carries no
credentials, and no endpoint or probe points at a link-local or cloud metadata address unless
the runbook allows that host by name."""

from __future__ import annotations

import os
import textwrap

import pytest

from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.providers.storage import open_store
from lifeboat_dr.runbooks.loader import RunbookInvalid, load_runbook
from lifeboat_dr.shell.cli import main

pytestmark = pytest.mark.timeout(60)

RUNBOOK = textwrap.dedent(
    """\
    name: job-a
    workload: pretraining
    primary:
      infra: aws/us-east-1
      store: {primary}
    secondary:
      infra: gcp/us-central1
      store: gs://dr/ckpt
      candidates:
        - infra: gcp/us-central1
          accelerators: H100:8
    job:
      task: {task}
    checkpoint:
      cadence: 30m
    approval:
      required: true
      approvers: [U1]
    """
)
SECRET = "hunter2-SECRET-PAYLOAD"


def runbook(tmp_path, *, task="task.yaml", primary="s3://prim/ckpt", extra=""):
    (tmp_path / "task.yaml").write_text("resources:\n  accelerators: H100:8\nrun: python train.py\n")
    path = tmp_path / "rb.yaml"
    path.write_text(RUNBOOK.format(task=task, primary=primary) + extra)
    return path


def said(capsys, *argv) -> tuple[int, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.fixture
def outside(tmp_path):
    """A secret file next to the runbook's folder, not inside it."""
    secret = tmp_path / "elsewhere" / "secret.yaml"
    secret.parent.mkdir()
    secret.write_text(f"api_key: {SECRET}\n")
    (tmp_path / "repo").mkdir()
    return secret


@pytest.mark.parametrize("command", ["validate", "render"])
@pytest.mark.parametrize("target", ["/etc/shadow", "/dev/zero", "secret outside", "link to the secret"])
def test_a_task_file_outside_the_runbooks_repository_is_refused_and_never_read(
    tmp_path, outside, capsys, command, target
):
    repo = tmp_path / "repo"
    if target == "secret outside":
        target = str(outside)
    elif target == "link to the secret":
        (repo / "task-link.yaml").symlink_to(outside)
        target = "task-link.yaml"
    path = runbook(repo, task=target)

    code, text = said(capsys, command, str(path))

    assert code == 1, text
    assert "job.task" in text and "outside the runbook's repository" in text, text
    assert SECRET not in text and "root:" not in text and "Traceback" not in text, text


@pytest.mark.parametrize("command", ["validate", "render"])
def test_a_fifo_for_a_task_file_is_refused_at_once_not_waited_on(tmp_path, capsys, command):
    os.mkfifo(tmp_path / "task-fifo.yaml")  # nobody will ever write to it: opening it would hang
    path = runbook(tmp_path, task="task-fifo.yaml")

    code, text = said(capsys, command, str(path))

    assert code == 1 and "job.task" in text and "not a regular file" in text, text


@pytest.mark.parametrize("command", ["validate", "render"])
def test_a_task_file_that_is_not_utf8_is_one_line_not_a_traceback(tmp_path, capsys, command):
    path = runbook(tmp_path, task="latin.yaml")
    (tmp_path / "latin.yaml").write_bytes(b"run: caf\xe9 --train\n")

    code, text = said(capsys, command, str(path))

    assert code == 1 and "latin.yaml:1: job.task: not UTF-8 text (byte 8)" in text, text
    assert "Traceback" not in text, text


def test_a_huge_task_file_inside_the_repository_is_refused_by_its_size(tmp_path, capsys):
    path = runbook(tmp_path, task="big.yaml")
    (tmp_path / "big.yaml").write_text("run: |\n" + "  echo padding\n" * 40_000)

    code, text = said(capsys, "validate", str(path))

    assert code == 1 and "big.yaml: job.task: file is larger than" in text, text


def test_the_shipped_runbooks_tasks_are_inside_their_repository(capsys):
    code, text = said(capsys, "validate", "llama-70b-pretrain", "chat-serving")

    assert code == 0, text


def test_credentials_in_a_store_uri_are_refused_by_the_model_and_never_echoed(tmp_path, capsys):
    path = runbook(tmp_path, primary=f"s3://AKIAEXAMPLE:{SECRET}@prim/ckpt")

    code, text = said(capsys, "validate", str(path))

    assert code == 1 and "primary.store" in text and "credentials" in text, text
    assert SECRET not in text and "AKIAEXAMPLE" not in text, text
    with pytest.raises(RunbookInvalid) as e:
        load_runbook(path)
    assert SECRET not in repr(e.value.problems)


@pytest.mark.parametrize(
    "uri", [f"s3://key:{SECRET}@bucket/prefix", f"gs://{SECRET}@bucket/prefix", f"file://me:{SECRET}@/tmp/x"]
)
def test_open_store_refuses_a_uri_with_credentials_without_naming_them(uri):
    """URIs that come from the environment (the ledger chain, the signal state) too."""
    with pytest.raises(ConfigError) as e:
        open_store(uri)
    assert SECRET not in str(e.value) and "credentials" in str(e.value)


METADATA = [
    "http://169.254.169.254",
    "http://169.254.170.2/v2/credentials",
    "http://[fd00:ec2::254]/latest/meta-data/",
    "http://[fe80::1]:9000",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://metadata.google.internal./computeMetadata/v1/",
    "http://2852039166/",  # 169.254.169.254 written as one number
    "http://[::ffff:169.254.169.254]/",
]


def _site_endpoint(url: str) -> str:
    return f"  endpoint_url: {url}\n"


@pytest.mark.parametrize("url", METADATA)
def test_an_endpoint_url_at_a_link_local_or_metadata_address_is_refused(tmp_path, url):
    path = runbook(tmp_path)
    text = path.read_text().replace(
        "  store: s3://prim/ckpt\n", "  store: s3://prim/ckpt\n" + _site_endpoint(url)
    )
    path.write_text(text)

    with pytest.raises(RunbookInvalid) as e:
        load_runbook(path)

    (problem,) = e.value.problems
    assert problem.field == "primary.endpoint_url", problem
    assert "link-local or cloud metadata address" in problem.message and "allow_hosts" in problem.message


@pytest.mark.parametrize("url", ["http://169.254.169.254/", "http://metadata.google.internal/healthz"])
def test_a_provider_probe_at_a_metadata_address_is_refused(tmp_path, url):
    path = runbook(tmp_path, extra=f"detection:\n  provider_endpoint: {url}\n")

    with pytest.raises(RunbookInvalid) as e:
        load_runbook(path)

    assert [p.field for p in e.value.problems] == ["detection.provider_endpoint"]


def test_a_metadata_host_the_runbook_allows_by_name_is_accepted(tmp_path):
    path = runbook(
        tmp_path,
        extra="detection:\n  provider_endpoint: http://169.254.10.5:8080/readyz\nallow_hosts: [169.254.10.5]\n",
    )

    rb = load_runbook(path)

    assert rb.detection.provider_endpoint == "http://169.254.10.5:8080/readyz"


def test_an_endpoint_with_credentials_is_refused_without_echoing_them(tmp_path, capsys):
    path = runbook(tmp_path)
    text = path.read_text().replace(
        "  store: s3://prim/ckpt\n",
        f"  store: s3://prim/ckpt\n  endpoint_url: http://minio:{SECRET}@minio:9000\n",
    )
    path.write_text(text)

    code, out = said(capsys, "validate", str(path))

    assert code == 1 and "primary.endpoint_url" in out and "credentials" in out, out
    assert SECRET not in out
