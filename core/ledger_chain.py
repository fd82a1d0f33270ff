"""The ledger as a hash chain kept in both sites' stores: tamper-evident, and readable
from either site while the other is down.

Each snapshot a failover records (`RtoLedger` saves after every change) is one record,
`<prefix>/<runbook>/<seq>.json`, holding the entry, its sequence number and the previous
record's hash; its own hash covers all three. A record is created only (`if_none_match`),
so two writers never both take one number: the loser re-reads the head and takes the next.
Every record goes to every store, in order; a store that fails is left out for the rest of
this writer's life (a hung site must not stall each step of the failover) and is *behind*
until `verify` sees it catch up, but for the first store (the secondary's, which outlives
a primary outage): the records it missed are written to it before the next one. Reading
merges the stores' copies seq by seq.

`verify` says what is wrong, per store and per record:

- *tampered*: a record whose hash does not match its content (edited in place);
- *conflict*: two stores hold different valid records at one seq (an edit that recomputed
  the hash, or writers on two sides of a partition): neither is trusted;
- *broken link*: a record whose `prev` is not the hash of the record before it;
- *gap*: a seq no store holds;
- *behind* (not an error): a store missing records another store holds.

What it does not prove: someone able to rewrite *every* copy from some record on can forge a
consistent chain; anchoring the head hash elsewhere (the Prefect run, a WORM bucket) would.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from lifeboat_dr.core.ledger import LedgerEntry, latest_per_run
from lifeboat_dr.kernel.errors import NotFound, PreconditionFailed, ProviderUnavailable

GENESIS = "0" * 64
PREFIX = "_lifeboat/chain"
CLAIM_ATTEMPTS = 20  # racing writers per append before giving up


def record_hash(seq: int, prev: str, entry: dict) -> str:
    body = json.dumps({"seq": seq, "prev": prev, "entry": entry}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()


@dataclass(frozen=True)
class Record:
    seq: int
    prev: str
    entry: dict
    hash: str

    @property
    def intact(self) -> bool:
        return self.hash == record_hash(self.seq, self.prev, self.entry)

    def to_bytes(self) -> bytes:
        doc = {"seq": self.seq, "prev": self.prev, "entry": self.entry, "hash": self.hash}
        return json.dumps(doc, sort_keys=True).encode() + b"\n"

    @classmethod
    def parse(cls, data: bytes) -> Record:
        doc = json.loads(data)
        return cls(int(doc["seq"]), str(doc["prev"]), dict(doc["entry"]), str(doc["hash"]))


@dataclass
class ChainReport:
    """What `verify` found: `problems` make the chain untrustworthy, `warnings` do not."""

    runbook: str
    records: int = 0
    head: str = GENESIS
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)  # stores not read whole (they did not answer)

    @property
    def ok(self) -> bool:
        return not self.problems


class LedgerChain:
    """A ledger sink (`append`, `read`) over several stores, plus `verify`."""

    def __init__(self, stores: Sequence, prefix: str = PREFIX):
        if not stores:
            raise ValueError("a ledger chain needs at least one store")
        self.stores, self.prefix = list(stores), prefix.rstrip("/")
        self.down: dict[str, str] = {}  # store uri -> why it was left out
        self.behind: list[tuple[str, Record]] = []  # (runbook, record) the first store missed
        self._heads: dict[str, tuple[int, str]] = {}  # runbook -> (seq, hash) last written

    def _key(self, runbook: str, seq: int) -> str:
        return f"{self.prefix}/{runbook}/{seq:012d}.json"

    def _up(self) -> list:
        return [s for s in self.stores if s.uri not in self.down]

    def append(self, entry: LedgerEntry) -> None:
        """Add a snapshot of `entry` to its runbook's chain, on every store still up.
        Raises `ProviderUnavailable` only when no store took it."""
        body = json.loads(entry.model_dump_json())
        seq, prev = self._heads.get(entry.runbook) or self._head(entry.runbook)
        for _ in range(CLAIM_ATTEMPTS):
            record = Record(seq + 1, prev, body, record_hash(seq + 1, prev, body))
            if self._claim(entry.runbook, record):
                self._heads[entry.runbook] = (record.seq, record.hash)
                return
            seq, prev = self._head(entry.runbook)  # another writer took that seq
        raise ProviderUnavailable(
            f"ledger {entry.runbook}: {CLAIM_ATTEMPTS} writers raced for the next record"
        )

    def _claim(self, runbook: str, record: Record) -> bool:
        """Write `record` create-only to each store up. False if a store already holds a
        different record at its seq (the first store that answers decides).

        The first store (the secondary's: it outlives a primary outage, and retention and a
        re-run on another worker read it) is never left out for a failed write: the records it
        missed are written to it, in order, before the next one, so its copy has no gap."""
        claimed, first_missed = False, False
        for store in self._up():
            try:
                if store is self.stores[0] and not self._catch_up(store):
                    continue  # left out: it holds another record where it missed ours
                store.put(self._key(runbook, record.seq), record.to_bytes(), if_none_match=True)
                claimed = True
            except PreconditionFailed:
                theirs = self._get(store, runbook, record.seq)
                if theirs is None or theirs.hash != record.hash:
                    if not claimed:
                        return False
                    self.down[store.uri] = f"holds another record at seq {record.seq}"
                else:
                    claimed = True
            except ProviderUnavailable as e:
                if store is self.stores[0]:
                    first_missed = True
                else:
                    self.down[store.uri] = str(e).splitlines()[0]
        if not claimed:
            raise ProviderUnavailable(f"ledger {runbook}: no store took the record ({self.down})")
        if first_missed:
            self.behind.append((runbook, record))
        return True

    def _catch_up(self, store) -> bool:
        """Write the records `store` missed (create-only, in order); `ProviderUnavailable` when
        it still fails. False (it is left out) when it holds another record at a seq it missed."""
        while self.behind:
            item = self.behind[0]
            runbook, record = item
            try:
                store.put(self._key(runbook, record.seq), record.to_bytes(), if_none_match=True)
            except PreconditionFailed:
                theirs = self._get(store, runbook, record.seq)
                if theirs is None or theirs.hash != record.hash:
                    self.down[store.uri] = f"holds another record at seq {record.seq}"
                    return False
            if self.behind and self.behind[0] is item:  # another thread's append may have caught up too
                self.behind.pop(0)
        return True

    def _get(self, store, runbook: str, seq: int) -> Record | None:
        try:
            return Record.parse(b"".join(store.read(self._key(runbook, seq))))
        except NotFound:
            return None
        except (ValueError, KeyError, TypeError):
            return Record(seq, "", {}, "unreadable")

    def _head(self, runbook: str) -> tuple[int, str]:
        chain, _ = self._merge(runbook)
        return (chain[-1].seq, chain[-1].hash) if chain else (0, GENESIS)

    def _copies(self, runbook: str, report: ChainReport) -> tuple[dict[int, dict[str, Record]], int]:
        """Each seq's record as each store holds it, and the highest seq any store listed (a
        record listed but not read, its store failing mid-way, is a gap, not the chain's end)."""
        copies: dict[int, dict[str, Record]] = {}
        listed = 0
        for store in self.stores:
            try:
                infos = list(store.list(f"{self.prefix}/{runbook}/"))
                seqs = []
                for info in infos:
                    name = info.key.rsplit("/", 1)[1]
                    if name.endswith(".json") and name[:-5].isdigit():
                        seqs.append(int(name[:-5]))
                listed = max([listed, *seqs])
                for seq in seqs:
                    record = self._get(store, runbook, seq)
                    if record is not None:
                        copies.setdefault(seq, {})[store.uri] = record
            except ProviderUnavailable as e:
                report.unread.append(store.uri)
                report.warnings.append(f"{store.uri}: unreachable, read from the other store(s): {e}")
        return copies, listed

    def _merge(self, runbook: str) -> tuple[list[Record], ChainReport]:
        """The chain as the stores agree on it, stopping at the first record that cannot be
        trusted; the report says why."""
        report = ChainReport(runbook)
        copies, listed = self._copies(runbook, report)
        chain: list[Record] = []
        prev = GENESIS
        for seq in range(1, max(listed, max(copies, default=0)) + 1):
            here = copies.get(seq, {})
            if not here:
                report.problems.append(f"seq {seq}: missing from every store (gap)")
                break
            for uri, r in here.items():
                if not r.intact or r.seq != seq:
                    report.problems.append(
                        f"seq {seq}: tampered in {uri} (its hash does not match its content)"
                    )
            intact = {uri: r for uri, r in here.items() if r.intact and r.seq == seq}
            if len({r.hash for r in intact.values()}) > 1:
                report.problems.append(
                    f"seq {seq}: conflict, the stores hold different records ({', '.join(intact)})"
                )
                break
            if not intact:
                break
            record = next(iter(intact.values()))
            if record.prev != prev:
                report.problems.append(f"seq {seq}: broken link (prev is not the hash of seq {seq - 1})")
                break
            missing = [s.uri for s in self.stores if s.uri not in here]
            if missing:
                report.warnings.append(f"seq {seq}: not yet in {', '.join(missing)} (behind)")
            chain.append(record)
            prev = record.hash
        if report.problems and chain:
            report.problems.append(f"records after seq {chain[-1].seq} are not trusted")
        report.records, report.head = len(chain), prev
        return chain, report

    def verify(self, runbook: str) -> ChainReport:
        return self._merge(runbook)[1]

    def read(self, runbook: str | None = None, *, whole: bool = False) -> list[LedgerEntry]:
        """The last snapshot per run from the trusted part of the chain (see `verify`).
        `whole`: for a reader that deletes by it (retention): `ProviderUnavailable` unless
        every store answered and the chain has no problem, since a chain read in part may end
        before the records that matter (a failover's checkpoint in use)."""
        names = [runbook] if runbook else self.runbooks()
        entries: list[LedgerEntry] = []
        for name in names:
            chain, report = self._merge(name)
            if whole and (report.unread or report.problems):
                why = "; ".join([*(f"{u} did not answer" for u in report.unread), *report.problems])
                raise ProviderUnavailable(f"the ledger chain of {name} was not read whole: {why}")
            entries += [LedgerEntry.model_validate(r.entry) for r in chain]
        return latest_per_run(entries)

    def entry(self, runbook: str, run_id: str) -> LedgerEntry | None:
        """Run `run_id`'s last snapshot in the trusted chain, or None."""
        return next((e for e in self.read(runbook) if e.run_id == run_id), None)

    def runbooks(self) -> list[str]:
        names: set[str] = set()
        for store in self.stores:
            try:
                names |= {
                    i.key[len(self.prefix) + 1 :].split("/", 1)[0] for i in store.list(f"{self.prefix}/")
                }
            except ProviderUnavailable:
                continue
        return sorted(names)


