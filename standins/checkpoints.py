"""Small synthetic checkpoints in every layout, for tests, benchmarks and the demo.

`write_checkpoint` writes what a training framework would (shards first, the commit marker
last); `replicate` copies a checkpoint directory to another store the way replication does
(server-side where the stores allow, streamed otherwise).
"""

from __future__ import annotations

import copyreg
import json
import pickle
import struct
from datetime import datetime

from lifeboat_dr.core.checkpoints.manifest import MANIFEST_NAME, Manifest, Shard
from lifeboat_dr.kernel.crc32c import crc32c
from lifeboat_dr.kernel.errors import NotFound
from lifeboat_dr.providers.storage.base import Store

DIR_NAMES = {
    "dcp": "step_{step:07d}",
    "deepspeed": "global_step{step}",
    "megatron": "iter_{step:07d}",
    "hf": "checkpoint-{step}",
    "hf-weights": "export-{step}",
    "manifest": "step_{step:07d}",
}


class _Pickled:
    """An object pickled under a torch class name, with its fields as state."""

    def __init__(self, **fields):
        self.fields = fields

    def __reduce__(self):  # NEWOBJ + BUILD, like a dataclass: no __init__ call on load
        return (copyreg.__newobj__, (type(self),), self.fields)


class _Metadata(_Pickled):
    pass


class _MetadataIndex(_Pickled):
    pass


class _StorageInfo(_Pickled):
    pass


_TORCH_NAMES = {
    _Metadata: "torch.distributed.checkpoint.metadata\nMetadata\n",
    _MetadataIndex: "torch.distributed.checkpoint.metadata\nMetadataIndex\n",
    _StorageInfo: "torch.distributed.checkpoint.filesystem\n_StorageInfo\n",
}


class _TorchNamePickler(pickle._Pickler):
    """Writes our stand-ins under torch's names, as `dcp.save` would (torch not needed)."""

    def save_global(self, obj, name=None):
        self.write(pickle.GLOBAL + _TORCH_NAMES[obj].encode())
        self.memoize(obj)


def dcp_metadata(files: dict[str, int]) -> bytes:
    """A DCP `.metadata` naming each storage file with the bytes it holds."""
    import io

    storage = {
        _MetadataIndex(fqn=f"item{i}", offset=None, index=None): _StorageInfo(
            relative_path=rel, offset=0, length=size, transform_descriptors=None
        )
        for i, (rel, size) in enumerate(sorted(files.items()))
    }
    out = io.BytesIO()
    _TorchNamePickler(out, protocol=2).dump(
        _Metadata(state_dict_metadata={}, planner_data=None, storage_data=storage, version="1.0.0")
    )
    return out.getvalue()


def safetensors_bytes(payload: bytes) -> bytes:
    """A one-tensor safetensors file (uint8) holding `payload`."""
    header = json.dumps({"w": {"dtype": "U8", "shape": [len(payload)], "data_offsets": [0, len(payload)]}})
    return struct.pack("<Q", len(header)) + header.encode() + payload


def shard_bytes(step: int, i: int, size: int) -> bytes:
    seed = f"{step}:{i}:".encode()
    return (seed * (size // len(seed) + 1))[:size]


def checkpoint_dir(layout: str, step: int) -> str:
    return DIR_NAMES[layout].format(step=step)


def write_checkpoint(
    store: Store,
    layout: str,
    step: int,
    *,
    shards: int = 4,
    shard_size: int = 256,
    commit: bool = True,
    manifest: bool | None = None,
    created: datetime | None = None,
) -> str:
    """Write checkpoint `step` in `layout`; `commit=False` stops before the commit marker
    (a crash mid-save). `manifest=True` adds a Lifeboat manifest to any layout (it is the
    commit marker of the `manifest` layout). Returns the directory name."""
    d = checkpoint_dir(layout, step)
    files: list[tuple[str, bytes]] = []
    for i in range(shards):
        name = {
            "dcp": f"__{i}_0.distcp",
            "deepspeed": f"zero_pp_rank_{i}_mp_rank_00_optim_states.pt",
            "megatron": f"mp_rank_{i:02d}/model_optim_rng.pt",
            "hf": f"model-{i + 1:05d}-of-{shards:05d}.safetensors",
            "hf-weights": f"model-{i + 1:05d}-of-{shards:05d}.safetensors",
            "manifest": f"shard-{i:06d}.bin",
        }[layout]
        data = shard_bytes(step, i, shard_size)
        files.append((name, safetensors_bytes(data) if name.endswith(".safetensors") else data))
    if layout == "deepspeed":
        files.append(("mp_rank_00_model_states.pt", shard_bytes(step, -1, shard_size)))
    if layout == "hf-weights":
        files.insert(0, ("config.json", json.dumps({"model_type": "tiny"}).encode()))
    for name, data in files:
        store.put(f"{d}/{name}", data)
    markers: list[tuple[str, bytes]] = []
    if layout == "dcp":
        markers.append((".metadata", dcp_metadata({n: len(b) for n, b in files})))
    elif layout in ("hf", "hf-weights"):
        weight_map = {f"layer.{i}.weight": n for i, (n, _) in enumerate(files) if n.endswith(".safetensors")}
        markers.append(("model.safetensors.index.json", json.dumps({"weight_map": weight_map}).encode()))
    if layout == "hf":  # the Trainer's commit point, written after the weights
        markers.append(("trainer_state.json", json.dumps({"global_step": step}).encode()))
    if not commit:
        return d
    for name, data in markers:
        store.put(f"{d}/{name}", data)
    if manifest or (manifest is None and layout == "manifest"):
        entries = files + markers
        m = Manifest(
            step=step,
            created=created or datetime.now().astimezone(),
            shards=tuple(sorted((Shard(n, len(b), crc32c(b)) for n, b in entries), key=lambda s: s.path)),
        )
        store.put(f"{d}/{MANIFEST_NAME}", m.to_json(), if_none_match=True)
    if layout == "deepspeed":
        store.put("latest", d.encode())
    elif layout == "megatron":
        store.put("latest_checkpointed_iteration.txt", str(step).encode())
    return d


def replicate(source: Store, replica: Store, directory: str, *, receipt: bool = False) -> int:
    """Copy every object of `directory/` from source to replica; returns objects copied.
    `receipt=True` then writes the replication receipt (core/checkpoints/receipt.py)."""
    n = 0
    for info in source.list(f"{directory}/"):
        if replica.server_copy(source, info.key, info.key) is None:
            replica.put(info.key, source.read(info.key))
        n += 1
    if receipt:
        from lifeboat_dr.core.checkpoints.receipt import write_receipt

        write_receipt(replica, directory)
    from lifeboat_dr.core.checkpoints.layouts import POINTERS
    from lifeboat_dr.core.checkpoints.protocols import pointer_step

    step = pointer_step(directory)
    for name in POINTERS:  # a root pointer naming this step goes last, as replication does
        try:
            text = b"".join(source.read(name))
        except NotFound:
            continue
        if step is not None and pointer_step(text.decode("utf-8", "replace")) == step:
            replica.put(name, text)
    return n
