"""`MemoryStore`: a faithful, stateful in-memory store. See base.py.

It behaves like GCS (generation numbers as versions, CRC32C in list) and enforces
create-only and if-match writes under a lock, which the GCS emulator does not: it is the
fake used wherever a test needs generation preconditions. It passes the same contract suite
as the real backends (the keys every store refuses included). `outage = True` makes every call raise `ProviderUnavailable`, as a
store in a region that is down does.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from lifeboat_dr.kernel.crc32c import crc32c as _crc32c
from lifeboat_dr.kernel.errors import ChecksumMismatch, NotFound, PreconditionFailed, ProviderUnavailable
from lifeboat_dr.providers.storage.base import Capabilities, ObjectInfo, checked_key

CHUNK = 1 << 20
_names = itertools.count(1)


@dataclass(frozen=True)
class _Object:
    data: bytes
    generation: int
    updated: datetime
    crc32c: int


class MemoryStore:
    capabilities = Capabilities(
        crc32c_in_list=True, crc32c_in_head=True, conditional_writes=True, server_side_copy=True
    )

    def __init__(self, name: str | None = None, *, clock: Callable[[], datetime] | None = None):
        self.uri = f"memory://{name or f'store-{next(_names)}'}"
        self.outage = False
        self._clock = clock or (lambda: datetime.now(UTC))
        self._objects: dict[str, _Object] = {}
        self._generation = itertools.count(1)
        self._lock = threading.Lock()

    def _up(self) -> None:
        if self.outage:
            raise ProviderUnavailable(f"{self.uri}: store unreachable")

    def _get(self, key: str) -> _Object:
        self._up()
        checked_key(key, self.uri)
        with self._lock:
            obj = self._objects.get(key)
        if obj is None:
            raise NotFound(f"{self.uri}/{key}: no such object")
        return obj

    @staticmethod
    def _info(key: str, obj: _Object) -> ObjectInfo:
        return ObjectInfo(
            key=key,
            size=len(obj.data),
            updated=obj.updated,
            version=str(obj.generation),
            crc32c=obj.crc32c,
            etag=str(obj.generation),
        )

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        self._up()
        with self._lock:
            items = sorted((k, o) for k, o in self._objects.items() if k.startswith(prefix))
        for key, obj in items:
            yield self._info(key, obj)

    def head(self, key: str) -> ObjectInfo:
        return self._info(key, self._get(key))

    def read(self, key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        data = self._get(key).data
        stop = len(data) if end is None else min(end, len(data))
        for pos in range(start, stop, CHUNK):
            yield data[pos : min(pos + CHUNK, stop)]

    def put(
        self,
        key: str,
        data: bytes | Iterable[bytes],
        *,
        if_none_match: bool = False,
        if_match: str | None = None,
        crc32c: int | None = None,
        size: int | None = None,
    ) -> ObjectInfo:
        self._up()
        checked_key(key, self.uri)
        body = bytes(data) if isinstance(data, bytes | bytearray | memoryview) else b"".join(data)
        crc = _crc32c(body)
        if crc32c is not None and crc != crc32c:
            raise ChecksumMismatch(
                f"{self.uri}/{key}: CRC32C of the bytes is {crc:08x}, expected {crc32c:08x}"
            )
        with self._lock:
            current = self._objects.get(key)
            if if_none_match and current is not None:
                raise PreconditionFailed(f"{self.uri}/{key} already exists")
            if if_match is not None and (current is None or str(current.generation) != if_match):
                have = None if current is None else current.generation
                raise PreconditionFailed(f"{self.uri}/{key} changed (generation {have}, expected {if_match})")
            obj = _Object(body, next(self._generation), self._clock(), crc)
            self._objects[key] = obj
        return self._info(key, obj)

    def delete(self, key: str) -> None:
        self._up()
        checked_key(key, self.uri)
        with self._lock:
            self._objects.pop(key, None)

    def server_copy(
        self, source, src_key: str, dst_key: str, *, if_none_match: bool = False, if_match: str | None = None
    ) -> ObjectInfo | None:
        checked_key(dst_key, self.uri)
        if not isinstance(source, MemoryStore):
            return None
        data = source._get(src_key).data
        return self.put(dst_key, data, if_none_match=if_none_match, if_match=if_match)

    def peek(self, key: str) -> bytes | None:
        """Test helper: an object's bytes behind the API (no outage, no request), or None."""
        with self._lock:
            obj = self._objects.get(key)
        return None if obj is None else obj.data

    def snapshot(self, prefix: str = "") -> dict[str, bytes]:
        """Test helper: every object's bytes under `prefix`, behind the API, by key."""
        with self._lock:
            return {k: o.data for k, o in sorted(self._objects.items()) if k.startswith(prefix)}

    def corrupt(self, key: str, data: bytes, *, keep_crc: bool = False) -> None:
        """Test helper: replace an object's bytes behind the API (bit rot, a bad copy)."""
        with self._lock:
            old = self._objects[key]
            crc = old.crc32c if keep_crc else _crc32c(data)
            self._objects[key] = _Object(data, next(self._generation), old.updated, crc)
