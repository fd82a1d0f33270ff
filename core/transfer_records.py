"""What a copy keeps per file, held compactly: its memory stays flat in the number of files.

A Python object per file costs 70-400 bytes (a str, an `ObjectInfo` with its strings and
datetime, a dict entry): at 100,000 files that alone is more than the whole process may hold
(#31: 100 MiB). So the copy engine (core/transfer.py) keeps:

- `Outcomes`: what became of each source object (planned, copied, skipped, ...) as one byte
  per position in the source's listing; the keys of an outcome are read from the listing
  again (a discovery's, held for the run anyway), never kept (~50 bytes a file as `Names`);
- `Names`: keys in one buffer with an offset each (~25 bytes a key, against ~80 for a list
  of str), for what a copy cannot read again from its caller's listing;
- `ShardTable`: what the source's manifests say (path -> size, CRC32C), sorted, in a
  buffer and two arrays, looked up by bisection (a `Shard` per file was ~210 bytes);
- `Landed`: what the destination holds after the copy (each write's answer, each compared
  object), as JSON lines in an unnamed temporary file, read back in key order: the receipt
  is written from it and the standby's listing (`Destination`) is handed on from it.
"""

from __future__ import annotations

import json
import os
import tempfile
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime

from lifeboat_dr.providers.storage.base import ObjectInfo


class _KeyList(Sequence[str]):
    """Keys that compare equal to a list of the same keys (reports are compared with lists),
    concatenate into a list and print as one."""

    __slots__ = ()

    def __eq__(self, other) -> bool:
        if isinstance(other, _KeyList | list | tuple):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # mutable, like a list

    def __add__(self, other: Iterable[str]) -> list[str]:
        return [*self, *other]

    def __radd__(self, other: Iterable[str]) -> list[str]:
        return [*other, *self]

    def __repr__(self) -> str:
        return repr(list(self))


class Names(_KeyList):
    """A list of keys in one buffer: append, index, iterate, sort; equal to a list of the same
    keys."""

    __slots__ = ("_buf", "_ends")

    def __init__(self, names: Iterable[str] = ()):
        self._buf = bytearray()
        self._ends = array("q")
        for name in names:
            self.append(name)

    def append(self, name: str) -> None:
        self._buf += name.encode("utf-8", "surrogatepass")
        self._ends.append(len(self._buf))

    def truncate(self, n: int) -> None:
        """Keep the first `n` keys."""
        if n < len(self._ends):
            del self._buf[self._ends[n - 1] if n else 0 :]
            del self._ends[n:]

    def sort(self) -> None:
        if any(self[i] > self[i + 1] for i in range(len(self) - 1)):
            names = sorted(self)
            self._buf, self._ends = bytearray(), array("q")
            for name in names:
                self.append(name)

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self._ends)
        if not 0 <= i < len(self._ends):
            raise IndexError("Names index out of range")
        start = self._ends[i - 1] if i else 0
        return self._buf[start : self._ends[i]].decode("utf-8", "surrogatepass")


class Outcomes:
    """What became of each object of a source listing, a byte of flags per position (in
    listing order). `named(flag)` is the keys with that flag, read from `names` (a callable
    giving each position's key, in listing order) whenever they are asked for."""

    def __init__(self, names: Callable[[], Iterable[str]], in_key_order: Callable[[], bool]):
        self.flags = bytearray()
        self._names, self._in_key_order = names, in_key_order

    def named(self, flag: int) -> OutcomeNames:
        return OutcomeNames(self, flag)

    def keys(self, flag: int) -> Iterator[str]:
        picked = (rel for rel, f in zip(self._names(), self.flags, strict=False) if f & flag)
        return picked if self._in_key_order() else iter(sorted(picked))

    def count(self, flag: int) -> int:
        return self.flags.translate(bytes(int(bool(b & flag)) for b in range(256))).count(1)

    def detach(self) -> None:
        """Keep the keys that have an outcome (as `Names`), not the listing they came from:
        for a listing the copy took itself, which no caller holds."""
        names, flags, ordered = Names(), bytearray(), self._in_key_order()
        for rel, f in zip(self._names(), self.flags, strict=False):
            if f:
                names.append(rel)
                flags.append(f)
        self.flags, self._names, self._in_key_order = flags, lambda: names, lambda: ordered


