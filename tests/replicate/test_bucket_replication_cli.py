"""A runbook whose S3 bucket replicates itself (`replication: s3-crr`), through the CLI and
the `replicate` flow on moto: replication copies nothing and records the bucket's lag, a
FAILED object fails the pass, and `lifeboat certify` counts only what the bucket reports
replicated. moto does not replicate: `moto_replicate` does what the rule would have
(tests/certify/test_bucket_replication_s3.py pins the gap)."""

from __future__ import annotations

import json

import pytest

from lifeboat_dr.core.replication.lag import LagLog
from lifeboat_dr.providers.storage.s3 import S3Store
from lifeboat_dr.shell.cli import main
from lifeboat_dr.standins.checkpoints import write_checkpoint
from lifeboat_dr.testing.bucket_replication import moto_replicate, set_moto_status
from lifeboat_dr.testing.emulators import new_s3_bucket
from tests.runbook_yaml import two_site_runbook

pytestmark = pytest.mark.integration


@pytest.fixture
def crr(s3_endpoint, tmp_path, monkeypatch):
    """(primary, secondary, the runbook's path): two moto buckets the runbook says replicate."""
    primary = S3Store(new_s3_bucket(s3_endpoint), "run", endpoint_url=s3_endpoint)
    secondary = S3Store(new_s3_bucket(s3_endpoint), "run", endpoint_url=s3_endpoint)
    site = {"infra": "local", "endpoint_url": s3_endpoint}
    (tmp_path / "rb.yaml").write_text(
        two_site_runbook(
            "crr",
            primary={**site, "store": primary.uri},
            secondary={**site, "store": secondary.uri},
            checkpoint={"layout": "manifest"},
            replication="s3-crr",
        )
    )
    monkeypatch.chdir(tmp_path)
    return primary, secondary, tmp_path / "rb.yaml"


def _keys(store, directory):
    return [i.key for i in store.list(f"{directory}/")]


def test_replicate_copies_nothing_and_records_what_the_bucket_finished(crr, capsys):
    primary, secondary, rb = crr
    done, pending = write_checkpoint(primary, "manifest", 100), write_checkpoint(primary, "manifest", 200)
    moto_replicate(primary, secondary, _keys(primary, done))
    for key in _keys(primary, pending):  # the rule has not reached step 200 yet
        set_moto_status(primary, key, "PENDING")

    assert main(["replicate", str(rb), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)

    assert doc["copied"] == 0 and doc["checkpoints"] == [] and doc["failed"] == {}
    assert [(lag["checkpoint"], lag["complete"]) for lag in doc["lag"]] == [
        ("step_0000200", False),  # its lag so far, still growing
        ("step_0000100", True),
    ]
    assert list(secondary.list("step_0000200/")) == []  # nothing copied by Lifeboat


def test_each_finished_replica_is_logged_once_and_a_failed_object_fails_the_pass(crr, capsys):
    primary, secondary, rb = crr
    first = write_checkpoint(primary, "manifest", 100)
    moto_replicate(primary, secondary, _keys(primary, first))
    assert main(["replicate", str(rb)]) == 0
    second = write_checkpoint(primary, "manifest", 200)
    broken = f"{second}/shard-000001.bin"
    moto_replicate(primary, secondary, _keys(primary, second), fail=[broken])

    assert main(["replicate", str(rb)]) == 1
    err = capsys.readouterr().err

    assert f"FAILED step_0000200: the bucket reports FAILED for 1 object(s), first {broken}" in err
    log = LagLog(".lifeboat/crr/replication-lag.jsonl").read()
    assert [(r.checkpoint, r.complete) for r in log] == [("step_0000100", True), ("step_0000200", False)]


def test_certify_counts_only_objects_the_bucket_reports_replicated(crr, capsys):
    primary, secondary, rb = crr
    older, newer = write_checkpoint(primary, "manifest", 100), write_checkpoint(primary, "manifest", 200)
    moto_replicate(primary, secondary, _keys(primary, older))
    for key in _keys(primary, newer):  # step 200 copied by something that is not the bucket's rule
        secondary.server_copy(primary, key, key)

    assert main(["certify", str(rb), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)

    assert doc["certified"]["step"] == 100
    assert doc["rejected"][0]["reason"] == "not replicated by the bucket"


def test_the_flow_records_the_bucket_lag_and_copies_nothing(crr, tmp_path, prefect_server):
    from lifeboat_dr.flows.replicate import replicate

    primary, secondary, rb = crr
    done, pending = write_checkpoint(primary, "manifest", 100), write_checkpoint(primary, "manifest", 200)
    moto_replicate(primary, secondary, [i.key for i in primary.list(f"{done}/")])
    for info in primary.list(f"{pending}/"):
        set_moto_status(primary, info.key, "PENDING")

    summary = replicate(str(rb), lag_log=str(tmp_path / "lag.jsonl"))

    assert summary["copied_bytes"] == 0 and summary["failed"] == {}
    assert [(r.checkpoint, r.complete) for r in LagLog(tmp_path / "lag.jsonl").read()] == [
        ("step_0000200", False),
        ("step_0000100", True),
    ]
    assert list(secondary.list("step_0000200/")) == []
