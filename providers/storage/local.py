"""`file://` stores on the local filesystem: the embedded default. See base.py.

CRC32C is kept in a sidecar (`.<name>.crc32c`) written with the object, so the local
store reports checksums by metadata like GCS does. The sidecar is bound to the file's size,
mtime, inode and ctime: any write, rename-over, truncation or `touch` to restore an mtime
changes one of them (ctime cannot be set back), and the store then reports no CRC32C, so
certification streams the file instead of trusting a stale checksum. (Rot below the
filesystem that changes no metadata at all is for `--deep` or a checksumming filesystem.) Conditional writes use an exclusive
lock file per key and an atomic rename, so racing writers in several processes see
exactly one winner.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path

from lifeboat_dr.kernel.crc32c import crc32c as _crc32c
from lifeboat_dr.kernel.errors import ChecksumMismatch, NotFound, PreconditionFailed
from lifeboat_dr.providers.storage.base import Capabilities, ObjectInfo

CHUNK = 1 << 20
_SIDECAR = ".crc32c"
_LOCKS = ".lifeboat-locks"


class LocalStore:
    capabilities = Capabilities(
        crc32c_in_list=True, crc32c_in_head=True, conditional_writes=True, server_side_copy=True
    )

    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        self.uri = f"file://{self.root}"

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if path != self.root and self.root not in path.parents:
            raise ValueError(f"key {key!r} escapes the store root {self.root}")
        return path

    @staticmethod
    def _sidecar(path: Path) -> Path:
        return path.with_name(f".{path.name}{_SIDECAR}")

    def _info(self, key: str, path: Path) -> ObjectInfo:
        try:
            st = path.stat()
        except FileNotFoundError:
            raise NotFound(f"{self.uri}/{key}: no such object") from None
        crc = None
        sidecar = self._sidecar(path)
        try:
            *stamp, stored_crc = sidecar.read_text().split()
            if stamp == _stamp(st):  # otherwise stale: the file changed behind our back
                crc = int(stored_crc, 16)
        except (FileNotFoundError, ValueError):
            pass
        return ObjectInfo(
            key=key,
            size=st.st_size,
            updated=datetime.fromtimestamp(st.st_mtime, UTC),
            version=f"{st.st_mtime_ns}-{st.st_ino}",
            crc32c=crc,
        )

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        if not self.root.exists():
            return
        found = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = [d for d in dirnames if d != _LOCKS]
            for name in filenames:
                if name.startswith(".") and name.endswith(_SIDECAR) or name.startswith(".tmp-"):
                    continue
                path = Path(dirpath, name)
                key = path.relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    found.append((key, path))
        for key, path in sorted(found):
            try:
                yield self._info(key, path)
            except NotFound:  # deleted while listing
                continue

    def head(self, key: str) -> ObjectInfo:
        return self._info(key, self._path(key))

    def read(self, key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        path = self._path(key)
        try:
            f = path.open("rb")
        except FileNotFoundError:
            raise NotFound(f"{self.uri}/{key}: no such object") from None
        with f:
            f.seek(start)
            remaining = None if end is None else max(0, end - start)
            while remaining is None or remaining > 0:
                chunk = f.read(CHUNK if remaining is None else min(CHUNK, remaining))
                if not chunk:
                    break
                if remaining is not None:
                    remaining -= len(chunk)
                yield chunk

    @contextmanager
    def _key_lock(self, key: str):
        lock_dir = self.root / _LOCKS
        lock_dir.mkdir(parents=True, exist_ok=True)
        with open(lock_dir / key.replace("/", "%2F"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

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
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        chunks = [data] if isinstance(data, bytes | bytearray | memoryview) else data
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        crc = 0
        try:
            with os.fdopen(fd, "wb") as f:
                for chunk in chunks:
                    crc = _crc32c(chunk, crc)
                    f.write(chunk)
            if crc32c is not None and crc != crc32c:
                raise ChecksumMismatch(
                    f"{self.uri}/{key}: CRC32C of the bytes is {crc:08x}, expected {crc32c:08x}"
                )
            conditional = if_none_match or if_match is not None
            with self._key_lock(key) if conditional else _nothing():
                if if_none_match and path.exists():
                    raise PreconditionFailed(f"{self.uri}/{key} already exists")
                if if_match is not None:
                    current = self._info(key, path).version if path.exists() else None
                    if current != if_match:
                        raise PreconditionFailed(
                            f"{self.uri}/{key} changed (version {current}, expected {if_match})"
                        )
                os.replace(tmp, path)
                self._write_sidecar(path, crc)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return self._info(key, path)

    def delete(self, key: str) -> None:
        path = self._path(key)
        for p in (path, self._sidecar(path)):
            with suppress(FileNotFoundError):
                p.unlink()

    def server_copy(self, source, src_key: str, dst_key: str) -> ObjectInfo | None:
        if not isinstance(source, LocalStore):
            return None
        src = source._path(src_key)
        info = source.head(src_key)
        dst = self._path(dst_key)
        dst.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=dst.parent)
        os.close(fd)
        try:
            shutil.copyfile(src, tmp)
            os.replace(tmp, dst)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        if info.crc32c is not None:
            self._write_sidecar(dst, info.crc32c)
        return self.head(dst_key)

    def _write_sidecar(self, path: Path, crc: int) -> None:
        self._sidecar(path).write_text(" ".join([*_stamp(path.stat()), f"{crc:08x}"]))


def _stamp(st: os.stat_result) -> list[str]:
    """What binds a sidecar to one version of its file."""
    return [str(st.st_size), str(st.st_mtime_ns), str(st.st_ino), str(st.st_ctime_ns)]


@contextmanager
def _nothing():
    yield