class TeedLedger:
    """The flow's sink when a chain is configured: every snapshot to the ledger chain, then to
    the local file (as before). A chain with no store reachable does not stop the failover:
    the snapshot stays in the file, the next one (a whole entry) reaches the chain when a site
    is back, and `chain_errors` says what was missed."""

    def __init__(self, file, chain: LedgerChain):
        self.file, self.chain = file, chain
        self.chain_errors: list[str] = []

    def append(self, entry: LedgerEntry) -> None:
        # the chain first: what a reader on another worker sees (retention's "in use by a
        # failover") is never behind this worker's file, even if the worker dies in between
        try:
            self.chain.append(entry)
        except ProviderUnavailable as e:
            self.chain_errors.append(str(e).splitlines()[0])
        self.file.append(entry)

    def read(self, runbook: str | None = None) -> list[LedgerEntry]:
        return self.chain.read(runbook)

    def entry(self, runbook: str, run_id: str) -> LedgerEntry | None:
        """The run's last snapshot: this worker's file has it when this worker ran it before,
        the chain when another one did (a re-run picked up by another worker); of both, the
        newer (`revision`: a worker killed between the two writes left one behind)."""
        found = [e for e in (self.file.entry(runbook, run_id), self.chain.entry(runbook, run_id)) if e]
        return max(found, key=lambda e: e.revision, default=None)
