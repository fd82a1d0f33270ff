"""Certify the replica: the newest checkpoint on the secondary that is safe to resume from.

Plain Python over the `Store` protocol: no Prefect, no SDK. Checkpoints are examined newest
first; the first that passes is certified and older ones are not looked at. A checkpoint
passes when it is complete for its layout and every shard the source (or, with the source
down, the manifest) names is on the replica with the same size and an equal CRC32C, and no
torch.save or safetensors file of it is cut short by its own format (a few ranged reads at
its ends: core/checkpoints/formats.py; a torn file the source holds too, under its commit
marker, passes every checksum):

- by metadata where both sides report a comparable value: GCS/local list CRC32C, S3
  full-object CRC32C by HEAD, the manifest's CRC32C, or equal plain-MD5 S3 ETags;
- otherwise by streaming CRC32C of the side(s) that lack one, in bounded chunks;
- `deep=True` streams every object of the replica (and of the source when it is up).

An object whose checksum cannot be compared (streaming off, or the source down with no
manifest) is reported unverifiable and its checkpoint is rejected: nothing skipped is ever
counted as verified. RPO = `at` - write time of the certified checkpoint: the guarded commit's time by the
writers' store's clock where its marker says, else the manifest's (the writer's clock,
never later than the store says the objects landed); never negative (a note says when the
clocks disagree).

Lineage needs the site state: read from the stores by role (`sites`), it must be conclusive
(`lifeboat_dr.core.sitestate`): a store that does not answer is `SiteStateUnknown`, never
"never fenced".

In an outage certification does not wait on the source. `source_down` (the outage is
confirmed) means it is never asked; `source_probe` (the source opened with the probe
deadline) asks it once, while the replica is listed: no answer by then and it is down. A
source known down is taken as unknown by the site state too (`_Unasked`), so the stores that
answered decide, and the view must be conclusive without it.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta

from lifeboat_dr.core.bucket_replication import (
    GCS_DUAL_REGION,
    LIFEBOAT,
    MODES,
    S3_CRR,
    ReplicationBound,
    not_vouched,
    read_bound,
    source_says,
)
from lifeboat_dr.core.checkpoints.formats import torn_file
from lifeboat_dr.core.checkpoints.layouts import CheckpointDir, Discovery, discover, pointer_notes
from lifeboat_dr.core.checkpoints.manifest import MANIFEST_NAME, iter_manifest
from lifeboat_dr.core.checkpoints.protocols import incomplete_reason
from lifeboat_dr.core.checkpoints.receipt import RECEIPT_NAME, iter_receipt
from lifeboat_dr.core.fencing import COMMIT_MARKER, peek_lease
from lifeboat_dr.core.sitestate import lineage_problem, read_marker
from lifeboat_dr.kernel.crc32c import crc32c
from lifeboat_dr.kernel.errors import ConfigError, LifeboatError, NotFound, ProviderUnavailable, RefusedKey
from lifeboat_dr.providers.storage.base import ObjectInfo, Store

BATCH = 256  # objects compared per batch: bounds memory and in-flight requests
MAX_PROBLEMS = 10  # details kept per rejected checkpoint
_PLAIN_MD5 = re.compile(r"^[0-9a-f]{32}$")

# Rejection kinds, most decisive first.
(
    MISSING,
    NOT_REPLICATED,
    REPLICATING,
    SIZE,
    CRC,
    INCOMPLETE,
    TORN,
    BAD_METADATA,
    REFUSED,
    UNVERIFIABLE,
    LINEAGE,
) = (
    "missing shard",
    "not replicated by the bucket",  # s3-crr: the replica's HEAD does not say REPLICA; gcs-dual-region: no rpo bound
    "replicating",  # gcs-dual-region: an object younger than the bucket's rpo bound, by the store's clock
    "size mismatch",
    "crc mismatch",
    "incomplete layout",
    "torn file",  # committed, but a file's own format says it was cut short (checkpoints/formats.py)
    "bad metadata",
    "refused object",  # a key no store will read: `..`, an empty segment, a symlink leaving the store
    "unverifiable",
    "not the active lineage",
)
INCONSISTENT = "inconsistent state"  # its commit record says so (the training guard's emergency record)
_ORDER = {
    LINEAGE: -1,
    INCONSISTENT: -0.5,
    MISSING: 0,
    NOT_REPLICATED: 0.5,
    REPLICATING: 0.5,
    SIZE: 1,
    CRC: 2,
    INCOMPLETE: 3,
    TORN: 4,
    BAD_METADATA: 5,
    REFUSED: 6,
    UNVERIFIABLE: 7,
}
AUTO = "auto"  # read the site state's lease from the stores


class StoreUnavailable(ProviderUnavailable):
    """A store failed during certification; `side` says which ("replica" or "source")."""

    def __init__(self, side: str, uri: str, error: Exception):
        super().__init__(f"{side} {uri} failed: {error}")
        self.side = side


@dataclass(frozen=True)
class Certified:
    step: int
    uri: str  # the checkpoint directory on the replica
    written_at: datetime  # when the job committed it: its marker's store time, else its manifest's
    # (the writer's clock, capped at when the store says it landed), else the source's, else the replica's
    written_at_basis: str  # which of those it is
    verified_by: dict[str, int]  # objects verified per method: metadata, manifest, etag-md5, streamed


@dataclass(frozen=True)
class Rejection:
    step: int
    uri: str
    reason: str  # MISSING, NOT_REPLICATED, REPLICATING, SIZE, CRC, INCOMPLETE, TORN, BAD_METADATA, REFUSED, UNVERIFIABLE, LINEAGE, INCONSISTENT
    detail: str  # the first problem, e.g. "missing shard step_12/shard-3.bin"
    problems: tuple[str, ...] = ()  # up to MAX_PROBLEMS of them
    more: int = 0  # problems not listed
    ready_in_s: float | None = (
        None  # REPLICATING: seconds by the store's clock until the bucket vouches for it
    )


@dataclass
class CertifyReport:
    replica: str
    source: str | None
    at: datetime
    layout: str | None
    mode: str  # metadata | manifest | streaming | deep, or manifest-only-source-down
    certified: Certified | None
    rejected: list[Rejection]
    rpo: timedelta | None  # at - certified.written_at
    replication_lag: timedelta | None  # newest source checkpoint's write time - certified's
    newest_source_step: int | None
    source_error: str | None  # why the source could not be used (it is down)
    calls: dict[str, int]  # Store primitive calls by side: replica.list, source.head, ...
    object_bytes_read: int  # shard bytes streamed for checksums
    metadata_bytes_read: int  # manifests, indexes and pointers
    notes: list[str] = field(default_factory=list)
    clocks: str = ""  # how the stores' clocks compared with the control plane's, when measured

    def to_dict(self) -> dict:
        d = asdict(self)
        for key in ("rpo", "replication_lag"):
            d[key] = None if d[key] is None else d[key].total_seconds()
        d["at"] = self.at.isoformat()
        if self.certified:
            d["certified"]["written_at"] = self.certified.written_at.isoformat()
        return d


class _Counted:
    """A store seen through counters: which primitive was called how often, per side."""

    def __init__(self, store: Store, side: str, calls: Counter, lock: threading.Lock):
        self.store, self.side, self._calls, self._lock = store, side, calls, lock
        self.uri, self.capabilities = store.uri, store.capabilities

    def _count(self, op: str) -> None:
        with self._lock:
            self._calls[f"{self.side}.{op}"] += 1

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        self._count("list")
        return self._named(lambda: self.store.list(prefix))

    def head(self, key: str) -> ObjectInfo:
        self._count("head")
        try:
            return self.store.head(key)
        except StoreUnavailable:
            raise
        except ProviderUnavailable as e:
            raise StoreUnavailable(self.side, self.uri, e) from e

    def read(self, key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        self._count("read")
        return self._named(lambda: self.store.read(key, start, end))

    def _named(self, make) -> Iterator:
        """Iterate, naming this side in any failure (mid-stream too): a replica that fails
        must never be taken for the source going down."""
        try:
            yield from make()
        except StoreUnavailable:
            raise
        except ProviderUnavailable as e:
            raise StoreUnavailable(self.side, self.uri, e) from e


class _MetadataView:
    """A side as the commit-protocol checks see it: its reads count as metadata bytes."""

    def __init__(self, certifier: _Certifier, store: _Counted):
        self._c, self._store = certifier, store
        self.uri, self.capabilities = store.uri, store.capabilities
        self.list, self.head = store.list, store.head

    def read(self, key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        return self._c._metadata_chunks(self._store, key, start, end)


@dataclass
class _Expected:
    rel: str  # path inside the checkpoint directory
    size: int
    crc: int | None
    etag: str | None
    basis: str  # "source" or "manifest"
    replica_basis: str | None = None  # "receipt" when the replica's CRC32C came from one


class _Unasked:
    """A store known not to answer (the outage is confirmed, or it missed the probe): every
    call fails at once, saying why, so a reader counts it unknown without waiting on it."""

    def __init__(self, store: Store, why: str):
        self.uri, self.capabilities, self._why = store.uri, store.capabilities, why

    def _down(self, *args, **kwargs):
        raise ProviderUnavailable(f"{self.uri}: {self._why}")

    list = head = read = put = delete = server_copy = _down


class _Certifier:
    def __init__(
        self,
        replica,
        source,
        *,
        layout,
        at,
        deep,
        stream,
        max_workers,
        cache_limit,
        lease=AUTO,
        sites=None,
        source_down=None,
        source_probe=None,
        replicated_by=LIFEBOAT,
    ):
        if replicated_by not in MODES:
            raise ConfigError(f"replicated_by: {replicated_by!r} is not one of {', '.join(MODES)}")
        self.by_bucket = replicated_by == S3_CRR  # count only what the bucket reports it replicated
        self.by_bound = replicated_by == GCS_DUAL_REGION  # count only what the bucket's rpo bound covers
        self._bound: ReplicationBound | None = None
        self.calls: Counter[str] = Counter()
        self._lease, self._stores, self._sites = lease, (replica, source), sites
        self._source_probe = source_probe if source is not None and not source_down else None
        # a remote store's own deadline; its retries may overrun it by a backoff, the wait does not
        self._probe_deadline_s = getattr(self._source_probe, "deadline_s", None)
        self._lock = threading.Lock()
        self.replica = _Counted(replica, "replica", self.calls, self._lock)
        self.source = _Counted(source, "source", self.calls, self._lock) if source is not None else None
        self.layout, self.at, self.deep, self.stream = layout, at, deep, stream
        self.max_workers, self.cache_limit = max_workers, cache_limit
        self.object_bytes = self.metadata_bytes = 0
        self.source_error: str | None = None
        self.methods: Counter[str] = Counter()
        self.notes: list[str] = []
        if source is not None and source_down:
            self._source_down(f"not asked: {source_down}")

    @property
    def lease(self):
        """The site state's lease, read once when the first checkpoint is judged; a source
        known down by then is unknown there, not asked again."""
        if self._lease == AUTO:
            self._lease = _site_lease(*self._stores, self._sites, source_error=self.source_error)
        return self._lease

    @property
    def bound(self) -> ReplicationBound:
        """The dual-region bucket's bound and the store's clock: one bucket GET, when the first
        checkpoint is judged (an earlier store time only makes objects look younger)."""
        if self._bound is None:
            with self._lock:
                self.calls["replica.bucket_rpo"] += 1
            self._bound = read_bound(self.replica.store)
        return self._bound

    def _unreplicated(self, ckpt: CheckpointDir) -> Rejection | None:
        """gcs-dual-region: the checkpoint is rejected until its youngest object (by the
        replica's listing) is past the bucket's bound."""
        youngest = max(ckpt.files(self.replica), key=lambda info: info.updated, default=None)
        if youngest is None:
            return None
        said = self.bound.replicating(youngest.updated, youngest.key)
        if said is None:
            return None
        why, wait = said
        reason = NOT_REPLICATED if wait is None else REPLICATING
        return Rejection(
            ckpt.step,
            self._uri(ckpt),
            reason,
            why,
            (why,),
            ready_in_s=None if wait is None else round(wait.total_seconds(), 3),
        )

    def _probe_source(self) -> None:
        """Ask the source once, within the probe's deadline: no answer, and it is down. A
        site-state GET, the request certification's reading of the lease makes next."""
        try:
            peek_lease(self._source_probe)
        except ProviderUnavailable as e:
            self._source_down(f"no answer within the probe deadline: {e}")
        except LifeboatError:
            pass  # it answered; what it said is the site state's to judge

    # -- reading ----------------------------------------------------------------------

    def _stream_crc(self, store, key: str) -> int:
        value = 0
        for chunk in store.read(key):
            value = crc32c(chunk, value)
            with self._lock:
                self.object_bytes += len(chunk)
        return value

    def _metadata_chunks(self, store, key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        for chunk in store.read(key, start, end):
            with self._lock:
                self.metadata_bytes += len(chunk)
            yield chunk

    def _source_down(self, error: Exception | str) -> None:
        with self._lock:  # the probe's thread and the run may both find it down
            if self.source_error is None:
                self.source_error = str(error)
                self.notes.append(f"source unreachable, certifying against manifests alone: {error}")

    # -- the run ------------------------------------------------------------------------

    older_than: int | None = None

    given: tuple[Discovery | None, Discovery | None] = (None, None)  # (replica, source) taken already

    def run(self) -> Iterator[Certified | Rejection]:
        probe = None
        if self._source_probe is not None and self.given[1] is None:
            # while the replica is listed: a source that hangs costs one probe deadline at most
            probe = threading.Thread(target=self._probe_source, name="certify-probe", daemon=True)
            probe.start()
            until = None if self._probe_deadline_s is None else time.monotonic() + self._probe_deadline_s
        try:
            self.found = self.given[0] or discover(self.replica, self.layout, cache_limit=self.cache_limit)
        finally:
            if probe is not None:
                probe.join(None if until is None else max(0.0, until - time.monotonic()))
                if probe.is_alive():  # the store's retries would outlast the deadline: it is down now
                    self._source_down(
                        f"{self._source_probe.uri}: no answer within the probe deadline ({self._probe_deadline_s:g}s)"
                    )
        self.notes.extend(pointer_notes(self.found))
        self.source_found: Discovery | None = self.given[1]
        if self.source is not None and self.source_found is None and not self.source_error:
            try:
                self.source_found = discover(
                    self.source, self.found.layout or self.layout, cache_limit=self.cache_limit
                )
            except (ProviderUnavailable, NotFound) as e:
                self._source_down(e)
        for ckpt in self.found.checkpoints:
            if self.older_than is None or ckpt.step < self.older_than:
                yield self._certify(ckpt)

    def _uri(self, ckpt: CheckpointDir) -> str:
        return f"{self.replica.uri.rstrip('/')}/{ckpt.name}"

    def _reject(self, ckpt: CheckpointDir, problems: list[tuple[str, str]], total: int) -> Rejection:
        problems = sorted(problems, key=lambda p: _ORDER[p[0]])
        return Rejection(
            step=ckpt.step,
            uri=self._uri(ckpt),
            reason=problems[0][0],
            detail=problems[0][1],
            problems=tuple(p[1] for p in problems[:MAX_PROBLEMS]),
            more=max(0, total - MAX_PROBLEMS),
        )

    def _source_dir(self, ckpt: CheckpointDir) -> CheckpointDir | None:
        if self.source_found is None or self.source_error:
            return None
        return next((d for d in self.source_found.checkpoints if d.name == ckpt.name), None)

    def _certify(self, ckpt: CheckpointDir) -> Certified | Rejection:
        layout = self.found.layout
        reason = incomplete_reason(_MetadataView(self, self.replica), layout, ckpt, self.found.pointers)
        if reason:
            return self._reject(ckpt, [(INCOMPLETE, f"{ckpt.name}: {reason}")], 1)
        if self.by_bound and (young := self._unreplicated(ckpt)) is not None:
            return young
        try:
            torn = self._torn(ckpt)
            if torn:
                return self._reject(ckpt, [(TORN, f"{ckpt.name}: {torn}")], 1)
            return self._verify(ckpt)
        except RefusedKey as e:  # one object no store will read: this step is bad, not the run
            return self._reject(ckpt, [(REFUSED, f"{ckpt.name}: {e}")], 1)
        except ConfigError as e:  # an unreadable manifest: this step is bad, older ones may not be
            return self._reject(ckpt, [(BAD_METADATA, f"{ckpt.name}: {e}")], 1)

    def _torn(self, ckpt: CheckpointDir) -> str | None:
        """A file of the replica's checkpoint that its own format says was cut short: a few
        ranged reads per torch.save / safetensors file, in parallel (counted as metadata)."""
        with ThreadPoolExecutor(self.max_workers) as pool:
            return torn_file(
                _MetadataView(self, self.replica), ckpt.files(self.replica), self.found.layout, pool.map
            )

    def _verify(self, ckpt: CheckpointDir) -> Certified | Rejection:
        layout = self.found.layout
        manifest = None
        if MANIFEST_NAME in ckpt.markers:
            manifest = _LazyManifest(self, ckpt)
            if layout == "manifest":
                ckpt.step = manifest.header()["step"]
        src_dir = self._source_dir(ckpt)
        if src_dir is not None:
            # The source's listing is the truth; the manifest only fills CRC32Cs it lacks (S3),
            # and is read only if one is needed.
            expected = _from_source(src_dir, self.source)
        elif manifest is not None:
            expected = (_Expected(s.path, s.size, s.crc32c, None, "manifest") for s in manifest.shards())
        else:
            why = (
                "the source is unreachable"
                if self.source_error or self.source is None
                else "the source no longer has it"
            )
            return self._reject(
                ckpt, [(UNVERIFIABLE, f"{ckpt.name}: {why} and it has no {MANIFEST_NAME}")], 1
            )
        try:
            filler = _ManifestFiller(manifest) if src_dir is not None and manifest is not None else None
            receipt = _ReceiptFiller(self, ckpt) if RECEIPT_NAME in ckpt.markers else None
            problems, total, methods = self._compare(ckpt, expected, src_dir is not None, filler, receipt)
        except StoreUnavailable as e:
            if e.side != "source" or src_dir is None or self.source_error:
                raise
            self._source_down(e)  # the source went down mid-way: start over on the manifest
            return self._verify(ckpt)
        if problems:
            return self._reject(ckpt, problems, total)
        marker = read_marker(self.replica, ckpt.name) if COMMIT_MARKER in ckpt.markers else None
        if why := inconsistent_record(ckpt.name, marker):
            return self._reject(ckpt, [(INCONSISTENT, why)], 1)
        written, basis = self._written_at(ckpt, src_dir, manifest.opened if manifest else None, marker)
        if self.lease is not None and (why := lineage_problem(ckpt.name, marker, self.lease, ckpt.newest)):
            return self._reject(ckpt, [(LINEAGE, why)], 1)
        self.methods.update(methods)
        return Certified(ckpt.step, self._uri(ckpt), written, basis, dict(methods))

    def _written_at(self, ckpt, src_dir, manifest_header, marker: bytes | None) -> tuple[datetime, str]:
        """When the checkpoint was committed, by a store's clock where one says: the guarded
        commit's time on the writers' store (in its marker); else its manifest's time (the
        writer's clock) unless that is later than the store says its objects landed (the
        source's newest, else the replica's: the writer's clock ran ahead); else the source's
        newest object; else the replica's copy time."""
        committed = _committed_at(marker)
        if committed is not None:
            return committed, "commit (store clock)"
        if src_dir is not None and src_dir.newest is not None:
            landed, where = src_dir.newest, "source"
        else:
            landed, where = ckpt.newest, "replica"
        if manifest_header is not None:
            created = manifest_header["created"]
            if landed is None or created <= landed:
                return created, "manifest"
            self.notes.append(
                f"{ckpt.name}: its manifest's time is {created - landed} after its objects landed on the "
                f"{where} (the writer's clock runs ahead): the {where}'s time is used"
            )
            return landed, f"{where} (the writer's clock ran ahead)"
        if where == "source":
            return landed, "source"
        return landed, "replica (copy time: RPO may be understated)"

    def _compare(self, ckpt, expected, source_up: bool, filler=None, receipt=None):
        """Merge the expected shards with the replica's listing, both sorted by key."""
        problems: list[tuple[str, str]] = []
        total = 0
        methods: Counter[str] = Counter()
        batch: list[tuple[_Expected, ObjectInfo]] = []
        plen = len(ckpt.prefix)
        replica_files = ckpt.files(self.replica)
        rep = next(replica_files, None)
        last_rel = ""
        with ThreadPoolExecutor(self.max_workers) as pool:
            for exp in expected:
                if exp.rel < last_rel:  # a hand-made manifest: a merge would miss shards
                    return (
                        [(UNVERIFIABLE, f"{ckpt.name}: shard list is not sorted at {exp.rel!r}")],
                        1,
                        methods,
                    )
                last_rel = exp.rel
                while rep is not None and rep.key[plen:] < exp.rel:
                    rep = next(replica_files, None)
                key = f"{ckpt.name}/{exp.rel}"
                if rep is None or rep.key[plen:] != exp.rel:
                    total += 1
                    said = ""
                    if self.by_bucket and source_up and len(problems) < MAX_PROBLEMS:
                        said = source_says(self.source, key)  # PENDING, FAILED: why it is missing
                    problems.append((MISSING, f"missing shard {key}{said}"))
                elif rep.size != exp.size:
                    total += 1
                    problems.append(
                        (SIZE, f"size mismatch {key}: replica {rep.size} bytes, {exp.basis} {exp.size} bytes")
                    )
                elif not problems:
                    if (
                        source_up
                        and not self.deep
                        and not self.by_bucket
                        and _same_md5_etag(exp.etag, rep.etag)
                    ):
                        methods["etag-md5"] += 1  # both plain single-part MD5s, equal: same bytes
                        continue
                    if exp.crc is None and filler is not None:
                        filler.fill(exp)  # the source list lacks CRC32C (S3): the manifest has it
                    if rep.crc32c is None and receipt is not None and not self.deep and not self.by_bucket:
                        rep = receipt.fill(exp, rep)  # S3 replica: the receipt saves a HEAD
                    batch.append((exp, rep))
                if len(problems) > MAX_PROBLEMS:
                    problems = problems[:MAX_PROBLEMS]
                if len(batch) >= BATCH:
                    total += self._check_batch(pool, ckpt, batch, problems, methods, source_up)
                    batch = []
            if batch and not problems:
                total += self._check_batch(pool, ckpt, batch, problems, methods, source_up)
        return problems, total, methods

    def _check_batch(self, pool, ckpt, batch, problems, methods, source_up) -> int:
        found = 0
        # Objects whose checksums are both in the listings are compared inline; only those
        # needing a HEAD or a read go to the pool.
        by_head = self.deep or self.by_bucket  # the bucket's status is on HEAD only
        inline = [p for p in batch if not by_head and p[1].crc32c is not None and p[0].crc is not None]
        remote = [p for p in batch if by_head or p[1].crc32c is None or p[0].crc is None]
        outcomes = [self._check_one(ckpt, *pair, source_up) for pair in inline]
        if remote:
            outcomes += pool.map(lambda pair: self._check_one(ckpt, *pair, source_up), remote)
        for outcome in outcomes:
            kind, detail = outcome
            if kind in (CRC, UNVERIFIABLE, MISSING, NOT_REPLICATED):
                found += 1
                if len(problems) < MAX_PROBLEMS:
                    problems.append((kind, detail))
            else:
                methods[kind] += 1
        return found

    def _check_one(self, ckpt, exp: _Expected, rep: ObjectInfo, source_up: bool) -> tuple[str, str]:
        """Compare one object; returns (method, "") when equal, else (problem kind, detail)."""
        try:
            if self.by_bucket:
                rep = self.replica.head(rep.key)  # its status, and its CRC32C with it
                if why := not_vouched(rep):
                    return NOT_REPLICATED, why
            return self._compare_one(exp, rep, source_up)
        except NotFound:  # deleted between the listing and the HEAD or read
            return MISSING, f"missing shard {rep.key} (vanished during certification)"

    def _compare_one(self, exp: _Expected, rep: ObjectInfo, source_up: bool) -> tuple[str, str]:
        key = rep.key
        src = self.source if source_up else None
        if self.deep:
            rep_crc = self._stream_crc(self.replica, key)
            exp_crc = self._stream_crc(src, key) if src is not None else exp.crc
            method = "streamed"
        else:
            rep_crc, exp_crc = rep.crc32c, exp.crc
            method = exp.replica_basis or ("manifest" if exp.basis == "manifest" else "metadata")
            if rep_crc is None and self.replica.capabilities.crc32c_in_head:
                rep_crc = self.replica.head(key).crc32c
            if exp_crc is None and src is not None and src.capabilities.crc32c_in_head:
                exp_crc = src.head(key).crc32c
            if rep_crc is None or exp_crc is None:
                if not self.stream or (exp_crc is None and src is None):
                    side = "replica" if rep_crc is None else exp.basis
                    return UNVERIFIABLE, (
                        f"unverifiable {key}: the {side} reports no comparable CRC32C "
                        "(multipart/COMPOSITE or CRC64NVME-only)"
                        + ("" if self.stream else " and streaming is off")
                    )
                if rep_crc is None:
                    rep_crc = self._stream_crc(self.replica, key)
                if exp_crc is None:
                    exp_crc = self._stream_crc(src, key)
                method = "streamed"
        if exp_crc is None:
            return UNVERIFIABLE, f"unverifiable {key}: no checksum to compare against"
        if rep_crc != exp_crc:
            return CRC, f"CRC32C mismatch {key}: replica {rep_crc:08x}, {exp.basis} {exp_crc:08x}"
        return method, ""

    def report(self, outcomes: list) -> CertifyReport:
        certified = next((o for o in outcomes if isinstance(o, Certified)), None)
        rejected = [o for o in outcomes if isinstance(o, Rejection)]
        newest_src = None
        lag = None
        if self.source_found is not None and not self.source_error:
            try:
                for d in self.source_found.checkpoints:
                    view = _MetadataView(self, self.source)
                    if (
                        incomplete_reason(view, self.source_found.layout, d, self.source_found.pointers)
                        is None
                    ):
                        newest_src = d
                        break
            except StoreUnavailable as e:
                self.notes.append(f"newest source checkpoint unknown: {e}")
        if newest_src is not None and certified is not None and newest_src.newest is not None:
            lag = max(timedelta(0), newest_src.newest - certified.written_at)
            if newest_src.step == certified.step:
                lag = timedelta(0)
        if self.source_error:
            mode = "manifest-only-source-down"
        elif self.deep:
            mode = "deep"
        elif self.methods.get("streamed"):
            mode = "streaming"
        elif self.methods.get("manifest") or self.source is None:
            mode = "manifest"
        else:
            mode = "metadata"
        return CertifyReport(
            replica=self.replica.uri,
            source=self.source.uri if self.source is not None else None,
            at=self.at,
            layout=self.found.layout,
            mode=mode,
            certified=certified,
            rejected=rejected,
            rpo=None if certified is None else self._rpo(certified),
            replication_lag=lag,
            newest_source_step=None if newest_src is None else newest_src.step,
            source_error=self.source_error,
            calls=dict(sorted(self.calls.items())),
            object_bytes_read=self.object_bytes,
            metadata_bytes_read=self.metadata_bytes,
            notes=self.notes,
        )

    def _rpo(self, certified: Certified) -> timedelta:
        """`at` - the write time, never negative: a checkpoint written "after" the reference
        time means the clocks disagree, which a note says."""
        rpo = self.at - certified.written_at
        if rpo < timedelta(0):
            self.notes.append(
                f"clocks disagree: step {certified.step} was written {-rpo} after the reference time "
                f"({certified.written_at_basis}); RPO counted as 0"
            )
        return max(rpo, timedelta(0))


def inconsistent_record(checkpoint: str, marker: bytes | None) -> str | None:
    """Why `checkpoint`'s commit record disowns its state, or None: an emergency record (or
    any) saying `"consistent": false` or `"partial": true` is never certified, whatever its
    checksums say (every shard can be intact and still hold two ranks at two steps)."""
    try:
        doc = json.loads(marker) if marker else {}
    except ValueError:
        return None  # an unreadable marker is the lineage check's to judge
    if not isinstance(doc, dict):
        return None
    for record in (doc, doc.get("emergency") if isinstance(doc.get("emergency"), dict) else {}):
        if record.get("consistent") is False or record.get("partial") is True:
            return f"{checkpoint}: its commit record says its state is not consistent ({record.get('why', 'no reason given')})"
    return None


def _committed_at(marker: bytes | None) -> datetime | None:
    """The store's time of a guarded commit, from its marker (None: no marker, or an older one)."""
    if marker is None:
        return None
    try:
        when = json.loads(marker).get("committed_at")
        return datetime.fromisoformat(when) if when else None
    except (ValueError, TypeError, AttributeError):
        return None


def _from_source(src_dir: CheckpointDir, source) -> Iterator[_Expected]:
    plen = len(src_dir.prefix)
    for info in src_dir.files(source):
        yield _Expected(info.key[plen:], info.size, info.crc32c, info.etag, "source")


class _LazyManifest:
    """A checkpoint's manifest, fetched on first use and streamed (flat memory)."""

    def __init__(self, certifier: _Certifier, ckpt: CheckpointDir):
        self._c, self._ckpt = certifier, ckpt
        self.opened: dict | None = None  # the header, once read
        self._shards = None

    def _open(self):
        key = f"{self._ckpt.name}/{MANIFEST_NAME}"
        self.opened, self._shards = iter_manifest(
            self._c._metadata_chunks(self._c.replica, key),
            where=f"{self._c._uri(self._ckpt)}/{MANIFEST_NAME}",
        )

    def header(self) -> dict:
        if self.opened is None:
            self._open()
        return self.opened

    def shards(self):
        if self._shards is None:
            self._open()
        shards, self._shards = self._shards, iter(())
        return shards


class _ManifestFiller:
    """Fills CRC32Cs the source list lacks (S3) from the manifest, where sizes agree. Keys
    arrive in sorted order, so the manifest is streamed once, and only opened if needed."""

    def __init__(self, manifest: _LazyManifest):
        self._manifest, self._shards, self._shard = manifest, None, None

    def fill(self, exp: _Expected) -> None:
        if self._shards is None:
            self._shards = self._manifest.shards()
            self._shard = next(self._shards, None)
        while self._shard is not None and self._shard.path < exp.rel:
            self._shard = next(self._shards, None)
        shard = self._shard
        if shard is not None and shard.path == exp.rel and shard.size == exp.size:
            exp.crc, exp.basis = shard.crc32c, "manifest"


class _ReceiptFiller:
    """Gives a replica object the CRC32C its replication receipt recorded, when its listed
    ETag and size are still the receipt's (see core/checkpoints/receipt.py)."""

    def __init__(self, certifier: _Certifier, ckpt: CheckpointDir):
        self._c, self._ckpt = certifier, ckpt
        self._entries, self._entry = None, None

    def fill(self, exp: _Expected, rep: ObjectInfo) -> ObjectInfo:
        if self._entries is None:
            key = f"{self._ckpt.name}/{RECEIPT_NAME}"
            self._entries = iter_receipt(self._c._metadata_chunks(self._c.replica, key), where=key)
            self._entry = self._next()
        while self._entry is not None and self._entry.path < exp.rel:
            self._entry = self._next()
        e = self._entry
        if e is not None and e.path == exp.rel and e.size == rep.size and rep.etag and e.etag == rep.etag:
            exp.replica_basis = "receipt"
            return replace(rep, crc32c=e.crc32c)
        return rep

    def _next(self):
        """The next entry; a receipt that cannot be read is set aside (objects are HEADed
        instead), never trusted and never a reason to reject the checkpoint."""
        try:
            return next(self._entries, None)
        except ConfigError as e:
            self._c.notes.append(f"receipt ignored: {e}")
            self._entries = iter(())
            return None


def _site_lease(replica: Store, source: Store | None, sites=None, *, source_error: str | None = None):
    """The site state's lease (None: never fenced), read from `sites` (by role), by default
    with the replica the secondary's store and the source the primary's. A source known down
    (`source_error`) is not asked: its role is unknown. An inconclusive view is
    `SiteStateUnknown`: lineage cannot be judged, so nothing is certified."""
    from lifeboat_dr.core.sitestate import read_site_state, site_stores

    stores = dict(sites if sites is not None else site_stores(source, replica))
    if source is not None and source_error:
        down = source_error.splitlines()[0][:200]
        stores = {
            role: _Unasked(store, f"known down ({down})")
            if store is not None and store.uri == source.uri
            else store
            for role, store in stores.items()
        }
    return read_site_state(stores).lease


def _same_md5_etag(a: str | None, b: str | None) -> bool:
    return bool(a and a == b and _PLAIN_MD5.match(a))


def certify_replica(
    replica: Store,
    source: Store | None,
    *,
    layout: str = "auto",
    at: datetime | None = None,
    deep: bool = False,
    stream: bool = True,
    max_workers: int = 16,
    cache_limit: int = 20_000,
    older_than: int | None = None,
    lease=AUTO,
    sites=None,
    source_down: str | None = None,
    source_probe: Store | None = None,
    replicated_by: str = LIFEBOAT,
) -> CertifyReport:
    """Find the newest checkpoint on `replica` that is safe to resume from.

    `source` is the primary's store (None, or unreachable: manifests alone are used and the
    mode says so). `at` is the reference time for RPO (the outage; default now). `deep`
    streams every object; `stream=False` refuses to read shard bytes, so objects without a
    comparable checksum reject their checkpoint as unverifiable. `older_than=step` looks
    only at checkpoints below that step (rolling back past one that failed to resume).
    `lease` is the site state's lease (default: read from `sites`, the stores by role, by
    default the replica as the secondary's and the source as the primary's; it must be
    conclusive): a checkpoint not committed by the active lineage is rejected
    (`lifeboat_dr.core.sitestate`). `source_down`: why the source is known unreachable (the
    outage is confirmed): it is never asked, for checkpoints or the site state.
    `source_probe`: the source's store opened with the probe deadline (the same URI; in
    `sites` too, in the source's role): asked once while the replica is listed, and a
    source that does not answer it within that store's deadline is down, as with
    `source_down`, whatever its retries would still wait. `replicated_by="s3-crr"`:
    the bucket replicates (core/bucket_replication.py): an object counts only when the
    replica's HEAD reports it REPLICA (one HEAD per object judged). `"gcs-dual-region"`:
    one bucket is both sites' store: a checkpoint counts only when its youngest object is
    past the bucket's rpo bound by the store's clock (one bucket GET); a younger one is
    rejected as replicating, with `ready_in_s`."""
    at = at or datetime.now(UTC)
    c = _Certifier(
        replica,
        source,
        layout=str(getattr(layout, "value", layout)),
        at=at,
        deep=deep,
        stream=stream,
        max_workers=max_workers,
        cache_limit=cache_limit,
        lease=lease,
        sites=sites,
        source_down=source_down,
        source_probe=source_probe,
        replicated_by=replicated_by,
    )
    c.older_than = older_than
    outcomes = []
    for outcome in c.run():
        outcomes.append(outcome)
        if isinstance(outcome, Certified):
            break
    return c.report(outcomes)


def _listing_certifier(
    replica, source, layout, found, source_found, *, deep=False, stream=True, lease=AUTO, sites=None
) -> _Certifier:
    """A certifier that walks every checkpoint, reusing discoveries the caller already took."""
    c = _Certifier(
        replica,
        source,
        layout=str(getattr(layout, "value", layout)),
        at=datetime.now(UTC),
        deep=deep,
        stream=stream,
        max_workers=16,
        cache_limit=20_000,
        lease=lease,
        sites=sites,
    )
    c.given = (found, source_found)
    return c


def certified_checkpoints(
    replica: Store,
    source: Store | None,
    *,
    layout: str = "auto",
    deep: bool = False,
    stream: bool = True,
    found: Discovery | None = None,
    source_found: Discovery | None = None,
    lease=AUTO,
    sites=None,
) -> Iterator[Certified]:
    """Every certified checkpoint on the replica, newest first (for retention, and for
    rolling back to the previous certified one). `found` / `source_found`: discoveries of
    the replica / source the caller already took (lifeboat_dr.core.checkpoints.layouts.discover),
    so that neither is listed again."""
    c = _listing_certifier(
        replica, source, layout, found, source_found, deep=deep, stream=stream, lease=lease, sites=sites
    )
    for outcome in c.run():
        if isinstance(outcome, Certified):
            yield outcome


def certifiable_prefixes(
    replica: Store,
    source: Store | None,
    *,
    layout: str = "auto",
    want: int = 1,
    found: Discovery | None = None,
    source_found: Discovery | None = None,
    lease=AUTO,
    sites=None,
) -> tuple[list[str], str | None]:
    """The newest `want` checkpoints that certify (prefixes on the replica, newest first),
    and why the source could not be used, if it could not (retention deletes nothing then).
    `found` / `source_found` / `lease` / `sites` as for `certified_checkpoints`."""
    c = _listing_certifier(replica, source, layout, found, source_found, lease=lease, sites=sites)
    good: list[str] = []
    root = replica.uri.rstrip("/") + "/"
    for outcome in c.run():
        if c.source_error:
            break
        if isinstance(outcome, Certified):
            good.append(outcome.uri[len(root) :])
            if len(good) >= want:
                break
    return good, c.source_error


def newest_certified(replica: Store, source: Store | None, **kwargs) -> Certified | None:
    """The newest certified checkpoint, or None."""
    return next(certified_checkpoints(replica, source, **kwargs), None)


def verdict(report: CertifyReport, rpo_target: timedelta) -> int:
    """0: certified within the RPO target; 1: certified, target exceeded; 2: none certified."""
    if report.certified is None:
        return 2
    return 0 if report.rpo <= rpo_target else 1


def rpo_row(report: CertifyReport, rpo_target: timedelta) -> dict:
    """One row for the RPO table artifact and the breach event's payload."""
    c = report.certified
    return {
        "certified_step": None if c is None else c.step,
        "checkpoint": None if c is None else c.uri,
        "written_at": None if c is None else c.written_at.isoformat(),
        "rpo_s": None if report.rpo is None else round(report.rpo.total_seconds(), 3),
        "rpo_target_s": rpo_target.total_seconds(),
        "breached": verdict(report, rpo_target) != 0,
        "replication_lag_s": None
        if report.replication_lag is None
        else round(report.replication_lag.total_seconds(), 3),
        "mode": report.mode,
        "rejected": "; ".join(f"step {r.step}: {r.detail}" for r in report.rejected),
    }