class OutcomeNames(_KeyList):
    """The keys with one outcome, in key order: a view of `Outcomes`, equal to a list of the
    same keys."""

    __slots__ = ("_outcomes", "_flag")

    def __init__(self, outcomes: Outcomes, flag: int):
        self._outcomes, self._flag = outcomes, flag

    def __iter__(self) -> Iterator[str]:
        return self._outcomes.keys(self._flag)

    def __len__(self) -> int:
        return self._outcomes.count(self._flag)

    def __getitem__(self, i):
        return list(self)[i]


class ShardTable:
    """Relative path -> (size, CRC32C) of every shard the manifests name. When a path is
    named twice, the later entry counts (as a dict update would)."""

    def __init__(self):
        self.paths = Names()
        self._sizes = array("q")
        self._crcs = array("I")
        self._sorted = True

    def add(self, path: str, size: int, crc32c: int) -> None:
        if self._sorted and self.paths and path < self.paths[-1]:
            self._sorted = False
        self.paths.append(path)
        self._sizes.append(size)
        self._crcs.append(crc32c)

    def truncate(self, n: int) -> None:
        """Drop what was added after the first `n` (a manifest whose read failed mid-way)."""
        self.paths.truncate(n)
        del self._sizes[n:]
        del self._crcs[n:]

    def seal(self) -> None:
        """Sorted for lookups (stable: of the same path, the later entry stays last)."""
        if not self._sorted:
            order = sorted(range(len(self.paths)), key=self.paths.__getitem__)
            paths, self.paths = self.paths, Names(self.paths[i] for i in order)
            del paths
            self._sizes = array("q", (self._sizes[i] for i in order))
            self._crcs = array("I", (self._crcs[i] for i in order))
            self._sorted = True

    def index(self, path: str) -> int | None:
        """Where `path` is in the table (its later entry), or None."""
        i = bisect_right(self.paths, path) - 1
        return i if i >= 0 and self.paths[i] == path else None

    def get(self, path: str) -> tuple[int, int] | None:
        """(size, CRC32C), or None when no manifest names `path`."""
        i = self.index(path)
        return None if i is None else (self._sizes[i], self._crcs[i])

    def __len__(self) -> int:
        return len(self.paths)

    def __iter__(self) -> Iterator[str]:
        return iter(self.paths)


class Landed(Mapping[str, ObjectInfo]):
    """What the destination holds, by relative key: objects written (the write's answer) and
    objects compared, each recorded as it is known, with its position in the source's
    listing. Iterated in key order (a lookup by key reads the file through: for tests)."""

    def __init__(self):
        self._file = None
        self._size = 0
        self._starts = array("q")  # by position in the source's listing: its line's offset (-1: none)
        self._count = 0
        self.in_key_order = True  # positions follow key order (a sorted listing)

    def reserve(self, positions: int) -> None:
        """Room for that many positions at once (not regrown entry by entry mid-copy)."""
        if positions > len(self._starts):
            self._starts.extend(array("q", [-1]) * (positions - len(self._starts)))

    def add(self, position: int, rel: str, info: ObjectInfo) -> None:
        if self._file is None:
            self._file = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the report
        line = json.dumps(
            [
                rel,
                info.key,
                info.size,
                info.updated.isoformat(),
                info.version,
                info.crc32c,
                info.etag,
                info.replication,
            ]  # fmt: skip
        ).encode()
        os.pwrite(self._file.fileno(), line + b"\n", self._size)
        self.reserve(position + 1)
        self._count += self._starts[position] < 0
        self._starts[position] = self._size
        self._size += len(line) + 1

    def _read(self, start: int) -> tuple[str, ObjectInfo]:
        want = 512  # most lines are shorter; each ends with a newline
        while (end := (block := os.pread(self._file.fileno(), want, start)).find(b"\n")) < 0:
            if len(block) < want:
                raise OSError(f"landed records: no line end after offset {start}")
            want *= 4
        rel, key, size, updated, version, crc, etag, replication = json.loads(block[:end])
        return rel, ObjectInfo(key, size, datetime.fromisoformat(updated), version, crc, etag, replication)

    def sorted_items(self) -> Iterator[tuple[str, ObjectInfo]]:
        """(relative key, object), in key order: one entry at a time when the source's
        listing was sorted (a store's always is), else all of them sorted in memory."""
        entries = (self._read(start) for start in self._starts if start >= 0)
        return entries if self.in_key_order else iter(sorted(entries, key=lambda pair: pair[0]))

    def items(self):
        return list(self.sorted_items())

    def __iter__(self) -> Iterator[str]:
        return (rel for rel, _ in self.sorted_items())

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, rel: str) -> ObjectInfo:
        for have, info in self.sorted_items():
            if have == rel:
                return info
        raise KeyError(rel)


