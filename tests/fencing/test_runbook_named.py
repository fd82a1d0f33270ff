"""Two runbooks on one prefix (#27, medium): refused by `validate`, and at run time.

Two runbooks whose secondaries share a prefix delete each other's certified replicas, and
one's failover fences the other's healthy primary. `lifeboat validate a.yaml b.yaml` refuses
stores that overlap (same bucket, one prefix inside the other), and the site state names
its runbook: a reader of another runbook stops with one line.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from lifeboat_dr.core.commit import commit_checkpoint
from lifeboat_dr.core.fencing import fence_job
from lifeboat_dr.core.sitestate import read_site_state
from lifeboat_dr.kernel.errors import LifeboatError
from lifeboat_dr.providers.storage.local import LocalStore
from lifeboat_dr.standins.checkpoints import write_checkpoint

RUNBOOK = """\
name: {name}
workload: finetuning
targets: {{rpo: 30m}}
primary: {{infra: local, store: "{primary}"}}
secondary: {{infra: local, store: "{secondary}", candidates: [{{infra: local}}]}}
job: {{command: "python train.py"}}
checkpoint: {{layout: manifest, cadence: 5m, retention: {{keep_last: 1}}}}
"""


def _runbook(folder, name, primary, secondary):
    path = folder / f"{name}.yaml"
    path.write_text(RUNBOOK.format(name=name, primary=primary, secondary=secondary))
    return path


def _lifeboat(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "lifeboat_dr", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


@pytest.mark.processes
@pytest.mark.parametrize(
    "a_secondary, b_secondary",
    [
        ("s3://shared/dr", "s3://shared/dr"),
        ("s3://shared/dr", "s3://shared/dr/llama"),
        ("gs://shared/dr/llama", "gs://shared/dr"),
        ("file:///srv/dr", "file:///srv/dr/b"),
    ],
)
def test_validate_refuses_two_runbooks_whose_stores_overlap(tmp_path, a_secondary, b_secondary):
    a = _runbook(tmp_path, "a", "s3://home-a/ckpt", a_secondary)
    b = _runbook(tmp_path, "b", "s3://home-b/ckpt", b_secondary)

    run = _lifeboat("validate", a, b, cwd=tmp_path)

    assert run.returncode == 1, run.stdout + run.stderr
    lines = [line for line in run.stderr.splitlines() if "overlap" in line]
    assert len(lines) == 1 and "a.yaml" in lines[0] and "b.yaml" in lines[0], run.stderr
    assert b_secondary.split("://")[1].split("/")[0] in lines[0]


@pytest.mark.processes
def test_validate_accepts_runbooks_on_sibling_prefixes(tmp_path):
    a = _runbook(tmp_path, "a", "s3://home/a", "s3://shared/dr-a")
    b = _runbook(tmp_path, "b", "s3://home/b", "s3://shared/dr-ab")

    run = _lifeboat("validate", a, b, cwd=tmp_path)

    assert run.returncode == 0, run.stdout + run.stderr


def test_a_site_state_of_another_runbook_stops_the_reader_in_one_line(tmp_path):
    primary, secondary = LocalStore(tmp_path / "p"), LocalStore(tmp_path / "s")
    fence_job(secondary, primary, run_id="failover-1", holder="lifeboat:a-dr", runbook="a")

    assert read_site_state({"primary": primary, "secondary": secondary}, runbook="a").lineage == "secondary@1"
    with pytest.raises(LifeboatError) as e:
        read_site_state({"primary": LocalStore(tmp_path / "pb"), "secondary": secondary}, runbook="b")
    line = str(e.value)
    assert "\n" not in line and "runbook a" in line and secondary.uri in line, line
    with pytest.raises(LifeboatError, match="runbook a"):
        fence_job(
            secondary, LocalStore(tmp_path / "pb"), run_id="failover-b", holder="lifeboat:b-dr", runbook="b"
        )


@pytest.mark.processes
def test_replicate_of_a_second_runbook_into_a_claimed_prefix_is_refused_and_deletes_nothing(tmp_path):
    pa, pb, shared = tmp_path / "pa", tmp_path / "pb", tmp_path / "shared"
    for folder, step in ((pa, 10), (pa, 20), (pb, 30)):
        store = LocalStore(folder)
        commit_checkpoint(store, write_checkpoint(store, "manifest", step), step, 0)
    a = _runbook(tmp_path, "a", f"file://{pa}", f"file://{shared}")
    b = _runbook(tmp_path, "b", f"file://{pb}", f"file://{shared}")
    assert _lifeboat("replicate", a, cwd=tmp_path).returncode == 0
    before = sorted(o.key for o in LocalStore(shared).list() if not o.key.startswith("_lifeboat/"))

    run = _lifeboat("replicate", b, cwd=tmp_path)

    assert run.returncode != 0
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "runbook a" in lines[0], run.stderr
    assert sorted(o.key for o in LocalStore(shared).list() if not o.key.startswith("_lifeboat/")) == before
