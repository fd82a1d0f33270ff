"""Torn files, given away by their own format from a few ranged reads (never a whole shard).

A commit marker says the save finished; it cannot say that every byte of every file reached
the disk (a tail lost by a network filesystem, a file cut short and copied on). Two formats
close themselves at their end, so a file cut short no longer adds up:

- a `torch.save` file is a zip: its end-of-central-directory record is the file's last 22
  bytes (torch writes no comment), preceded by the zip64 locator and record torch always
  writes, and the central directory ends exactly where those records begin. One read of the
  last 98 bytes; a file with no record there is read once more at its head, and judged only
  when it starts as a zip (a legacy, pre-zip `torch.save` pickle is not judged);
- a `.safetensors` file is 8 bytes of little-endian header length, a JSON header, then the
  tensors, the last one ending exactly at the file's end. Two reads: the length, the header.

`torn_file` picks the check by file name, for every layout: `.safetensors` always, the
`.pt` / `.pth` of any framework, and `.bin` where the layout's framework writes it with
`torch.save` (HF `pytorch_model.bin`, `training_args.bin`). Other files (DCP `.distcp`,
whose sizes `.metadata` vouches for; numpy, raw shards) are not judged here.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterable, Iterator

from lifeboat_dr.kernel.errors import NotFound
from lifeboat_dr.providers.storage.base import ObjectInfo, Store

MAX_SMALL_FILE = 64 << 20  # indexes, trainer states, safetensors headers (spec: 100 MB max)
_ZIP_HEAD = b"PK\x03\x04"
_EOCD, _EOCD_SIZE = b"PK\x05\x06", 22
_LOCATOR, _LOCATOR_SIZE = b"PK\x06\x07", 20
_EOCD64, _EOCD64_SIZE = b"PK\x06\x06", 56
_TAIL = _EOCD64_SIZE + _LOCATOR_SIZE + _EOCD_SIZE  # what torch.save writes last
_MAX_COMMENT = 0xFFFF
_TORCH_BIN_LAYOUTS = ("hf", "hf-weights")

Check = Callable[[Store, ObjectInfo], "str | None"]


def torn_file(
    store: Store,
    files: Iterable[ObjectInfo],
    layout: str,
    map: Callable[[Callable, Iterable], Iterator] = map,  # noqa: A002 - a pool's map, for parallel reads
) -> str | None:
    """The first (by key) of `files` whose format says it was cut short, as one line naming
    it; None when every file the layout's formats cover adds up."""
    checks = [(info, check) for info in files if (check := _check_for(layout, info.key)) is not None]
    problems = map(lambda pair: _judge(store, *pair), checks)
    return next((p for p in problems if p is not None), None)


def _check_for(layout: str, key: str) -> Check | None:
    name = key.rsplit("/", 1)[-1]
    if name.endswith(".safetensors"):
        # a save_pretrained directory has no commit marker: its protocol reads every weight
        # file's header already (core/checkpoints/protocols.py)
        return None if layout == "hf-weights" else safetensors_problem
    if name.endswith((".pt", ".pth")) or (name.endswith(".bin") and layout in _TORCH_BIN_LAYOUTS):
        return torch_zip_problem
    return None


def _judge(store: Store, info: ObjectInfo, check: Check) -> str | None:
    try:
        return check(store, info)
    except NotFound:
        return f"{info.key}: vanished while being read"


def torch_zip_problem(store: Store, info: ObjectInfo) -> str | None:
    """Why a `torch.save` zip does not add up to its size (cut short), or None."""
    where, size = info.key, info.size
    start = max(0, size - _TAIL)
    tail = _read(store, info.key, start, size)
    end = _end_record(tail, start, size)
    if end is None:
        if _read(store, info.key, 0, len(_ZIP_HEAD)) != _ZIP_HEAD:
            return None  # not a zip: the legacy torch.save format, or not torch's at all
        start = max(0, size - _EOCD_SIZE - _MAX_COMMENT)
        tail = _read(store, info.key, start, size)
        end = _end_record(tail, start, size)
        if end is None:
            return f"{where}: a torch.save zip whose {size} bytes end without its end-of-central-directory record: torn"
    pos, record = end
    _, disk, _, _, entries, cd_size, cd_offset, _ = struct.unpack("<IHHHHIIH", record)
    closes_at = pos  # where the central directory must end
    locator = _at(tail, start, store, info, pos - _LOCATOR_SIZE, _LOCATOR_SIZE)
    if locator[:4] == _LOCATOR:
        (record64_at,) = struct.unpack("<Q", locator[8:16])
        record64 = _at(tail, start, store, info, record64_at, _EOCD64_SIZE)
        if len(record64) < _EOCD64_SIZE or record64[:4] != _EOCD64:
            return f"{where}: its zip64 end record is not where its locator says ({record64_at}): torn"
        (length,) = struct.unpack("<Q", record64[4:12])
        if record64_at + 12 + length != pos - _LOCATOR_SIZE:
            return f"{where}: its zip64 end record does not reach its locator: torn"
        entries, cd_size, cd_offset = struct.unpack("<QQQ", record64[32:56])
        closes_at = record64_at
    if disk != 0 or entries == 0:
        return f"{where}: not a single-file zip with entries ({entries} entries, disk {disk})"
    if cd_offset + cd_size != closes_at:
        return (
            f"{where}: its zip central directory ({cd_size} bytes at {cd_offset}) does not end where "
            f"its end record begins ({closes_at}) in {size} bytes: torn"
        )
    return None


def _end_record(tail: bytes, start: int, size: int) -> tuple[int, bytes] | None:
    """(offset, bytes) of the end-of-central-directory record closing the file exactly
    (its comment running to the last byte), searching back from the end; None if none."""
    i = len(tail)
    while (i := tail.rfind(_EOCD, 0, i)) >= 0:
        record = tail[i : i + _EOCD_SIZE]
        if len(record) == _EOCD_SIZE and start + i + _EOCD_SIZE + struct.unpack("<H", record[20:])[0] == size:
            return start + i, record
    return None


def _at(tail: bytes, start: int, store: Store, info: ObjectInfo, offset: int, n: int) -> bytes:
    """`n` bytes at `offset`: from the tail already read, else one more ranged read."""
    if offset >= start and offset + n <= start + len(tail):
        return tail[offset - start : offset - start + n]
    if offset < 0 or offset + n > info.size:
        return b""
    return _read(store, info.key, offset, offset + n)


def safetensors_problem(store: Store, info: ObjectInfo) -> str | None:
    """A safetensors file is 8 bytes of header length, a JSON header, then the data its
    tensors' offsets end at: a file of any other size was cut short (or padded)."""
    where = info.key
    if info.size < 8:
        return f"{where}: {info.size} bytes, shorter than a safetensors header"
    (n,) = struct.unpack("<Q", _read(store, info.key, 0, 8))
    if n > MAX_SMALL_FILE or 8 + n > info.size:
        return (
            f"{where}: header length {n} does not fit in its {info.size} bytes: truncated or not safetensors"
        )
    try:
        header = json.loads(_read(store, info.key, 8, 8 + n))
        end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
        return f"{where}: unreadable safetensors header ({type(e).__name__}: {e})"
    if 8 + n + end != info.size:
        return f"{where}: holds {info.size} bytes, its header accounts for {8 + n + end}: truncated"
    return None


def _read(store: Store, key: str, start: int, end: int) -> bytes:
    return b"".join(store.read(key, start, end))
