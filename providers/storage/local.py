"""`file://` stores on the local filesystem: the embedded default. See base.py.

CRC32C is kept in a sidecar (`.<name>.crc32c`) written with the object, so the local
store reports checksums by metadata like GCS does. The sidecar is bound to the file's size,
mtime, inode and ctime: any write, rename-over, truncation or `touch` to restore an mtime
changes one of them (ctime cannot be set back), and the store then reports no CRC32C, so
certification streams the file instead of trusting a stale checksum. (Rot below the
filesystem that changes no metadata at all is for `--deep` or a checksumming filesystem.)
A file name too long to take the sidecar's dot and suffix within NAME_MAX has its sidecar
named by a hash of it; a sidecar that cannot be read is no checksum, never an error.
Conditional writes use an exclusive lock file per key and an atomic rename, so racing
writers in several processes see exactly one winner; a create-only write links its file into
place, so it never replaces a file that anyone, Lifeboat or not, wrote there first. A
server-side copy (local to local) is a copy beside the destination, then the same commit.

A key is the file at `root/key` and no other (`_path`, the one place keys are checked):
never through a symlinked folder, and read through a symlink only while it stays inside
the store. A symlink leaving the store is listed (so it can be named) and refused by every
other call; a write or delete acts on a link itself (replaces or removes it), never on the
file it names, so no write lands in another checkpoint's folder or outside the root.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path

from lifeboat_dr.kernel.crc32c import crc32c as _crc32c
from lifeboat_dr.kernel.errors import (
    ChecksumMismatch,
    NotFound,
    PreconditionFailed,
    ProviderUnavailable,
    RefusedKey,
)
from lifeboat_dr.providers.storage.base import Capabilities, ObjectInfo, checked_key
from lifeboat_dr.providers.storage.files import LocalFile

CHUNK = 1 << 20
_SIDECAR = ".crc32c"
_LOCKS = ".lifeboat-locks"
NAME_MAX = 255  # bytes in one file name (ext4, xfs, btrfs, zfs, apfs)


class LocalStore:
    capabilities = Capabilities(
        crc32c_in_list=True, crc32c_in_head=True, conditional_writes=True, server_side_copy=True
    )

    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        self.uri = f"file://{self.root}"

    def _path(self, key: str, *, follow: bool = True) -> Path:
        """The file `key` names. `follow` (reads): a symlink there must stay in the store;
        writes and deletes pass False and act on the link itself."""
        checked_key(key, self.uri)
        parts = key.split("/")
        long = next((part for part in parts if len(part.encode()) > NAME_MAX), None)
        if long is not None:
            raise RefusedKey(
                f"{self.uri}/{key}: refused: a name of {len(long.encode())} bytes (NAME_MAX {NAME_MAX})"
            )
        path = self.root.joinpath(*parts)
        if len(parts) > 1 and self._linked_folder(parts[:-1]):
            raise RefusedKey(f"{self.uri}/{key}: refused: a folder on its path is a symlink")
        if follow and not self._inside(path):
            raise RefusedKey(f"{self.uri}/{key}: refused: a symlink leaving the store (-> {path.resolve()})")
        return path

    def _linked_folder(self, folders: list[str]) -> bool:
        """Whether a folder below the root on this path is a symlink: one `lstat` per folder
        below the root (resolved once, when the store opened), not a walk of the whole path
        per call. A folder not there yet (a write makes it) is no link."""
        here = str(self.root)
        for name in folders:
            here = f"{here}/{name}"
            try:
                if stat.S_ISLNK(os.lstat(here).st_mode):
                    return True
            except (FileNotFoundError, NotADirectoryError):
                return False  # nothing deeper exists: the call itself says so
        return False

    def _inside(self, path: Path) -> bool:
        """Whether `path`, a link followed, is a file of this store."""
        return not path.is_symlink() or self.root in path.resolve().parents

    @staticmethod
    def _sidecar(path: Path) -> Path:
        name = f".{path.name}{_SIDECAR}"
        if len(name.encode()) > NAME_MAX:  # a long file name: a fixed-length sidecar name
            name = f".{hashlib.sha256(path.name.encode()).hexdigest()}{_SIDECAR}"
        return path.with_name(name)

    def _info(self, key: str, path: Path) -> ObjectInfo:
        try:
            st = os.lstat(path)
            link = stat.S_ISLNK(st.st_mode)
            if link:
                st = os.stat(path)
        except FileNotFoundError:  # gone, or a link to nothing
            raise NotFound(f"{self.uri}/{key}: no such object") from None
        crc = None
        try:
            if not link or self._inside(path):  # never a checksum for a file outside the store
                *stamp, stored_crc = self._sidecar(path).read_text().split()
                if stamp == _stamp(st):  # otherwise stale: the file changed behind our back
                    crc = int(stored_crc, 16)
        except (OSError, ValueError):  # none, or unreadable: no checksum (certification streams)
            pass
        return _object_info(key, st, crc)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        if not self.root.exists():
            return
        found = []  # keys only, sorted before the first is yielded (a Path each was ~0.7 KB a file)
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = [d for d in dirnames if d != _LOCKS]
            folder = Path(dirpath).relative_to(self.root).as_posix()
            folder = "" if folder == "." else folder + "/"
            for name in filenames:
                if name.startswith(".") and name.endswith(_SIDECAR) or name.startswith(".tmp-"):
                    continue
                key = folder + name
                if key.startswith(prefix):
                    found.append(key)
        found.sort()
        for key in found:
            try:
                yield self._info(key, self.root / key)
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

    def file(self, key: str, size: int, on_read: Callable[[int], None] | None = None) -> LocalFile:
        """The object as an open file of its listed `size` (files.py), for stores that send
        it by ranges (`Capabilities.file_parts`)."""
        path = self._path(key)
        try:
            return LocalFile(path, size, f"{self.uri}/{key}", on_read)
        except FileNotFoundError:
            raise NotFound(f"{self.uri}/{key}: no such object") from None

    @contextmanager
    def _key_lock(self, key: str):
        lock_dir = self.root / _LOCKS
        lock_dir.mkdir(parents=True, exist_ok=True)
        name = key.replace("/", "%2F")
        if len(name.encode()) > NAME_MAX:
            name = hashlib.sha256(key.encode()).hexdigest()
        with open(lock_dir / name, "a") as lock:
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
        path = self._path(key, follow=False)
        try:
            return self._put(key, path, data, if_none_match, if_match, crc32c)
        except OSError as e:
            if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            # a full disk: one line naming the object, retryable once space is freed
            raise ProviderUnavailable(f"{self.uri}/{key}: cannot write: {e.strerror or e}") from None

    def _put(self, key, path, data, if_none_match, if_match, crc32c) -> ObjectInfo:
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
            return self._commit(key, path, tmp, crc, if_none_match, if_match)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def _commit(
        self, key: str, path: Path, tmp: str, crc: int | None, if_none_match: bool, if_match: str | None
    ) -> ObjectInfo:
        """Put the finished file `tmp` in `path`'s place at once, with its CRC32C sidecar, and
        answer with what was written: the file itself (held open), never whatever holds the
        name a moment later (another writer's file, which a copy's check would then delete).
        A conditional write holds the key's lock, so racing conditional writers see one
        winner; create-only links instead of renaming, so it never replaces a file whoever
        wrote it (a trainer writing its own files takes no lock of ours)."""
        fd = os.open(tmp, os.O_RDONLY)
        try:
            with self._key_lock(key) if if_none_match or if_match is not None else _nothing():
                if if_match is not None:
                    current = self._info(key, path).version if path.exists() else None
                    if current != if_match:
                        raise PreconditionFailed(
                            f"{self.uri}/{key} changed (version {current}, expected {if_match})"
                        )
                if if_none_match:
                    _create(tmp, path, f"{self.uri}/{key}")
                else:
                    os.replace(tmp, path)
                st = os.fstat(fd)  # after the rename or unlink: both change its ctime
                if crc is not None:
                    self._sidecar(path).write_text(" ".join([*_stamp(st), f"{crc:08x}"]))
        finally:
            os.close(fd)
        return _object_info(key, st, crc)

    def delete(self, key: str) -> None:
        path = self._path(key, follow=False)
        for p in (path, self._sidecar(path)):
            with suppress(FileNotFoundError):
                p.unlink()

    def server_copy(
        self, source, src_key: str, dst_key: str, *, if_none_match: bool = False, if_match: str | None = None
    ) -> ObjectInfo | None:
        dst = self._path(dst_key, follow=False)
        if not isinstance(source, LocalStore):
            return None
        src = source._path(src_key)
        info = source.head(src_key)
        dst.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=dst.parent)
        os.close(fd)
        try:
            shutil.copyfile(src, tmp)  # beside the destination, then in its place as `put` does
            return self._commit(dst_key, dst, tmp, info.crc32c, if_none_match, if_match)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


def _object_info(key: str, st: os.stat_result, crc: int | None) -> ObjectInfo:
    return ObjectInfo(
        key=key,
        size=st.st_size,
        updated=datetime.fromtimestamp(st.st_mtime, UTC),
        version=f"{st.st_mtime_ns}-{st.st_ino}",
        crc32c=crc,
    )


def _stamp(st: os.stat_result) -> list[str]:
    """What binds a sidecar to one version of its file."""
    return [str(st.st_size), str(st.st_mtime_ns), str(st.st_ino), str(st.st_ctime_ns)]


def _create(tmp: str, path: Path, where: str) -> None:
    """Give `tmp` the name `path` only if nothing has it: a hard link fails on any file,
    link or folder there, atomically. A filesystem without hard links (some FUSE mounts)
    falls back to a check and a rename, exclusive among Lifeboat's writers by the key lock."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise PreconditionFailed(f"{where} already exists") from None
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        if os.path.lexists(path):
            raise PreconditionFailed(f"{where} already exists") from None
        os.replace(tmp, path)
        return
    os.unlink(tmp)


@contextmanager
def _nothing():
    yield
