"""Read the pickled metadata of PyTorch checkpoints without importing torch or running code.

`torch.distributed.checkpoint` commits a save by writing `.metadata` last: a pickled
`Metadata` whose `storage_data` maps every saved item to `_StorageInfo(relative_path,
offset, length)`. `dcp_storage_files` turns that into {file: bytes it must hold at least}.

The pickle is read by a restricted unpickler: a global from `torch.*` (and `pathlib` paths)
becomes an inert `Stub` that only records its constructor arguments and state; any other
global (`os.system`, `builtins.eval`, ...) is refused, as are persistent ids (tensor
storages) and documents over `MAX_METADATA_BYTES`. Nothing in the document can run code.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

from lifeboat_dr.kernel.errors import ConfigError

MAX_METADATA_BYTES = 256 << 20  # a 70B model's DCP .metadata is tens of MB
_SAFE_BUILTINS = {
    ("collections", "OrderedDict"): dict,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "slice"): slice,
}
_STUB_MODULES = ("torch", "pathlib")


class Stub:
    """Stands for an object of a torch class: its arguments and state, never its code."""

    qualname = "Stub"
    args: tuple = ()
    kwargs: dict | None = None
    state: Any = None

    def __init__(self, *args: Any, **kwargs: Any):
        self.args, self.kwargs, self.state = args, kwargs, None

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def field(self, name: str) -> Any:
        """A dataclass field from the pickled state (`__dict__`, or slots as (None, dict))."""
        state = self.state
        if isinstance(state, tuple) and len(state) == 2 and state[0] is None:
            state = state[1]
        if isinstance(state, dict):
            return state.get(name)
        return None

    def __repr__(self) -> str:
        return f"<{self.qualname} {self.args!r} {self.state!r}>"


_STUBS: dict[tuple[str, str], type[Stub]] = {}


def stub_class(module: str, name: str) -> type[Stub]:
    """The inert stand-in for `module.name` (one class per name)."""
    key = (module, name)
    if key not in _STUBS:
        _STUBS[key] = type(name, (Stub,), {"qualname": f"{module}.{name}"})
    return _STUBS[key]


def reconstructor(cls, base, state=None):
    """`copyreg._reconstructor` (protocol 0/1 objects), for stubs only."""
    if not (isinstance(cls, type) and issubclass(cls, Stub)):
        raise pickle.UnpicklingError(f"refused to reconstruct {cls!r}")
    return cls()


class _Restricted(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in _SAFE_BUILTINS:
            return _SAFE_BUILTINS[module, name]
        if (module, name) == ("copyreg", "_reconstructor"):
            return reconstructor
        if module.split(".")[0] in _STUB_MODULES:
            return stub_class(module, name)
        raise pickle.UnpicklingError(f"refused global {module}.{name}")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refused persistent id (tensor data has no place in metadata)")


def safe_load(data: bytes, where: str) -> Any:
    """Unpickle `data` with torch classes as stubs; ConfigError naming `where` otherwise."""
    if len(data) > MAX_METADATA_BYTES:
        raise ConfigError(
            f"{where}: {len(data)} bytes, over the {MAX_METADATA_BYTES} byte limit for metadata"
        )
    if not data:
        raise ConfigError(f"{where}: empty (the save did not finish writing it)")
    try:
        return _Restricted(io.BytesIO(data)).load()
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        AttributeError,
        IndexError,
        KeyError,
    ) as e:
        raise ConfigError(
            f"{where}: not a readable checkpoint metadata pickle ({type(e).__name__}: {e})"
        ) from None
    except RecursionError:
        raise ConfigError(f"{where}: metadata pickle nested too deeply") from None


def dcp_storage_files(data: bytes, where: str = ".metadata") -> dict[str, int]:
    """Every storage file a DCP `.metadata` names -> the size it must reach (offset + length)."""
    meta = safe_load(data, where)
    if not isinstance(meta, Stub) or not meta.qualname.endswith(".Metadata"):
        raise ConfigError(f"{where}: not a torch.distributed.checkpoint Metadata ({type(meta).__name__})")
    storage = meta.field("storage_data")
    if not isinstance(storage, dict) or not storage:
        raise ConfigError(f"{where}: names no storage files (storage_data is {type(storage).__name__})")
    files: dict[str, int] = {}
    for info in storage.values():
        rel = info.field("relative_path") if isinstance(info, Stub) else None
        offset = info.field("offset") if isinstance(info, Stub) else None
        length = info.field("length") if isinstance(info, Stub) else None
        if not isinstance(rel, str) or not rel or rel.startswith("/") or ".." in rel.split("/"):
            raise ConfigError(f"{where}: storage entry with a bad relative_path {rel!r}")
        end = offset + length if isinstance(offset, int) and isinstance(length, int) else 0
        files[rel] = max(files.get(rel, 0), end)
    return files
