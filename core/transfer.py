"""The one copy engine: a prefix of one store into a prefix of another, verified end to end.

`copy_prefix` copies only what is missing or differs (size + CRC32C), in four phases:

1. plan     list both sides; HEAD (in parallel) only where a list gave no CRC32C. A
            Lifeboat manifest in the source supplies expected CRC32Cs without HEADs.
2. unmark   if anything must change under a destination that already holds a commit
            marker, the marker is deleted first: the old replica stops being "complete".
3. data     objects in parallel (bounded threads): server-side copy where the destination
            can (S3 CopyObject, GCS rewrite, local), otherwise streamed. Each byte is read
            once and hashed once: objects up to WHOLE_OBJECT_LIMIT are gathered into one
            buffer (reserved from the byte budget, providers/storage/buffers.py), hashed as
            they arrive, checked and sent in one request with their CRC32C; larger ones are
            handed to the store as a stream with the CRC32C they must have, which the store
            hashes part by part and checks before it commits (a local file to S3: as the
            open file, sent by ranges read from disk, providers/storage/files.py). Memory
            stays bounded by the budget whatever the sizes.
4. commit   commit markers (COMMIT_ORDER: manifest, DCP `.metadata`, `latest` pointers)
            last, in commit order, and only when every data object verified: a half-copied checkpoint is
            never complete on the destination.

Writes are conditional on the destination as planned (create-only where it held nothing,
if-match on the version listed where it held another object), on stores that honour
preconditions, streamed or server-side alike (`Store.server_copy` takes `put`'s
precondition: S3 CopyObject / CompleteMultipartUpload `If-None-Match` / `If-Match`, GCS
rewrite `ifGenerationMatch`, a local create-only link): a copy planned before another writer
(a failover's resumed job on its new active site) wrote there never lands over it; the
object is reported failed instead (`PreconditionFailed`: the object changed under the copy,
not an error of the store, never retried), and no marker follows. `before_commit()` runs
before the first write (unmark or data) and again before the markers, and raises to stop
(replication re-checks the site state there). Markers are always written by a conditional
PUT: the commit point rides on the precondition every S3-compatible store honours, where a
conditional CopyObject is newer.

Every object is checked against the source's CRC32C twice: over the bytes we read (a flipped
byte between source and us fails the stream before the destination commits it) and by the
destination, which receives that CRC32C with the bytes and verifies it (S3 BadDigest) or
reports its own (GCS, local); the write's answer is the object's metadata, so no HEAD
follows a write. A mismatch is retried like throttling; the object is never accepted.
Objects land atomically (local rename, single PUT or completed multipart, GCS upload), so a
copy killed mid-way leaves finished objects whole, and a rerun skips them. An object whose
key a store refuses (`RefusedKey`: a `..` or empty segment, a symlink leaving a local
store; providers/storage/base.py) is refused alone, in one line (`report.refused`), and its
checkpoint gets no commit marker: the other objects and checkpoints copy as ever. A source object
with no CRC32C anywhere (no metadata, no manifest) is the one case read twice: a first read
gives the reference a flipped byte in either read is caught against.
"""

from __future__ import annotations

import random
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Protocol, TypeVar

from lifeboat_dr.core.transfer_records import Destination, Landed, OutcomeNames, Outcomes, ShardTable
from lifeboat_dr.kernel.crc32c import crc32c_of
from lifeboat_dr.kernel.errors import (
    ChecksumMismatch,
    LifeboatError,
    NotFound,
    ProviderUnavailable,
    RefusedKey,
)
from lifeboat_dr.providers.storage.base import ObjectInfo, Store, join
from lifeboat_dr.providers.storage.buffers import (
    BUFFERS,
    gather,
    gather_cost,
    release_freed,
    tune_allocator,
)
from lifeboat_dr.providers.storage.local import LocalStore

