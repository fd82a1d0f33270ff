"""The loss log's own pass (issue #34, item 3): the pre-failure loss log reaches the secondary
every few steps, not once per replicated checkpoint, at a bounded cost, by the site state.

Seen on b22f169: the log travelled only with the replication pass, so it ended at the newest
checkpoint's step and nearly every failover found nothing logged after it to prove it by."""

from __future__ import annotations

import json

import pytest

from lifeboat_dr.core.fencing import fence_job
from lifeboat_dr.core.replication.losslog import SHIPPED_SUFFIX, primary_is_active, ship_loss_log
from lifeboat_dr.core.sitestate import RolesFlipped, site_stores
from lifeboat_dr.kernel.errors import NotFound, ProviderUnavailable, SiteStateUnknown
from lifeboat_dr.providers.storage.local import LocalStore

KEY = "logs/loss.jsonl"


def _lines(first: int, last: int) -> bytes:
    return b"".join(json.dumps({"step": s, "loss": round(3 - s / 100, 4)}).encode() + b"\n"
                    for s in range(first, last + 1))  # fmt: skip


def _copy(store) -> bytes | None:
    try:
        return b"".join(store.read(KEY))
    except NotFound:
        return None


@pytest.fixture
def sites(tmp_path):
    return LocalStore(tmp_path / "primary"), LocalStore(tmp_path / "secondary")


def test_a_pass_copies_the_grown_log_and_a_second_pass_with_nothing_new_copies_nothing(sites):
    primary, secondary = sites
    guard = primary_is_active(site_stores(primary, secondary), "trainer")
    primary.put(KEY, _lines(1, 40))
    first = ship_loss_log(primary, secondary, KEY, guard=guard)
    assert _copy(secondary) == _lines(1, 40) and first.copied_bytes == len(_lines(1, 40))

    primary.put(KEY, _lines(1, 43))  # three steps after checkpoint 40, before the next one
    grown = ship_loss_log(primary, secondary, KEY, guard=guard)
    assert _copy(secondary) == _lines(1, 43) and grown.copied_bytes == len(_lines(1, 43))

    again = ship_loss_log(primary, secondary, KEY, guard=guard)
    assert (again.copied_bytes, again.requests, again.unchanged) == (0, 2, "unchanged since the last copy")
    assert _copy(secondary) == _lines(1, 43)


def test_nothing_logged_yet_copies_nothing(sites):
    primary, secondary = sites
    assert ship_loss_log(primary, secondary, KEY).unchanged == "nothing logged yet"
    assert list(secondary.list()) == []


def test_a_fenced_out_primarys_log_is_not_copied_over_the_active_sites(sites):
    primary, secondary = sites
    stores = site_stores(primary, secondary)
    primary.put(KEY, _lines(1, 42))
    ship_loss_log(primary, secondary, KEY, guard=primary_is_active(stores, "trainer"))
    fence_job(secondary, primary, run_id="failover-1", holder="lifeboat:dr")  # the secondary took over
    primary.put(KEY, _lines(1, 42) + b'{"step": 1, "loss": 9.0}\n')  # the zombie's restarted job logs on
    with pytest.raises(RolesFlipped, match="refusing"):
        ship_loss_log(primary, secondary, KEY, guard=primary_is_active(stores, "trainer"))
    assert _copy(secondary) == _lines(1, 42)  # the pre-failure log the proof reads, untouched


class LeaseUnreadable:
    """The secondary's store as seen through a flaky link: the site state cannot be read on
    it, though a write might still land."""

    def __init__(self, inner):
        self.inner, self.uri, self.capabilities = inner, inner.uri, inner.capabilities

    def read(self, key, *a, **k):
        if key.startswith("_lifeboat/"):
            raise ProviderUnavailable(f"{self.uri}/{key}: connection reset")
        return self.inner.read(key, *a, **k)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_an_unknown_site_state_is_not_no_lease_and_writes_nothing(sites):
    primary, secondary = sites
    flaky = LeaseUnreadable(secondary)
    primary.put(KEY, _lines(1, 42))
    with pytest.raises(SiteStateUnknown):
        ship_loss_log(primary, flaky, KEY, guard=primary_is_active(site_stores(primary, flaky), "trainer"))
    assert _copy(secondary) is None


def _whole_lines(data: bytes) -> list[dict]:
    assert data == b"" or data.endswith(b"\n"), data[-40:]
    return [json.loads(line) for line in data.splitlines()]


@pytest.mark.parametrize("max_bytes", [1 << 20, 200])
def test_the_secondarys_copy_is_always_whole_lines_of_the_log_even_cut_mid_line(sites, max_bytes):
    primary, secondary = sites
    full = _lines(1, 30)
    for cut in range(0, len(full) + 1, 7):  # the primary caught at every few bytes, mid-line too
        primary.put(KEY, full[:cut])
        ship_loss_log(primary, secondary, KEY, max_bytes=max_bytes)
        copy = _copy(secondary) or b""
        whole = full[: full.rfind(b"\n", 0, cut) + 1]  # the lines the primary had finished
        assert _whole_lines(copy) and len(copy) <= max_bytes if whole else copy == b""
        # the newest finished lines, in order, beginning at a line start: a prefix of the
        # log less (past max_bytes) its oldest lines
        assert whole.endswith(copy) and (copy == whole or whole[-len(copy) - 1 : -len(copy)] == b"\n")
        if cut <= max_bytes:  # the whole log fits the bound: all of it
            assert copy == whole


def test_a_log_larger_than_the_bound_costs_a_bounded_tail_each_pass(sites):
    primary, secondary = sites
    primary.put(KEY, _lines(1, 5000))  # ~150 kB
    done = ship_loss_log(primary, secondary, KEY, max_bytes=4096)
    copy = _copy(secondary)
    assert done.tail and done.copied_bytes == len(copy) <= 4096
    steps = [r["step"] for r in _whole_lines(copy)]
    assert steps == list(range(steps[0], 5001)) and steps[0] > 4800  # the newest ~120 steps


def test_a_torn_record_of_the_last_copy_is_not_trusted(sites):
    primary, secondary = sites
    primary.put(KEY, _lines(1, 10))
    secondary.put(KEY + SHIPPED_SUFFIX, b'{"size": ')
    assert ship_loss_log(primary, secondary, KEY).copied_bytes == len(_lines(1, 10))


def test_the_replication_pass_carries_the_log_by_the_same_rules(sites):
    from datetime import timedelta

    from lifeboat_dr.core.replication.copying import replicate_checkpoints

    primary, secondary = sites
    primary.put(KEY, _lines(1, 42) + b'{"step": 43, "lo')  # the primary died writing step 43
    report = replicate_checkpoints(primary, secondary, [], rpo_target=timedelta(minutes=5), also=[KEY])
    assert report.copied_files == [KEY] and _copy(secondary) == _lines(1, 42)
    again = replicate_checkpoints(primary, secondary, [], rpo_target=timedelta(minutes=5), also=[KEY])
    assert again.copied_files == [] and _copy(secondary) == _lines(1, 42)


def test_the_deployed_flow_ships_the_runbooks_loss_log_and_stops_once_the_secondary_took_over(
    runbook_file, primary, secondary, capsys
):
    from lifeboat_dr.flows.loss_log import loss_log

    with runbook_file.open("a") as f:
        f.write(f'verify: {{loss_log: "{primary.uri}/{KEY}"}}\n')
    primary.put(KEY, _lines(1, 42))
    assert loss_log.fn(str(runbook_file))["copied_bytes"] == len(_lines(1, 42))
    assert loss_log.fn(str(runbook_file))["copied_bytes"] == 0
    fence_job(secondary, primary, run_id="failover-1", holder="lifeboat:dr")
    primary.put(KEY, _lines(1, 44))
    assert "refusing" in loss_log.fn(str(runbook_file))["skipped"]
    assert _copy(secondary) == _lines(1, 42)
