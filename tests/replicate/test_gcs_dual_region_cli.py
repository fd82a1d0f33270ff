"""A runbook whose two sites name one GCS dual-region bucket (`replication: gcs-dual-region`),
through the CLI on fake-gcs-server behind the proxy that adds the bucket's rpo
(testing/gcs_dual_region.py; tests/certify/test_gcs_dual_region.py pins the peers' gap):
`lifeboat certify` says how long the newest checkpoint still replicates, `lifeboat replicate`
copies and deletes nothing, `lifeboat validate` takes the runbook."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from lifeboat_dr.providers.storage.gcs import GcsStore
from lifeboat_dr.shell.cli import main
from lifeboat_dr.standins.checkpoints import write_checkpoint
from lifeboat_dr.testing.emulators import new_gcs_bucket
from lifeboat_dr.testing.gcs_dual_region import RpoProxy
from tests.runbook_yaml import two_site_runbook

pytestmark = pytest.mark.integration


@pytest.fixture
def dual(fake_gcs_endpoint, tmp_path, monkeypatch):
    """(the bucket, the proxy, the runbook's path): both sites name gs://<bucket>/run."""
    with RpoProxy(fake_gcs_endpoint, rpo="ASYNC_TURBO") as proxy:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        bucket = GcsStore(new_gcs_bucket(fake_gcs_endpoint), "run", endpoint_url=proxy.url)
        site = {"infra": "local", "store": bucket.uri}
        (tmp_path / "rb.yaml").write_text(
            two_site_runbook(
                "dual",
                primary=site,
                secondary=site,
                checkpoint={"layout": "manifest"},
                replication="gcs-dual-region",
            )
        )
        monkeypatch.chdir(tmp_path)
        yield bucket, proxy, tmp_path / "rb.yaml"


def test_certify_names_each_checkpoint_still_replicating_then_the_newest_once_it_is_not(dual, capsys):
    bucket, proxy, rb = dual
    write_checkpoint(bucket, "manifest", 100)
    write_checkpoint(bucket, "manifest", 200)

    assert main(["certify", str(rb)]) == 2  # none certified
    out = capsys.readouterr().out
    assert "CERTIFIED none" in out
    lines = [ln for ln in out.splitlines() if "replicating" in ln]
    assert [ln.split()[1] for ln in lines] == ["200", "100"]
    assert all(
        "the bucket's rpo ASYNC_TURBO replicates every object within 15m: complete in" in ln for ln in lines
    )

    proxy.ahead = timedelta(minutes=16)  # the store's clock, 16 minutes on
    assert main(["certify", str(rb), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["certified"]["step"], doc["rejected"]) == (200, [])


def test_replicate_copies_and_deletes_nothing(dual, capsys):
    bucket, _, rb = dual
    write_checkpoint(bucket, "manifest", 100)
    before = sorted((i.key, i.version) for i in bucket.list())

    assert main(["replicate", str(rb), "--json"]) == 0
    captured = capsys.readouterr()

    assert json.loads(captured.out)["one_bucket"].startswith(f"{bucket.uri}: one dual-region bucket")
    assert sorted((i.key, i.version) for i in bucket.list()) == before
    assert main(["validate", str(rb)]) == 0


def test_the_replicate_flow_copies_and_deletes_nothing_either(dual):
    from lifeboat_dr.flows.replicate import replicate

    bucket, _, rb = dual
    write_checkpoint(bucket, "manifest", 100)
    before = sorted((i.key, i.version) for i in bucket.list())

    summary = replicate.fn(str(rb))

    assert summary == {"runbook": "dual", "skipped": summary["skipped"]}
    assert "one dual-region bucket is both sites' store" in summary["skipped"]
    assert sorted((i.key, i.version) for i in bucket.list()) == before