# Basenames whose presence declares a checkpoint (or part of one) complete, in the order they
# are written: after every other object, deepest directory first, and within a directory the
# decisive one last (a Megatron torch_dist `.metadata` after its `common.pt`, the Lifeboat
# manifest after everything). Deletion goes the other way. They match what
# lifeboat_dr.core.checkpoints.layouts reads as completeness, so a reader never sees a partial copy
# as complete.
COMMIT_ORDER = (
    "common.pt",  # Megatron torch_dist
    "metadata.json",  # Megatron torch_dist
    "trainer_state.json",  # HF Trainer
    "model.safetensors",  # HF single-file checkpoint
    "model.safetensors.index.json",  # HF index naming its shards
    ".metadata",  # PyTorch DCP, written last by rank 0
    "latest_checkpointed_iteration.txt",  # Megatron / NeMo pointer to iter_NNNNNNN/
    "latest",  # DeepSpeed pointer to global_stepN/
    "lifeboat-commit.json",  # guarded-commit marker (lifeboat_dr.core.fencing.COMMIT_MARKER), before the manifest
    "lifeboat-manifest.json",  # Lifeboat manifest (lifeboat_dr.core.checkpoints.manifest.MANIFEST_NAME)
)


def commit_order(rel: str, markers: tuple[str, ...] = COMMIT_ORDER) -> tuple[int, int, str]:
    """Sort key writing markers in commit order (reverse it to delete them)."""
    return (-rel.count("/"), markers.index(_basename(rel)), rel)


# Objects up to this size (one read chunk) are gathered here, hashed and verified before one
# put; larger ones stream to the store with their size and the CRC32C they must have, and
# the store picks one request (S3: up to 16 MiB) or parts. Either way the bytes held in
# memory are reserved from the process's byte budget.
WHOLE_OBJECT_LIMIT = 1 << 20

# Objects in flight. Small files are latency-bound (a request each), so a copy tool keeps
# many going; memory does not grow with it (the byte budget bounds the bodies).
DEFAULT_CONCURRENCY = 32

T = TypeVar("T")
R = TypeVar("R")


