"""Small synthetic checkpoints in every layout, for tests, benchmarks and the demo.

`write_checkpoint` writes what a training framework would (shards first, the commit marker
last); `replicate` copies a checkpoint directory to another store the way replication does
(server-side where the stores allow, streamed otherwise).
"""

from __future__ import annotations

import json
from datetime import datetime

from lifeboat.checkpoints.manifest import MANIFEST_NAME, Manifest, Shard
from lifeboat.crc32c import crc32c
from providers.storage.base import Store

DIR_NAMES = {
    "dcp": "step_{step:07d}",
    "deepspeed": "global_step{step}",
    "megatron": "iter_{step:07d}",
    "hf": "checkpoint-{step}",
    "manifest": "step_{step:07d}",
}


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
            "manifest": f"shard-{i:06d}.bin",
        }[layout]
        files.append((name, shard_bytes(step, i, shard_size)))
    if layout == "deepspeed":
        files.append(("mp_rank_00_model_states.pt", shard_bytes(step, -1, shard_size)))
    for name, data in files:
        store.put(f"{d}/{name}", data)
    markers: list[tuple[str, bytes]] = []
    if layout == "dcp":
        markers.append((".metadata", json.dumps({"step": step}).encode()))
    elif layout == "hf":
        weight_map = {f"layer.{i}.weight": name for i, (name, _) in enumerate(files)}
        markers.append(("model.safetensors.index.json", json.dumps({"weight_map": weight_map}).encode()))
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
    `receipt=True` then writes the replication receipt (lifeboat/checkpoints/receipt.py)."""
    n = 0
    for info in source.list(f"{directory}/"):
        if replica.server_copy(source, info.key, info.key) is None:
            replica.put(info.key, source.read(info.key))
        n += 1
    if receipt:
        from lifeboat.checkpoints.receipt import write_receipt

        write_receipt(replica, directory)
    return n
