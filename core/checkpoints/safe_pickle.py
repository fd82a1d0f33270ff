"""Read the pickled metadata of PyTorch checkpoints by an allow-list: nothing in it can run.

`torch.distributed.checkpoint` commits a save by writing `.metadata` last: a pickled
`Metadata` whose `storage_data` maps every saved item to `_StorageInfo(relative_path,
offset, length)`. `dcp_storage_files` turns that into {file: bytes it must hold at least}.

The pickle is read by an unpickler that knows exactly the globals a DCP `Metadata` is made
of (`DCP_METADATA_GLOBALS`, the classes of torch 2.13's torch/distributed/checkpoint/
metadata.py and the `_StorageInfo` of its filesystem.py, with `torch.Size`, the dtypes, the
layout lookup `torch.serialization._get_layout` and `pathlib` paths they hold). Any other
global is refused: `os.system` and `builtins.eval` as before, and every other `torch.*`
name too (`torch.save`, `torch.hub.load`, `torch.load`: a torch-only gadget is still a
gadget). Persistent ids (tensor storages) and documents over `MAX_METADATA_BYTES` are
refused as well.

Two readers share the list. Certification reads without torch (`safe_load`,
`dcp_storage_files`): each allowed class becomes an inert `Stub` recording its arguments and
state. A resume reads with torch (`load_dcp_metadata`): the allowed classes themselves, so
`dcp.load` gets the `Metadata` it expects (standins/trainer/dcp.py `SafeReader`) and never
calls `pickle.load` on the file. (A `torch.save` zip's header is read with every global a
stub, core/checkpoints/torch_zip.py: nothing there is ever built for real.)
"""

from __future__ import annotations

import collections
import importlib
import io
import pickle
from typing import Any

from lifeboat_dr.kernel.errors import ConfigError

MAX_METADATA_BYTES = 256 << 20  # a 70B model's DCP .metadata is tens of MB
_SAFE_BUILTINS = {  # containers, built the same way by both readers
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "slice"): slice,
}
_DCP = "torch.distributed.checkpoint.metadata"
# every torch.dtype by the name it pickles as (torch 2.13)
# fmt: off
_DTYPES = (
    "bfloat16", "bits16", "bits1x8", "bits2x4", "bits4x2", "bits8", "bool", "complex128",
    "complex32", "complex64", "float16", "float32", "float4_e2m1fn_x2", "float64", "float8_e4m3fn",
    "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "int1", "int16", "int2",
    "int3", "int32", "int4", "int5", "int6", "int64", "int7", "int8", "qint32", "qint8",
    "quint2x4", "quint4x2", "quint8", "uint1", "uint16", "uint2", "uint3", "uint32", "uint4",
    "uint5", "uint6", "uint64", "uint7", "uint8",
)
# fmt: on
DCP_METADATA_GLOBALS = frozenset(
    {
        *(
            (_DCP, name)
            for name in (
                "Metadata",
                "MetadataIndex",
                "ChunkStorageMetadata",
                "TensorStorageMetadata",
                "BytesStorageMetadata",
                "TensorProperties",
                "StorageMeta",
                "_MEM_FORMAT_ENCODING",  # TensorProperties' memory format, pickled as this enum
            )
        ),
        # the same two classes where older torch releases defined them (still there in 2.13)
        ("torch.distributed._shard.sharded_tensor.metadata", "TensorProperties"),
        ("torch.distributed._shard.sharded_tensor.metadata", "MEM_FORMAT_ENCODING"),
        ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),  # FileSystemWriter's storage_data
        ("torch", "Size"),
        ("torch.serialization", "_get_layout"),  # how a torch.layout pickles: a name lookup
        *(("torch", dtype) for dtype in _DTYPES),
        *(
            ("pathlib", name)  # StorageMeta.checkpoint_id
            for name in ("Path", "PosixPath", "WindowsPath", "PurePath", "PurePosixPath", "PureWindowsPath")
        ),
    }
)


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


class _AllowList(pickle.Unpickler):
    """Builds only `DCP_METADATA_GLOBALS` (and plain containers): as stubs, or for real."""

    def __init__(self, file, *, real: bool):
        super().__init__(file)
        self._real = real

    def find_class(self, module: str, name: str):
        if (module, name) in _SAFE_BUILTINS:
            found = _SAFE_BUILTINS[module, name]
            return dict if found is collections.OrderedDict and not self._real else found
        if (module, name) == ("copyreg", "_reconstructor"):
            return real_reconstructor if self._real else reconstructor
        if (module, name) not in DCP_METADATA_GLOBALS:
            raise pickle.UnpicklingError(f"refused global {module}.{name}")
        return _real_global(module, name) if self._real else stub_class(module, name)

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refused persistent id (tensor data has no place in metadata)")


def _real_global(module: str, name: str):
    """An allowed global as torch defines it (a `torch.<dtype>` must be a dtype)."""
    found = getattr(importlib.import_module(module), name, None)
    if module == "torch" and name != "Size":
        import torch

        if not isinstance(found, torch.dtype):
            raise pickle.UnpicklingError(f"refused global {module}.{name} (not a torch.dtype)")
    if found is None:
        raise pickle.UnpicklingError(f"refused global {module}.{name} (not in this torch)")
    return found


def real_reconstructor(cls, base, state=None):
    """`copyreg._reconstructor` (protocol 0/1 pickles), for the allowed classes only."""
    if base is not object or (getattr(cls, "__module__", ""), getattr(cls, "__qualname__", "")) not in (
        DCP_METADATA_GLOBALS
    ):
        raise pickle.UnpicklingError(f"refused to reconstruct {cls!r}")
    return object.__new__(cls)


def safe_load(data: bytes, where: str) -> Any:
    """Unpickle DCP metadata with its classes as stubs; ConfigError naming `where` otherwise."""
    return _load(data, where, real=False)


def load_dcp_metadata(data: bytes, where: str) -> Any:
    """A DCP `.metadata` as torch's own `Metadata` (torch imported), read by the same
    allow-list as certification: what a resume hands `dcp.load` instead of `pickle.load`.
    ConfigError, one line naming `where`, for anything else."""
    return _load(data, where, real=True)


def _load(data: bytes, where: str, *, real: bool) -> Any:
    if len(data) > MAX_METADATA_BYTES:
        raise ConfigError(
            f"{where}: {len(data)} bytes, over the {MAX_METADATA_BYTES} byte limit for metadata"
        )
    if not data:
        raise ConfigError(f"{where}: empty (the save did not finish writing it)")
    try:
        return _AllowList(io.BytesIO(data), real=real).load()
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
