"""A local store's object as an open file, sent by ranges read from disk as they go out.

A multipart upload from a local file needs no part buffered in memory: each part is a
`FileRange`, a seekable file over its bytes that the HTTP client (and its signer) reads in
small blocks when the part is sent, and again from the start on a retry. The part's CRC32C
is hashed from the same open file just before (`LocalFile.crc32c`); the server verifies the
bytes it receives against it (S3 BadDigest), so a file changed in between never lands.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

from lifeboat_dr.kernel.crc32c import crc32c
from lifeboat_dr.kernel.errors import ChecksumMismatch

CHUNK = 1 << 20


class LocalFile:
    """One open file of `size` bytes (its size as listed; another size fails here). Iterable
    as 1 MiB chunks for any store's `put`; `on_read(n)` is told of every byte read to hash
    or to yield (progress). Close it (or use `with`) when the put is answered."""

    def __init__(self, path, size: int, where: str, on_read: Callable[[int], None] | None = None):
        self.size, self.where, self._on_read = size, where, on_read
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        held = os.fstat(self._fd).st_size
        if held != size:
            os.close(self._fd)
            raise ChecksumMismatch(f"{where}: holds {held} bytes, listed {size}")

    def __enter__(self) -> LocalFile:
        return self

    def __exit__(self, *_) -> None:
        self.close()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def pread(self, n: int, at: int) -> bytes:
        """`n` bytes at `at`; fewer (the file shrank) raise ChecksumMismatch."""
        data = os.pread(self._fd, n, at)
        if len(data) != n:
            raise ChecksumMismatch(f"{self.where}: read {at + len(data)} bytes, source has {self.size}")
        return data

    def __iter__(self) -> Iterator[bytes]:
        for at in range(0, self.size, CHUNK):
            chunk = self.pread(min(CHUNK, self.size - at), at)
            if self._on_read:
                self._on_read(len(chunk))
            yield chunk

    def crc32c(self, start: int, length: int) -> int:
        """The CRC32C of `length` bytes from `start`, read in chunks (each hashed once)."""
        crc = 0
        for at in range(start, start + length, CHUNK):
            chunk = self.pread(min(CHUNK, start + length - at), at)
            crc = crc32c(chunk, crc)
            if self._on_read:
                self._on_read(len(chunk))
        return crc

    def range(self, start: int, length: int) -> FileRange:
        return FileRange(self, start, length)


class FileRange:
    """Bytes [start, start + length) of a `LocalFile` as a seekable file of that length: what
    an HTTP client needs of a body (`len`, `read`, `seek`, `tell`), read from disk as sent."""

    def __init__(self, file: LocalFile, start: int, length: int):
        self._file, self._start, self._length, self._pos = file, start, length, 0

    def __len__(self) -> int:
        return self._length

    def read(self, n: int | None = -1) -> bytes:
        left = self._length - self._pos
        n = left if n is None or n < 0 else min(n, left)
        if n <= 0:
            return b""
        data = self._file.pread(n, self._start + self._pos)
        self._pos += n
        return data

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self._length}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos
