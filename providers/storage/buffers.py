"""Bytes in flight: one budget shared by every upload in the process, so memory stays bounded
whatever the object sizes and the concurrency.

An object gathered whole before one request, and each part of a multipart upload, reserves
its size first and gives it back when the request is answered. A reservation larger than
the whole budget is clamped to it (it then runs alone), so nothing waits forever.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import mmap
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from lifeboat_dr.kernel.crc32c import crc32c
from lifeboat_dr.kernel.errors import ChecksumMismatch

# Bytes of object data held in memory at once, all uploads together: two 16 MiB objects in
# flight (the next is read when one is answered), or four 8 MiB parts. Measured on loopback
# moto, 64 x 16 MiB (benchmarks/replicate.py): 24 MiB -> 1.71x s5cmd's wall; 32 MiB -> 1.11x;
# 48 MiB -> 1.11x. With 32 MiB the process peaks at 89 MiB (90 for one 2 GiB object), ~55 of
# it before any data moves (Python, the runbook model, botocore's lean S3 models).
BUDGET = 32 << 20


class ByteBudget:
    """A counting semaphore over bytes."""

    def __init__(self, total: int = BUDGET):
        self.total = total
        self.free = total
        self.peak = 0  # most bytes reserved at once (for tests and benchmarks)
        self._cond = threading.Condition()

    def acquire(self, n: int) -> int:
        """Block until `n` bytes (at most the whole budget) are free; returns what was taken."""
        tune_allocator()
        n = max(0, min(n, self.total))
        with self._cond:
            while self.free < n:
                self._cond.wait()
            self.free -= n
            self.peak = max(self.peak, self.total - self.free)
        return n

    def release(self, n: int) -> None:
        with self._cond:
            self.free += n
            self._cond.notify_all()

    @contextmanager
    def held(self, n: int) -> Iterator[None]:
        taken = self.acquire(n)
        try:
            yield
        finally:
            self.release(taken)


BUFFERS = ByteBudget()  # the process's budget: the copy engine and the stores draw on it

_TUNED = False


def tune_allocator() -> None:
    """Once per process (glibc; elsewhere nothing to tune), before the copy's threads start:
    - buffers of 1 MiB and more come straight from mmap and go back to the OS when freed.
      glibc's default raises that threshold after the first large free, and every upload
      thread's arena then keeps its freed 16 MiB bodies: the process grew to several times
      the budget;
    - at most two malloc arenas. glibc gives threads up to 8 per core, each keeping its own
      freed small blocks: ~5 MiB of a 64 x 16 MiB copy's peak (benchmarks/replicate.py), for
      no measured speed (the threads take turns on the GIL)."""
    global _TUNED
    if _TUNED:
        return
    _TUNED = True
    libc = _libc()
    if libc is not None and hasattr(libc, "mallopt"):
        libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD
        libc.mallopt(-8, 2)  # M_ARENA_MAX


def release_freed() -> None:
    """Give the heap's free pages back to the OS (glibc `malloc_trim`; elsewhere nothing):
    after a phase whose tables are dropped (a copy's plan: 100,000 files left ~7 MiB of
    freed holes in the heap, #31), so the byte budget's bodies do not come on top of them."""
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


@functools.cache
def _libc():
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def gather(chunks: Iterable[bytes], size: int, where: str) -> tuple[bytes, int]:
    """Join a stream of exactly `size` bytes into one body, hashing each chunk once on the
    way; returns (body, CRC32C). A one-chunk stream is not copied; a longer one is copied
    once (reserve `gather_cost(size)`). The body is `bytes` because HTTP clients wrap bytes
    without copying (botocore copies a bytearray whole). A stream longer or shorter than
    `size` raises ChecksumMismatch (the source changed under us)."""
    parts, pos, crc = [], 0, 0
    for chunk in chunks:
        pos += len(chunk)
        if pos > size:
            raise ChecksumMismatch(f"{where}: read more than the {size} bytes expected")
        crc = crc32c(chunk, crc)
        parts.append(chunk)
    if pos != size:
        raise ChecksumMismatch(f"{where}: read {pos} bytes, expected {size}")
    return b"".join(parts), crc


def new_body(size: int) -> mmap.mmap:
    """A request body of `size` bytes (> 0) to fill in place: anonymous memory, a seekable
    file to HTTP clients and the signer (read in pieces, at C speed: never copied whole,
    where botocore copies a `bytearray` and joining chunks into `bytes` holds twice the size),
    given back to the OS the moment it is closed."""
    return mmap.mmap(-1, size)


def fill(chunks: Iterable[bytes], size: int, where: str) -> tuple[mmap.mmap | bytes, int]:
    """Copy a stream of exactly `size` bytes into one body (`new_body`), hashing each chunk
    once on the way; returns (body, CRC32C), the body rewound. Holds `size` bytes plus the
    chunk in hand (reserve `size`); close the body when the request is answered. A stream
    longer or shorter than `size` raises ChecksumMismatch."""
    body, pos, crc = (new_body(size) if size else None), 0, 0
    try:
        for chunk in chunks:
            if pos + len(chunk) > size:
                raise ChecksumMismatch(f"{where}: read more than the {size} bytes expected")
            if chunk:
                body.write(chunk)
                crc = crc32c(chunk, crc)
                pos += len(chunk)
        if pos != size:
            raise ChecksumMismatch(f"{where}: read {pos} bytes, expected {size}")
    except BaseException:
        if body is not None:
            body.close()
        raise
    if body is None:
        return b"", 0
    body.seek(0)
    return body, crc


def gather_cost(size: int, chunk: int = 1 << 20) -> int:
    """Bytes a `gather` of `size` holds at its peak: the chunks and the joined body."""
    return size if size <= chunk else 2 * size
