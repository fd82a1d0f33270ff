"""The ledger kept in both sites' stores as a hash chain: every copy agrees, an edit is
caught, one site down still leaves it writable and readable."""

from __future__ import annotations

import json
import socket
import threading
from datetime import timedelta

import pytest

from lifeboat_dr.core.ledger import RtoLedger
from lifeboat_dr.core.ledger_chain import LedgerChain, Record, record_hash
from lifeboat_dr.kernel.errors import ProviderUnavailable
from lifeboat_dr.providers.storage.local import LocalStore
from lifeboat_dr.providers.storage.s3 import S3Store
from lifeboat_dr.testing.emulators import new_s3_bucket
from lifeboat_dr.testing.memory_store import MemoryStore

from .conftest import replay_failover


@pytest.fixture(params=["memory", "s3-moto"])
def sites(request, tmp_path):
    """(primary store, secondary store): a local folder, and a moto S3 bucket or the fake."""
    primary = LocalStore(tmp_path / "primary")
    if request.param == "memory":
        return primary, MemoryStore("secondary")
    url = request.getfixturevalue("s3_endpoint")
    return primary, S3Store(new_s3_bucket(url), "ckpt", endpoint_url=url)


def _failover(sink, clock, run_id="run-1"):
    ledger = RtoLedger(
        "llama",
        run_id,
        rto_target=timedelta(minutes=30),
        rpo_target=timedelta(minutes=30),
        sink=sink,
        clock=clock,
    )
    return replay_failover(ledger, clock)


def _records(store, runbook="llama"):
    return [Record.parse(b"".join(store.read(i.key))) for i in store.list(f"_lifeboat/chain/{runbook}/")]


def test_every_snapshot_lands_in_both_sites_as_one_unbroken_chain(sites, clock):
    entry = _failover(LedgerChain(sites), clock)
    a, b = (_records(s) for s in sites)
    assert [r.hash for r in a] == [r.hash for r in b] and len(a) > 10
    assert all(r.prev == p.hash for p, r in zip(a, a[1:], strict=False)) and a[0].prev == "0" * 64
    for store in sites:  # either site alone tells the whole story
        assert LedgerChain([store]).read("llama") == [entry]
    report = LedgerChain(sites).verify("llama")
    assert report.ok and report.records == len(a) and not report.warnings


def test_an_entry_edited_in_place_is_caught_and_the_other_site_still_reads_true(sites, clock):
    entry = _failover(LedgerChain(sites), clock)
    primary, secondary = sites
    key = next(iter(secondary.list("_lifeboat/chain/llama/"))).key
    doc = json.loads(b"".join(secondary.read(key)))
    doc["entry"]["notes"] = {"approved by": "U0MALLORY"}
    secondary.put(key, json.dumps(doc).encode())
    report = LedgerChain(sites).verify("llama")
    assert not report.ok and any("tampered in " + secondary.uri in p for p in report.problems)
    assert LedgerChain(sites).read("llama") == [entry]  # the intact copy wins


def test_an_edit_that_recomputes_its_hash_conflicts_with_the_other_site(sites, clock):
    _failover(LedgerChain(sites), clock)
    _, secondary = sites
    key = [i.key for i in secondary.list("_lifeboat/chain/llama/")][3]
    r = Record.parse(b"".join(secondary.read(key)))
    forged = {**r.entry, "outcome": "aborted"}
    secondary.put(key, Record(r.seq, r.prev, forged, record_hash(r.seq, r.prev, forged)).to_bytes())
    report = LedgerChain(sites).verify("llama")
    assert any(f"seq {r.seq}: conflict" in p for p in report.problems)
    assert report.records == r.seq - 1  # nothing from the conflict on is trusted


def test_an_edit_rehashed_in_every_copy_breaks_the_next_link(clock, tmp_path):
    stores = [MemoryStore("a"), MemoryStore("b")]
    _failover(LedgerChain(stores), clock)
    for store in stores:
        key = [i.key for i in store.list("_lifeboat/chain/llama/")][2]
        r = Record.parse(b"".join(store.read(key)))
        forged = {**r.entry, "drill": True}
        store.put(key, Record(r.seq, r.prev, forged, record_hash(r.seq, r.prev, forged)).to_bytes())
    report = LedgerChain(stores).verify("llama")
    assert any("seq 4: broken link" in p for p in report.problems)


def test_a_record_deleted_everywhere_is_a_gap_and_garbage_is_tampered(clock):
    stores = [MemoryStore("a"), MemoryStore("b")]
    _failover(LedgerChain(stores), clock)
    keys = [i.key for i in stores[0].list("_lifeboat/chain/llama/")]
    for store in stores:
        store.delete(keys[5])
    stores[0].put(keys[1], b"\xff not json")
    report = LedgerChain(stores).verify("llama")
    assert any("seq 2: tampered in memory://a" in p for p in report.problems)
    assert any("seq 6: missing from every store (gap)" in p for p in report.problems)


def test_one_site_down_the_ledger_goes_on_at_the_other_and_says_it_is_behind(clock):
    primary, secondary = MemoryStore("primary"), MemoryStore("secondary")
    sink = LedgerChain([primary, secondary])
    ledger = RtoLedger(
        "llama",
        "run-1",
        rto_target=timedelta(minutes=30),
        rpo_target=timedelta(minutes=30),
        sink=sink,
        clock=clock,
    )
    ledger.mark("outage_start")
    primary.outage = True  # the region goes dark mid-failover
    entry = replay_failover(ledger, clock)
    assert sink.behind and primary.uri not in sink.down  # the first store is never left out
    assert LedgerChain([primary, secondary]).read("llama") == [entry]  # read from the other site
    primary.outage = False
    report = LedgerChain([primary, secondary]).verify("llama")
    assert report.ok and any("not yet in memory://primary (behind)" in w for w in report.warnings)
    sink.append(entry)  # the next record: the first store is given every record it missed first
    report = LedgerChain([primary]).verify("llama")
    assert (
        report.ok and not sink.behind and report.records == len(LedgerChain([secondary])._merge("llama")[0])
    )
    secondary.outage = True
    with pytest.raises(ProviderUnavailable, match="no store took the record"):
        LedgerChain([secondary]).append(entry)


def test_a_site_that_refuses_connections_is_read_around(clock, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    down = S3Store("gone", "ckpt", endpoint_url=dead)
    down.max_attempts = 1
    secondary = LocalStore(tmp_path / "secondary")
    entry = _failover(LedgerChain([down, secondary]), clock)
    ledger = LedgerChain([down, secondary])
    assert ledger.read("llama") == [entry]
    report = ledger.verify("llama")
    assert report.ok and any("unreachable" in w for w in report.warnings)


def test_a_writer_cut_off_between_the_two_sites_is_picked_up_by_the_next(clock):
    stores = [MemoryStore("a"), MemoryStore("b")]
    first = LedgerChain(stores)
    _failover(first, clock, run_id="run-1")
    # half-done: the crashed writer's last record reached only the first site
    head = _records(stores[0])[-1]
    half = Record(head.seq + 1, head.hash, head.entry, record_hash(head.seq + 1, head.hash, head.entry))
    stores[0].put(f"_lifeboat/chain/llama/{half.seq:012d}.json", half.to_bytes(), if_none_match=True)
    second = _failover(LedgerChain(stores), clock, run_id="run-2")
    report = LedgerChain(stores).verify("llama")
    assert report.ok and len(LedgerChain(stores).read("llama")) == 2
    assert LedgerChain(stores).read("llama")[-1] == second


def test_writers_racing_on_one_chain_never_share_a_record(tmp_path, clock):
    stores = [LocalStore(tmp_path / "a"), LocalStore(tmp_path / "b")]
    errors = []

    def run(n):
        try:
            _failover(LedgerChain(stores), clock.__class__(), run_id=f"run-{n}")
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    report = LedgerChain(stores).verify("llama")
    assert report.ok, report.problems
    assert sorted(e.run_id for e in LedgerChain(stores).read("llama")) == [f"run-{n}" for n in range(4)]
    one = MemoryStore("one")
    _failover(LedgerChain([one]), clock.__class__())
    assert report.records == 4 * len(_records(one))  # every snapshot of every writer, once


def test_a_worker_killed_between_the_chain_and_its_file_leaves_the_chain_ahead(clock, tmp_path):
    """Found by the fault simulator (#28): the worker died after writing its file and before
    the chain; retention on another worker read the chain, saw no checkpoint in use, and
    deleted the one the re-run then took from the file. The chain is written first now, and
    a re-run reads the newer of the two copies (`revision`)."""
    from lifeboat_dr.core.ledger import LedgerFile
    from lifeboat_dr.core.ledger_chain import TeedLedger

    class DiesWritingIt(LedgerFile):
        def append(self, entry):
            if entry.checkpoint:
                raise SystemExit("SIGKILL")  # the worker dies before its file has the record
            super().append(entry)

    secondary = LocalStore(tmp_path / "secondary")
    file = DiesWritingIt(tmp_path / "ledger.jsonl")
    ledger = RtoLedger(
        "llama",
        "run-1",
        rto_target=timedelta(minutes=30),
        rpo_target=timedelta(minutes=30),
        sink=TeedLedger(file, LedgerChain([secondary])),
        clock=clock,
    )
    ledger.mark("outage_start")
    with pytest.raises(SystemExit):
        ledger.checkpoint(f"{secondary.uri}/step-10", clock(), 10)

    assert LedgerChain([secondary]).entry("llama", "run-1").checkpoint.endswith("step-10")
    again = TeedLedger(LedgerFile(tmp_path / "ledger.jsonl"), LedgerChain([secondary]))
    assert again.entry("llama", "run-1").checkpoint.endswith("step-10")  # the newer copy