class Destination(Mapping[str, ObjectInfo]):
    """The destination prefix as a copy left it, by relative key: its listing (`present`), less
    what the copy deleted or made unknown (`pop`), plus what it wrote or compared (`landed`,
    which wins over the listing) and what its caller wrote after it (a receipt). Iterated in
    key order, without a dict of every object."""

    def __init__(self, present: Mapping[str, ObjectInfo], landed: Landed):
        self._present, self._landed = present, landed
        self._gone: set[str] = set()  # listed objects deleted, or whose write failed
        self._extra: dict[str, ObjectInfo] = {}

    def pop(self, rel: str, default=None):
        self._gone.add(rel)
        return self._extra.pop(rel, self._present.get(rel, default))

    def __setitem__(self, rel: str, info: ObjectInfo) -> None:
        self._gone.discard(rel)
        self._extra[rel] = info

    def sorted_items(self) -> Iterator[tuple[str, ObjectInfo]]:
        listed = (
            (rel, info)
            for rel, info in sorted(self._present.items(), key=lambda pair: pair[0])
            if rel not in self._gone and rel not in self._extra
        )
        copied = ((rel, info) for rel, info in self._landed.sorted_items() if rel not in self._extra)
        extra = sorted(self._extra.items(), key=lambda pair: pair[0])
        yield from _merge(_merge(listed, copied), iter(extra))

    def items(self):
        return list(self.sorted_items())

    def __iter__(self) -> Iterator[str]:
        return (rel for rel, _ in self.sorted_items())

    def __len__(self) -> int:
        return sum(1 for _ in self.sorted_items())

    def __getitem__(self, rel: str) -> ObjectInfo:
        for have, info in self.sorted_items():
            if have == rel:
                return info
        raise KeyError(rel)


def sorted_items(objects: Mapping[str, ObjectInfo]) -> Iterable[tuple[str, ObjectInfo]]:
    """(path, object) in path order: streamed from `Landed` and `Destination`, sorted from
    any other mapping."""
    streamed = getattr(objects, "sorted_items", None)
    return streamed() if streamed is not None else sorted(objects.items(), key=lambda pair: pair[0])


def _merge(
    older: Iterator[tuple[str, ObjectInfo]], newer: Iterator[tuple[str, ObjectInfo]]
) -> Iterator[tuple[str, ObjectInfo]]:
    """Two key-ordered streams as one; of a key in both, the newer's object."""
    a, b = next(older, None), next(newer, None)
    while a is not None or b is not None:
        if b is None or (a is not None and a[0] < b[0]):
            yield a
            a = next(older, None)
            continue
        if a is not None and a[0] == b[0]:
            a = next(older, None)
        yield b
        b = next(newer, None)
