"""Replication receipts: what the replica held, checksum and ETag, right after the copy.

S3 lists no checksum values, so certifying an S3 replica costs one HEAD per object. A
receipt moves that cost from the incident to replication time: after copying a checkpoint,
the replicator writes `lifeboat-receipt.jsonl` (one JSON object per line: path, size, etag,
crc32c) from what the copy already knows (each write's answer, each compared object), with
no request per object; without that knowledge it HEADs each replica object once. At certification, an object whose listed
ETag and size equal the receipt's is the very object S3 checksummed when it was written
(any overwrite changes the ETag), so the receipt's CRC32C stands for it without a HEAD; an
object whose ETag moved is HEADed as usual. Lines are sorted by path and read as a stream.
"""

from __future__ import annotations

import codecs
import json
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from lifeboat_dr.core.transfer_records import sorted_items
from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.providers.storage.base import ObjectInfo, Store, join

RECEIPT_NAME = "lifeboat-receipt.jsonl"


@dataclass(frozen=True)
class ReceiptEntry:
    path: str  # relative to the checkpoint directory
    size: int
    etag: str
    crc32c: int


def write_receipt(
    replica: Store, directory: str, known: Mapping[str, ObjectInfo] | None = None
) -> ObjectInfo:
    """Record every object of `directory/` on the replica; returns the receipt as it landed.

    `known` (path relative to `directory` -> the replica object's metadata, as a copy's
    writes answered it) is written as is: no list, no HEAD. Without it the directory is
    listed and each object HEADed. Objects without a comparable CRC32C or an ETag are left
    out (certification HEADs or streams them)."""
    if known is not None:
        return _put_lines(
            replica,
            join(directory, RECEIPT_NAME),
            (_line(path, info) for path, info in sorted_items(known) if path != RECEIPT_NAME),
        )
    else:
        plen = len(directory.rstrip("/")) + 1
        infos = [i for i in replica.list(f"{directory.rstrip('/')}/") if i.key[plen:] != RECEIPT_NAME]

        def line(info) -> str | None:
            head = info if info.crc32c is not None and info.etag else replica.head(info.key)
            return _line(info.key[plen:], head)

        with ThreadPoolExecutor(16) as pool:  # one HEAD per object (S3), in flight together
            lines = list(pool.map(line, infos))
    return _put_lines(replica, join(directory, RECEIPT_NAME), lines)


def _put_lines(replica: Store, key: str, lines: Iterable[str | None]) -> ObjectInfo:
    """One object of the lines (None: left out), each ended by a newline; gathered in an
    unnamed temporary file, not in memory (a receipt of 100,000 objects is ~10 MB), then
    streamed to the store with its size (the store hashes it, once)."""
    with tempfile.TemporaryFile() as f:
        for line in lines:
            if line is not None:
                f.write(line.encode() + b"\n")
        if not f.tell():
            f.write(b"\n")  # no line: the receipt of nothing is one empty line, as ever
        size = f.tell()
        f.seek(0)
        return replica.put(key, iter(lambda: f.read(1 << 20), b""), size=size)


def _line(path: str, info: ObjectInfo) -> str | None:
    if info.crc32c is None or not info.etag:
        return None
    entry = {"path": path, "size": info.size, "etag": info.etag, "crc32c": f"{info.crc32c:08x}"}
    return json.dumps(entry, separators=(",", ":"))


def iter_receipt(chunks: Iterable[bytes], where: str = "receipt") -> Iterator[ReceiptEntry]:
    decoder = codecs.getincrementaldecoder("utf-8")()
    pending = ""
    for chunk in _with_end(chunks):
        pending += decoder.decode(chunk, final=chunk == b"")
        *lines, pending = pending.split("\n")
        for line in lines:
            if line.strip():
                yield _entry(line, where)
    if pending.strip():
        yield _entry(pending, where)


def _with_end(chunks: Iterable[bytes]) -> Iterator[bytes]:
    for chunk in chunks:
        yield bytes(chunk)
    yield b""


def _entry(line: str, where: str) -> ReceiptEntry:
    try:
        d = json.loads(line)
        return ReceiptEntry(d["path"], int(d["size"]), str(d["etag"]), int(d["crc32c"], 16))
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"{where}: not a valid replication receipt line {line[:80]!r} ({e})") from None
