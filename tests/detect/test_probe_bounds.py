"""A primary store that does not answer costs each watch probe a bounded, small number of
attempts, so one watch run ends before the next is due."""

from __future__ import annotations

import socket

from lifeboat_dr.flows.wiring import PROBE_ATTEMPTS, build_probes
from lifeboat_dr.runbooks.loader import load_runbook
from tests.runbook_yaml import two_site_runbook


def test_probes_of_an_unreachable_s3_primary_try_each_call_only_a_few_times(tmp_path, monkeypatch):
    for k, v in {
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(k, v)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"  # refuses: the attempt count is what we count
    path = tmp_path / "rb.yaml"
    path.write_text(
        two_site_runbook(
            "rb",
            primary={"store": "s3://gone/ckpt", "endpoint_url": dead},
            job="echo resumed",
            detection={"signals": ["checkpoint_freshness", "provider"], "quorum": 2, "window": "5m"},
        )
    )
    freshness, provider = build_probes(load_runbook(path))
    assert [freshness.check().status, provider.check().status] == ["unknown", "failing"]
    store = provider.plane.store
    assert PROBE_ATTEMPTS == 2 and store.max_attempts == 2
    assert store.calls["HeadObject"] == provider.attempts * PROBE_ATTEMPTS
