"""The pickled header of a `torch.save` file, read from a store by range without torch.

`torch.save` writes a zip whose `*/data.pkl` entry holds the object tree; tensors are
persistent ids pointing at other entries. Reading only the zip's central directory and that
one entry (a few small range reads, however large the tensors) gives fields such as
DeepSpeed's `dp_world_size`. Every global becomes an inert stub and every persistent id a
placeholder (core/checkpoints/safe_pickle.py): nothing in the file can run.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from typing import Any

from lifeboat_dr.core.checkpoints.safe_pickle import MAX_METADATA_BYTES, Stub, reconstructor, stub_class
from lifeboat_dr.kernel.errors import ConfigError, LifeboatError
from lifeboat_dr.providers.storage.base import ObjectInfo, Store


class _Ranged(io.RawIOBase):
    """A seekable read-only file over `store.read(key, start, end)`."""

    def __init__(self, store: Store, info: ObjectInfo):
        self._store, self._key, self._size, self._pos = store, info.key, info.size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def read(self, n: int = -1) -> bytes:
        end = self._size if n is None or n < 0 else min(self._size, self._pos + n)
        if end <= self._pos:
            return b""
        data = b"".join(self._store.read(self._key, self._pos, end))
        self._pos += len(data)
        return data

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class _AnyStub(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) == ("copyreg", "_reconstructor"):
            return reconstructor
        if (module, name) == ("collections", "OrderedDict"):
            return dict
        return stub_class(module, name)  # inert: records arguments, runs nothing

    def persistent_load(self, pid) -> Stub:
        return stub_class("persistent", "id")()


def read_torch_header(store: Store, info: ObjectInfo, where: str) -> Any:
    """The object tree of a `torch.save` zip, tensors as placeholders. ConfigError when the
    file is not such a zip or its header cannot be read."""
    try:
        with zipfile.ZipFile(io.BufferedReader(_Ranged(store, info), 1 << 16)) as z:
            entry = next((i for i in z.infolist() if i.filename.endswith("/data.pkl")), None)
            if entry is None:
                raise ConfigError(f"{where}: a zip without data.pkl, not a torch.save file")
            if entry.file_size > MAX_METADATA_BYTES:
                raise ConfigError(f"{where}: data.pkl is {entry.file_size} bytes, over the metadata limit")
            return _AnyStub(io.BytesIO(z.read(entry))).load()
    except LifeboatError:
        raise
    except (zipfile.BadZipFile, pickle.UnpicklingError, EOFError, ValueError, TypeError) as e:
        raise ConfigError(f"{where}: not a readable torch.save file ({type(e).__name__}: {e})") from None
    except (AttributeError, IndexError, KeyError, RecursionError) as e:
        raise ConfigError(f"{where}: not a readable torch.save file ({type(e).__name__})") from None
