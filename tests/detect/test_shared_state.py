"""Detection state in a shared store: two `lifeboat serve` replicas (and `watch`) on different
hosts agree on the quorum and on which alerts were already seen."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from lifeboat_dr.core.detection.quorum import OutageState, QuorumPolicy
from lifeboat_dr.core.detection.shared_state import StoreSeen, StoreSignalLog, open_seen, open_signal_log
from lifeboat_dr.core.detection.signals import Reading, Status
from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.providers.storage.local import LocalStore
from lifeboat_dr.testing.emulators import new_s3_bucket

from .test_alertmanager import Receiver, one_group_per_alert


@pytest.fixture(params=["file", "s3-moto"])
def shared_uri(request, tmp_path, monkeypatch):
    """A store URI both replicas reach: a shared folder, or a moto S3 bucket."""
    if request.param == "file":
        return f"file://{tmp_path}/shared-state"
    url = request.getfixturevalue("s3_endpoint")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", url)
    return f"s3://{new_s3_bucket(url)}/lifeboat/detect"


def test_two_replicas_each_given_one_group_confirm_once(shared_uri, guarded_path, clock, payload):
    first, second = (Receiver(guarded_path, shared_uri, clock) for _ in range(2))
    a, b = one_group_per_alert(payload("firing_two_signals"))
    assert first.post(a).status_code == 200
    r = second.post(b)  # a different host: it sees the first replica's reading
    assert r.status_code == 200, r.text
    assert r.json()["runbooks"]["guarded"].startswith("confirmed: 2 of 2")
    kinds = first.kinds() + second.kinds()
    assert kinds.count("lifeboat.outage.confirmed") == 1


def test_a_webhook_sent_to_both_replicas_is_emitted_once(shared_uri, guarded_path, clock, payload):
    first, second = (Receiver(guarded_path, shared_uri, clock) for _ in range(2))
    body = payload("firing_one_signal")
    first.post(body)
    again = second.post(body)  # Alertmanager HA: every peer notifies, or a retry after failover
    assert again.json()["duplicates"] == 1 and again.json()["events"] == 0
    assert (first.kinds() + second.kinds()).count("lifeboat.alert.firing") == 1


def test_the_state_location_survives_as_a_uri_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("LIFEBOAT_STATE_DIR", f"file://{tmp_path}/s")
    assert isinstance(open_signal_log("guarded"), StoreSignalLog)
    assert isinstance(open_seen(), StoreSeen)
    monkeypatch.setenv("LIFEBOAT_STATE_DIR", str(tmp_path / "local"))
    assert open_seen() is None and not isinstance(open_signal_log("guarded"), StoreSignalLog)


SIGNALS = ("gpu_health", "training_progress", "provider", "alertmanager")


def _failing(n: int, at) -> Reading:
    return Reading(signal=SIGNALS[n % 4], source=f"probe-{n}", status=Status.failing, at=at, summary="down")


def test_racing_writers_decide_confirmed_exactly_once(tmp_path, clock):
    store = LocalStore(tmp_path / "state")
    policy = QuorumPolicy(signals=SIGNALS, quorum=2, window=timedelta(minutes=5))
    decisions, errors = [], []

    def observe(n):
        try:
            log = StoreSignalLog("guarded", store, clock=clock)
            decisions.append(log.observe([_failing(n, clock())], policy))
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=observe, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    became = [d for d in decisions if d.changed and d.state is OutageState.confirmed]
    assert len(became) == 1
    final = StoreSignalLog("guarded", store, clock=clock)
    assert {r.source for r in final._load()[0]} == {f"probe-{n}" for n in range(6)}  # no reading lost


def test_a_renewed_alert_counts_again_after_the_dedupe_window(tmp_path, clock):
    seen = [StoreSeen(LocalStore(tmp_path / "s"), ttl=timedelta(hours=1), clock=clock) for _ in range(2)]
    assert seen[0].first("group/fp/firing") and not seen[1].first("group/fp/firing")
    clock.advance(hours=2)
    assert [s.first("group/fp/firing") for s in seen] == [True, False]


def test_a_corrupted_shared_log_is_named_not_a_traceback(tmp_path, clock):
    store = LocalStore(tmp_path / "state")
    store.put("guarded.json", b"{not json")
    with pytest.raises(ConfigError, match=r"guarded.json: not a signal log"):
        StoreSignalLog("guarded", store, clock=clock).latest("probe-1")