class TransferIncomplete(ProviderUnavailable):
    """Some objects could not be copied; no commit marker was written. Rerun to resume."""

    def __init__(self, message: str, report: TransferReport):
        super().__init__(message)
        self.report = report


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter, for throttling (503 SlowDown, 429) and mismatches."""

    attempts: int = 8
    base_delay: float = 0.05  # seconds
    max_delay: float = 5.0
    sleep: Callable[[float], None] = time.sleep

    def call(self, fn: Callable[[], T], on_retry: Callable[[BaseException], None] | None = None) -> T:
        for attempt in range(self.attempts):
            try:
                return fn()
            except (ProviderUnavailable, ChecksumMismatch) as e:
                if attempt == self.attempts - 1:
                    raise
                if on_retry:
                    on_retry(e)
                self.sleep(random.uniform(0, min(self.max_delay, self.base_delay * 2**attempt)))
        raise AssertionError("unreachable")


class Progress(Protocol):
    """Receives progress from worker threads (must be thread-safe)."""

    def planned(self, objects: int, nbytes: int) -> None:
        """What the copy will move, known after the plan phase."""

    def advance(self, nbytes: int) -> None:
        """Bytes moved (streamed or server-copied) since the last call."""


# What became of a source object (`Outcomes` flags, one byte per object: core/transfer_records.py)
PLANNED, COPIED, SERVER_COPIED, SKIPPED, HASHED = 1, 2, 4, 8, 16
_MOVE, _NO_CRC = 32, 64  # the copy's own: to be moved; no CRC32C to copy against


@dataclass
class TransferReport:
    """What a `copy_prefix` did: relative keys per outcome, and bytes moved."""

    src: str
    dst: str
    # by position in the source's listing; the keys of each outcome are read from it again
    outcomes: Outcomes = field(default_factory=lambda: Outcomes(tuple, lambda: True))
    failed: dict[str, str] = field(default_factory=dict)  # key -> last error
    refused: dict[str, str] = field(default_factory=dict)  # of those, keys a store refuses -> its one line
    # what the destination holds, by relative key, with its CRC32C: objects written (from the
    # write's answer) and objects skipped whose CRC32C was compared (replication receipts);
    # kept in a temporary file, read in key order
    landed: Landed = field(default_factory=Landed)
    # the destination prefix as this copy left it, by relative key: its listing, less what
    # the copy deleted, plus what it wrote (an object whose copy failed is left out: unknown)
    destination: Mapping[str, ObjectInfo] = field(default_factory=dict)
    markers: list[str] = field(default_factory=list)  # commit markers written last
    source_written: datetime | None = None  # newest write among the source objects
    bytes_copied: int = 0
    bytes_skipped: int = 0
    retries: int = 0
    seconds: float = 0.0

    @property
    def copied(self) -> OutcomeNames:
        """Streamed through us, verified."""
        return self.outcomes.named(COPIED)

    @property
    def server_copied(self) -> OutcomeNames:
        """Copied inside the provider."""
        return self.outcomes.named(SERVER_COPIED)

    @property
    def skipped(self) -> OutcomeNames:
        """Already present with the same size and CRC32C."""
        return self.outcomes.named(SKIPPED)

    @property
    def hashed(self) -> OutcomeNames:
        """No source CRC32C anywhere: read twice (hashed first)."""
        return self.outcomes.named(HASHED)

    @property
    def planned(self) -> OutcomeNames:
        """What had to move (a dry run stops here)."""
        return self.outcomes.named(PLANNED)

    @property
    def complete(self) -> bool:
        return not self.failed

    @property
    def bytes_per_second(self) -> float:
        return self.bytes_copied / self.seconds if self.seconds else 0.0


@dataclass(frozen=True, slots=True)  # one per object in flight (the window), and per marker
class _Item:
    rel: str
    src: ObjectInfo
    expected_crc: int | None  # source CRC32C: metadata, HEAD or manifest
    position: int = -1  # in the source's listing


class _Objects:
    """The source's objects, without "directory" placeholders, iterable again and again in
    the same order: a discovery's listing is read back from its file for each pass rather
    than held (core/checkpoints/layouts.py)."""

    def __init__(self, listing: Iterable[ObjectInfo]):
        self._listing = listing

    def __iter__(self) -> Iterator[ObjectInfo]:
        return (info for info in self._listing if not info.key.endswith("/"))


def copy_prefix(
    src: Store,
    dst: Store,
    src_prefix: str,
    dst_prefix: str,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    progress: Progress | None = None,
    retry: RetryPolicy | None = None,
    markers: tuple[str, ...] = COMMIT_ORDER,
    server_side: bool = True,
    dry_run: bool = False,
    trust_committed: bool = True,
    sources: Iterable[ObjectInfo] | None = None,
    present: Iterable[ObjectInfo] | None = None,
    before_commit: Callable[[], None] | None = None,
) -> TransferReport:
    """Copy every object under `src_prefix/` of `src` to `dst_prefix/` of `dst`.

    Returns the report when every object is on the destination and verified; raises
    `TransferIncomplete` (retryable; carries the report) when some failed after retries,
    in which case no commit marker was written. `dry_run` plans (lists, HEADs) and stops:
    `report.planned` names what would move.

    `trust_committed`: a destination that already holds the source's commit markers (same
    size and CRC32C) and every object at its size is a replica this engine committed after
    verifying each object; it is skipped without a HEAD per object (a periodic run over
    replicated checkpoints costs two lists and a HEAD per marker). Rot at rest on the
    destination is certification's to find; pass False to compare every object again.

    `sources` / `present`: the source's objects under `src_prefix/` and the destination's
    under `dst_prefix/`, listed already (not listed again). `report.destination` is the
    destination's listing as the copy left it. `before_commit`: see the module docstring;
    what it raises propagates (nothing more is written)."""
    retry = retry or RetryPolicy()
    report = TransferReport(src=_uri(src, src_prefix), dst=_uri(dst, dst_prefix))
    lock = threading.Lock()
    started = time.monotonic()

    def count_retry(_: BaseException) -> None:
        with lock:
            report.retries += 1

    def refuse(rel: str, e: RefusedKey) -> None:
        with lock:
            report.refused[rel] = str(e)
            report.failed[rel] = f"{type(e).__name__}: {e}"
            report.destination.pop(rel, None)

    src_base, dst_base = _dir(src_prefix), _dir(dst_prefix)
    owned = sources is None or iter(sources) is sources  # a listing only this copy holds
    if sources is None:
        sources = retry.call(lambda: list(src.list(src_base)), count_retry)
    elif owned:  # a one-shot iterator: the copy reads its sources in passes
        sources = list(sources)
    sources = _Objects(sources)
    report.outcomes = Outcomes(
        lambda: (i.key[len(src_base) :] for i in sources), lambda: report.landed.in_key_order
    )
    flags = report.outcomes.flags
    if present is None:
        present = retry.call(lambda: list(dst.list(dst_base)), count_retry)
    present = {info.key[len(dst_base) :]: info for info in present}
    report.destination = Destination(present, report.landed)
    conditional = dst.capabilities.conditional_writes
    unmarked: set[str] = set()  # markers deleted before the data: their writes are create-only

    def condition(rel: str) -> dict:
        """The precondition `rel`'s write carries: what the destination held when planned. A
        fresh dict per object (its retries update it in place), derived, not kept per file."""
        if not conditional:
            return {}
        have = None if rel in unmarked else present.get(rel)
        return {"if_match": have.version} if have is not None else {"if_none_match": True}

    report.source_written = max((i.updated for i in sources), default=None)
    if trust_committed and _committed_replica(src, dst, src_base, sources, present, markers, retry):
        last = ""
        for info in sources:
            flags.append(SKIPPED)
            report.bytes_skipped += info.size
            if info.key < last:
                report.landed.in_key_order = False
            last = info.key
        return _done(report, started, owned)
    tune_allocator()  # before the per-file tables: their large buffers come from mmap
    manifest, broken = _manifest_shards(src, src_base, sources, markers, retry)
    for rel, problem in broken.items():
        if isinstance(problem, RefusedKey):
            refuse(rel, problem)
        else:
            report.failed[rel] = problem
    for rel in _unlisted(manifest, sources, src_base):
        report.failed[rel] = "named by the source's manifest but missing from the source"

    workers = max(1, concurrency)
    window = 2 * workers  # calls submitted ahead: every worker busy, a Future per call in flight only
    with ThreadPoolExecutor(max_workers=workers) as pool:
        # 1. plan
        def plan(at: tuple[int, ObjectInfo]) -> tuple[_Item, bool, int | None] | None:
            position, info = at
            rel = info.key[len(src_base) :]
            shard = manifest.get(rel)
            expected = info.crc32c
            if expected is None and shard is None and src.capabilities.crc32c_in_head:
                try:
                    expected = retry.call(lambda: src.head(info.key), count_retry).crc32c
                except RefusedKey as e:
                    refuse(rel, e)
                    return None
            problem = _contradicts(info, expected, shard)
            if problem:
                with lock:
                    report.failed[rel] = problem
                return None
            item = _Item(rel, info, shard[1] if shard else expected, position)
            return item, *_same(dst, join(dst_prefix, rel), present.get(rel), item, retry, count_retry)

        # Streamed: each object's outcome is a flag at its position (`flags`); of what must
        # move only that and the expected CRC32C are kept (the copy reads the listing
        # again); markers wait until the data is known.
        expected = array("I")  # by position: the CRC32C to copy against (unless _NO_CRC)
        moving = moving_bytes = 0
        marks: list[tuple[_Item, bool, int | None]] = []
        last_rel = ""

        def skip(item: _Item, dst_crc: int | None) -> None:
            flags[item.position] |= SKIPPED
            report.bytes_skipped += item.src.size
            if dst_crc is not None:
                report.landed.add(item.position, item.rel, replace(present[item.rel], crc32c=dst_crc))

        for planned in _bounded(pool, plan, enumerate(sources), window, ordered=True):
            flags.append(0)
            expected.append(0)
            if planned is None:
                continue
            item, same, dst_crc = planned
            if item.rel < last_rel:
                report.landed.in_key_order = False
            last_rel = item.rel
            if _basename(item.rel) in markers:
                marks.append(planned)
            elif same:
                skip(item, dst_crc)
            else:
                flags[-1] = PLANNED | _MOVE | (_NO_CRC if item.expected_crc is None else 0)
                expected[-1] = item.expected_crc or 0
                moving, moving_bytes = moving + 1, moving_bytes + item.src.size
        manifest = None  # planned: the data phase needs only `expected`
        # Any data change re-commits every marker; otherwise only markers that differ.
        commit = sorted(
            (i for i, same, _ in marks if moving or not same), key=lambda i: commit_order(i.rel, markers)
        )
        for item, same, dst_crc in marks:
            if not (moving or not same):
                skip(item, dst_crc)
        for item in commit:
            flags[item.position] |= PLANNED
        report.landed.reserve(len(flags))
        release_freed()  # the plan's tables and transients, before the data's bodies
        if dry_run:
            return _done(report, started, owned)
        if progress:
            progress.planned(moving + len(commit), moving_bytes + sum(i.src.size for i in commit))

        # 2. unmark: an existing marker must not vouch for data about to change
        unmark = [r for r in present if _basename(r) in markers] if moving else []
        if moving and before_commit is not None:  # planning took a while: check before writing
            before_commit()
        for rel in sorted(unmark, key=lambda r: commit_order(r, markers), reverse=True):
            report.destination.pop(rel)  # unknown until the delete answers
            retry.call(lambda rel=rel: dst.delete(join(dst_prefix, rel)), count_retry)
            unmarked.add(rel)

        # 3. data, in parallel
        def copy_one(item: _Item, marker: bool = False) -> None:
            cond = condition(item.rel)
            direct = server_side and not (marker and cond)  # a marker: a conditional PUT (see above)
            try:
                how, info = retry.call(
                    lambda: _copy_object(src, dst, item, join(dst_prefix, item.rel), direct, progress, cond),
                    count_retry,
                )
            except RefusedKey as e:
                refuse(item.rel, e)
                return
            except (LifeboatError, OSError) as e:
                with lock:
                    report.failed[item.rel] = f"{type(e).__name__}: {e}"
                    report.destination.pop(item.rel, None)  # old, new or deleted: unknown
                return
            with lock:
                flags[item.position] |= SERVER_COPIED if how == "server" else COPIED
                report.bytes_copied += item.src.size
                report.landed.add(item.position, item.rel, info)
                if item.expected_crc is None and how == "stream":
                    flags[item.position] |= HASHED

        def data() -> Iterator[_Item]:
            """What must move, from the listing read again (only positions were kept)."""
            for position, info in enumerate(sources):
                if position < len(flags) and flags[position] & _MOVE:
                    crc = None if flags[position] & _NO_CRC else expected[position]
                    yield _Item(info.key[len(src_base) :], info, crc, position)

        for _ in _bounded(pool, copy_one, data() if moving else (), window, ordered=False):
            pass

    # 4. commit markers, deepest first, only over a complete copy
    if not report.failed and commit and before_commit is not None:
        before_commit()
    if not report.failed:
        for item in commit:
            copy_one(item, marker=True)
            if report.failed:
                break
            report.markers.append(item.rel)
    _done(report, started, owned)
    if report.failed:
        first = next(iter(sorted(report.failed.items())))
        rerun = "rerun to resume" if set(report.failed) - set(report.refused) else "not replicated"
        raise TransferIncomplete(
            f"{report.src} -> {report.dst}: {len(report.failed)} object(s) failed "
            f"(first: {first[0]}: {first[1]}); no commit marker written, {rerun}",
            report,
        )
    return report


def _done(report: TransferReport, started: float, owned: bool) -> TransferReport:
    """The report, timed; its outcomes keep their own keys when no caller holds the listing."""
    if owned:
        report.outcomes.detach()
    report.seconds = time.monotonic() - started
    return report


def _bounded(
    pool: ThreadPoolExecutor, fn: Callable[[T], R], items: Iterable[T], window: int, *, ordered: bool
) -> Iterator[R]:
    """`pool.map` with at most `window` calls submitted ahead: `pool.map` submits every call
    up front, a Future per object held for the whole copy. `ordered`: results in the order
    of `items`; otherwise as they finish (a large object does not hold back the window).
    What a call raises propagates; the calls not started yet are cancelled."""
    pending: deque[Future[R]] | set[Future[R]] = deque() if ordered else set()
    add = pending.append if ordered else pending.add
    try:
        for x in items:
            add(pool.submit(fn, x))
            while len(pending) >= window:
                yield from _finished(pending, ordered)
        while pending:
            yield from _finished(pending, ordered)
    finally:
        for f in pending:
            f.cancel()


def _finished(pending, ordered: bool) -> Iterator:
    """The next result in order, or every result finished by now (at least one)."""
    if ordered:
        yield pending.popleft().result()
        return
    done, _ = wait(pending, return_when=FIRST_COMPLETED)
    for f in done:
        pending.discard(f)
        yield f.result()


def _copy_object(
    src: Store,
    dst: Store,
    item: _Item,
    dst_key: str,
    server_side: bool,
    progress: Progress | None,
    cond: dict | None = None,
) -> tuple[str, ObjectInfo]:
    """One attempt at one object; raises ChecksumMismatch / ProviderUnavailable to retry.
    Returns how it went ("server" or "stream") and what landed. The write, server-side or
    streamed, carries `cond` (its precondition: `if_none_match` / `if_match`); a landed object
    that fails its check is deleted, so a retry of it is create-only (`cond` is updated in place).

    A server-side copy never passes bytes through us; without a source CRC32C it rests on
    the provider's own copy (S3 keeps the source's checksum, GCS rewrite its crc32c)."""
    if server_side and dst.capabilities.server_side_copy:
        info = dst.server_copy(src, item.src.key, dst_key, **(cond or {}))
        if info is not None:
            _check_landed(dst, dst_key, info, item, item.expected_crc, cond)
            if progress:
                progress.advance(item.src.size)
            return "server", info
    if item.expected_crc is None:
        # Unverifiable by metadata: a first read gives the reference the copy is checked
        # against (a flipped byte in either read fails the attempt; never a silent pass).
        item = replace(item, expected_crc=crc32c_of(src.read(item.src.key)))
    seen = _Seen()
    try:
        chunks = _counted(src.read(item.src.key), item, seen, progress)
        if item.src.size <= WHOLE_OBJECT_LIMIT:
            # Small objects (usually one chunk, so not copied): hashed as they are gathered,
            # verified in full before a byte is sent, then one request carrying their CRC32C
            # (no second hash in the store).
            with BUFFERS.held(gather_cost(item.src.size)):
                body, crc = gather(chunks, item.src.size, item.src.key)
                if crc != item.expected_crc:
                    raise ChecksumMismatch(
                        f"{item.src.key}: CRC32C of the bytes read is {crc:08x}, "
                        f"source has {item.expected_crc:08x}"
                    )
                info = dst.put(dst_key, body, crc32c=crc, **(cond or {}))
        elif dst.capabilities.file_parts and isinstance(src, LocalStore):
            # A local file to a store that sends it by ranges read from disk as they go out
            # (providers/storage/files.py): no part held in memory, many parts in flight;
            # each byte hashed once before it is sent, the whole checked as below.
            with src.file(item.src.key, item.src.size, lambda n: _advance(seen, progress, n)) as f:
                info = dst.put(dst_key, f, crc32c=item.expected_crc, size=item.src.size, **(cond or {}))
        else:
            # Larger objects: the store hashes each byte once as it fills its request bodies,
            # and refuses to commit unless the whole equals the source's CRC32C.
            info = dst.put(dst_key, chunks, crc32c=item.expected_crc, size=item.src.size, **(cond or {}))
        _check_landed(dst, dst_key, info, item, item.expected_crc, cond)
    except BaseException:
        if progress and seen.size:
            progress.advance(-seen.size)  # this attempt's bytes are discarded
        raise
    return "stream", info


@dataclass
class _Seen:
    size: int = 0


def _advance(seen: _Seen, progress: Progress | None, n: int) -> None:
    """`n` more bytes of the object read (a local file's reads: sizes are its own check)."""
    seen.size += n
    if progress:
        progress.advance(n)


def _counted(chunks: Iterable[bytes], item: _Item, seen: _Seen, progress: Progress | None) -> Iterator[bytes]:
    """Pass chunks through, counting them; a source that yields another size than it
    listed fails the stream (before the store can commit it)."""
    read = 0
    for chunk in chunks:
        read += len(chunk)
        if read > item.src.size:
            break
        seen.size = read
        if progress:
            progress.advance(len(chunk))
        yield chunk
    if read != item.src.size:
        raise ChecksumMismatch(f"{item.src.key}: read {read} bytes, source has {item.src.size}")


def _check_landed(
    dst: Store, dst_key: str, info: ObjectInfo, item: _Item, crc: int | None, cond: dict | None = None
) -> None:
    """The destination's own CRC32C must match what the source holds; otherwise delete, and
    the object is ours to write again: its retry is create-only (`cond`, updated in place)."""
    landed = info.crc32c
    if landed is None and dst.capabilities.crc32c_in_head:
        landed = dst.head(dst_key).crc32c
    if landed is None and crc is not None:  # unverifiable by metadata: never a silent pass
        landed = crc32c_of(dst.read(dst_key))
    bad = info.size != item.src.size or (crc is not None and landed is not None and landed != crc)
    if bad:
        dst.delete(dst_key)
        if cond:
            cond.clear()
            cond["if_none_match"] = True
        raise ChecksumMismatch(
            f"{dst_key}: destination holds {info.size} bytes CRC32C {_hex(landed)}, "
            f"source {item.src.size} bytes CRC32C {_hex(crc)}"
        )


def _committed_replica(
    src: Store,
    dst: Store,
    src_base: str,
    sources: Iterable[ObjectInfo],
    present: dict[str, ObjectInfo],
    markers: tuple[str, ...],
    retry: RetryPolicy,
) -> bool:
    """The destination holds every source object at its size and the very same commit markers
    (a marker whose key a store refuses: not such a replica; the full plan names it)."""
    marks = [i for i in sources if _basename(i.key) in markers]
    if not marks:
        return False
    for info in sources:
        have = present.get(info.key[len(src_base) :])
        if have is None or have.size != info.size:
            return False
    try:
        for info in marks:
            have = present[info.key[len(src_base) :]]
            src_crc = info.crc32c
            if src_crc is None and src.capabilities.crc32c_in_head:
                src_crc = retry.call(lambda info=info: src.head(info.key)).crc32c
            dst_crc = have.crc32c
            if dst_crc is None and dst.capabilities.crc32c_in_head:
                dst_crc = retry.call(lambda have=have: dst.head(have.key)).crc32c
            if src_crc is None or src_crc != dst_crc:
                return False
    except RefusedKey:
        return False
    return True


def _unlisted(manifest: ShardTable, sources: Iterable[ObjectInfo], base: str) -> list[str]:
    """Objects a manifest names that the source does not hold (a byte per shard, held only
    here)."""
    if not len(manifest):
        return []
    listed = bytearray(len(manifest))
    for info in sources:
        if info.key.startswith(base) and (i := manifest.index(info.key[len(base) :])) is not None:
            listed[i] = 1
    # of a path named twice, the later entry is the one looked up
    return sorted(
        {p for p, seen in zip(manifest, listed, strict=True) if not (seen or listed[manifest.index(p)])}
    )


def _contradicts(info: ObjectInfo, crc: int | None, shard: tuple[int, int] | None) -> str | None:
    """Why the source object disagrees with its own manifest (size, CRC32C): a corrupt source."""
    if shard is None:
        return None
    size, shard_crc = shard
    if info.size != size:
        return f"source holds {info.size} bytes, its manifest says {size}: not replicated"
    if crc is not None and crc != shard_crc:
        return f"source CRC32C {crc:08x} differs from its manifest's {shard_crc:08x}: not replicated"
    return None


def _same(
    dst: Store, dst_key: str, have: ObjectInfo | None, item: _Item, retry: RetryPolicy, on_retry
) -> tuple[bool, int | None]:
    """Whether the destination already holds the object, and its CRC32C when compared."""
    if have is None or have.size != item.src.size:
        return False, None
    if item.expected_crc is None:
        # No CRC32C for the source (e.g. S3's default CRC64NVME, no manifest): hashing it on
        # every run would read the whole checkpoint each time. A same-size copy written after
        # the source's last write was verified when it was made (see _copy_object), and
        # checkpoint objects are immutable, so it stands.
        return have.updated >= item.src.updated, have.crc32c
    crc = have.crc32c
    if crc is None and dst.capabilities.crc32c_in_head:
        try:
            crc = retry.call(lambda: dst.head(dst_key), on_retry).crc32c
        except (NotFound, RefusedKey):  # gone, or a link leaving a local store: the write replaces it
            return False, None
    # Without a CRC32C on the destination "same size" proves nothing: copy again.
    same = crc is not None and crc == item.expected_crc
    return same, crc if same else None


def _manifest_shards(
    src: Store, base: str, sources: Iterable[ObjectInfo], markers: tuple[str, ...], retry: RetryPolicy
) -> tuple[ShardTable, dict[str, str]]:
    """Shards named by the Lifeboat manifests in the source (relative path -> size, CRC32C),
    and manifests that cannot be read (relative path -> why). A manifest gives the expected
    CRC32C without a HEAD per object on stores whose list carries none (S3), and lets the
    copy refuse a source that contradicts its own manifest. Each is parsed as it streams in
    (`iter_manifest`), into a compact table. A manifest whose key a store refuses is given
    as the `RefusedKey` itself."""
    from lifeboat_dr.core.checkpoints.manifest import MANIFEST_NAME, iter_manifest

    shards = ShardTable()
    broken: dict[str, str | RefusedKey] = {}
    if MANIFEST_NAME not in markers:
        return shards, broken
    for info in sources:
        rel = info.key[len(base) :]
        if _basename(rel) != MANIFEST_NAME:
            continue
        folder, before = rel[: -len(MANIFEST_NAME)], len(shards)

        def parse(key: str = info.key, folder: str = folder, before: int = before) -> None:
            shards.truncate(before)  # an attempt that broke off mid-way: start it over
            _, listed = iter_manifest(src.read(key), where=key)
            for s in listed:
                shards.add(folder + s.path, s.size, s.crc32c)

        try:
            retry.call(parse)
        except RefusedKey as e:
            shards.truncate(before)
            broken[rel] = e
        except LifeboatError as e:
            shards.truncate(before)
            broken[rel] = f"{type(e).__name__}: {e}"
    shards.seal()
    return shards, broken


def _dir(prefix: str) -> str:
    return prefix.strip("/") + "/" if prefix.strip("/") else ""


def _basename(rel: str) -> str:
    return rel.rsplit("/", 1)[-1]


def _uri(store: Store, prefix: str) -> str:
    return join(store.uri, prefix) if prefix else store.uri


def _hex(value: int | None) -> str:
    return "unknown" if value is None else f"{value:08x}"
