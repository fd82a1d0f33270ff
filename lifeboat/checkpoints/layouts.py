"""Checkpoint layouts: find the checkpoints in a store and say whether each is complete.

A checkpoint is a top-level directory of the store (`global_step1200/`, `iter_0001200/`,
`checkpoint-1200/`, `step_1200/`). Discovery lists the store once and keeps, per directory,
a summary (object count, newest write, well-known marker files) — and the objects
themselves while the store is small enough (`cache_limit`), so certification does not list
twice; past that it re-lists one directory at a time and memory stays flat.

Completeness, by layout (a "latest" pointer is read and reported, never trusted):
- dcp: `.metadata` exists (rank 0 writes it last) and at least one `.distcp` shard.
- deepspeed: `global_stepN/` holds model states (`*model_states.pt`).
- megatron / nemo: `iter_NNNNNNN/` holds `mp_rank_*/model_optim_rng.pt`, or a torch_dist
  checkpoint (`.metadata` + `metadata.json` or `common.pt`).
- hf: `checkpoint-N/` holds `model.safetensors`, or `model.safetensors.index.json` and every
  shard its weight_map names.
- manifest: `lifeboat-manifest.json` exists (committed last). Shards are checked against it
  by certification.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

from lifeboat.checkpoints.manifest import MANIFEST_NAME
from lifeboat.checkpoints.receipt import RECEIPT_NAME
from lifeboat.errors import ConfigError, NotFound
from lifeboat.fencing import COMMIT_MARKER
from providers.storage.base import ObjectInfo, Store

LAYOUTS = ("dcp", "deepspeed", "megatron", "hf", "manifest")
POINTERS = ("latest", "latest_checkpointed_iteration.txt")
HF_INDEX = "model.safetensors.index.json"
_MARKERS = {
    ".metadata",
    HF_INDEX,
    "model.safetensors",
    "trainer_state.json",
    MANIFEST_NAME,
    RECEIPT_NAME,
    COMMIT_MARKER,
    "metadata.json",
    "common.pt",
}
_FLAGS = {  # flag -> (cheap suffix test, exact pattern)
    "distcp": (".distcp", re.compile(r"\.distcp$")),
    "model_states": ("model_states.pt", re.compile(r"(^|/)[^/]*model_states\.pt$")),
    "model_optim_rng": ("/model_optim_rng.pt", re.compile(r"(^|/)mp_rank_[0-9_]+/model_optim_rng\.pt$")),
}
_SUFFIXES = tuple(suffix for suffix, _ in _FLAGS.values())
_DIR_STEP = {
    "deepspeed": re.compile(r"^global_step(\d+)$"),
    "megatron": re.compile(r"^iter_(\d+)$"),
    "hf": re.compile(r"^checkpoint-(\d+)$"),
}
_ANY_STEP = re.compile(r"(\d+)(?!.*\d)")


@dataclass
class CheckpointDir:
    """One checkpoint directory as discovery saw it."""

    name: str  # top-level directory under the store root, without the trailing slash
    step: int
    count: int = 0  # objects under it
    bytes: int = 0
    newest: datetime | None = None  # latest object write
    markers: dict[str, ObjectInfo] = field(default_factory=dict)  # well-known files, by name
    flags: set[str] = field(default_factory=set)  # shard kinds seen: distcp, model_states, ...
    objects: list[ObjectInfo] | None = None  # the listing, while under the cache limit

    @property
    def prefix(self) -> str:
        return f"{self.name}/"

    def files(self, store: Store) -> Iterator[ObjectInfo]:
        """Every object in the checkpoint, sorted: from the cache, or listed again."""
        return iter(self.objects) if self.objects is not None else store.list(self.prefix)


@dataclass
class Discovery:
    layout: str | None  # resolved layout (None: an empty store under `auto`)
    checkpoints: list[CheckpointDir]  # newest (highest step) first
    pointers: dict[str, str]  # pointer file -> its content, e.g. {"latest": "global_step1200"}
    objects: int = 0


def discover(store: Store, layout: str = "auto", *, cache_limit: int = 20_000) -> Discovery:
    """List `store` once and return its checkpoints of `layout` (or the detected one)."""
    dirs: dict[str, CheckpointDir] = {}
    pointer_infos: dict[str, ObjectInfo] = {}
    cached = total = 0
    overflow = False  # past cache_limit: keep summaries only
    for info in store.list():
        total += 1
        top, sep, rest = info.key.partition("/")
        if not sep:
            if top in POINTERS:
                pointer_infos[top] = info
            continue
        d = dirs.get(top)
        if d is None:
            d = dirs[top] = CheckpointDir(name=top, step=-1, objects=None if overflow else [])
        d.count += 1
        d.bytes += info.size
        d.newest = info.updated if d.newest is None or info.updated > d.newest else d.newest
        if rest in _MARKERS:
            d.markers[rest] = info
        if rest.endswith(_SUFFIXES):
            for flag, (suffix, pattern) in _FLAGS.items():
                if flag not in d.flags and rest.endswith(suffix) and pattern.search(rest):
                    d.flags.add(flag)
        if not overflow:
            if cached < cache_limit:
                d.objects.append(info)
                cached += 1
            else:
                overflow = True
                for other in dirs.values():
                    other.objects = None
    resolved = layout if layout != "auto" else detect_layout(dirs.values(), pointer_infos)
    if resolved is None:
        if dirs:
            raise ConfigError(
                f"{store.uri}: no checkpoint layout recognised (looked for {', '.join(LAYOUTS)}); "
                "set checkpoint.layout in the runbook"
            )
        return Discovery(layout=None, checkpoints=[], pointers={}, objects=total)
    if resolved not in LAYOUTS:
        raise ConfigError(f"unknown checkpoint layout {resolved!r}; use auto or one of {', '.join(LAYOUTS)}")
    checkpoints = []
    for d in dirs.values():
        step = _step(resolved, d)
        if step is not None:
            d.step = step
            checkpoints.append(d)
    checkpoints.sort(key=lambda d: (d.step, d.newest), reverse=True)
    pointers = {name: _read_text(store, name) for name in pointer_infos}
    return Discovery(layout=resolved, checkpoints=checkpoints, pointers=pointers, objects=total)


def detect_layout(dirs, pointer_infos: dict[str, ObjectInfo]) -> str | None:
    """Guess the layout from directory names and marker files; None when nothing matches."""
    dirs = list(dirs)
    if any(MANIFEST_NAME in d.markers for d in dirs):
        return "manifest"
    if "latest" in pointer_infos or any(_DIR_STEP["deepspeed"].match(d.name) for d in dirs):
        return "deepspeed"
    if "latest_checkpointed_iteration.txt" in pointer_infos or any(
        _DIR_STEP["megatron"].match(d.name) for d in dirs
    ):
        return "megatron"
    if any(_DIR_STEP["hf"].match(d.name) for d in dirs):
        return "hf"
    if any(".metadata" in d.markers or "distcp" in d.flags for d in dirs):
        return "dcp"
    return None


def _step(layout: str, d: CheckpointDir) -> int | None:
    pattern = _DIR_STEP.get(layout)
    if pattern is not None:
        m = pattern.match(d.name)
        return int(m.group(1)) if m else None
    if layout == "dcp" and not (".metadata" in d.markers or "distcp" in d.flags):
        return None  # some other directory (logs, tokenizer): not a checkpoint
    m = _ANY_STEP.search(d.name)
    return int(m.group(1)) if m else None


def incomplete_reason(store: Store, layout: str, d: CheckpointDir) -> str | None:
    """Why checkpoint `d` is incomplete for `layout`, or None when it is complete."""
    if layout == "manifest":
        if MANIFEST_NAME not in d.markers:
            return f"uncommitted: no {MANIFEST_NAME} (the manifest is written last)"
        return None
    if layout == "dcp":
        if ".metadata" not in d.markers:
            return "no .metadata (rank 0 writes it last): the save did not finish"
        if "distcp" not in d.flags:
            return ".metadata but no .distcp shard"
        return None
    if layout == "deepspeed":
        return None if "model_states" in d.flags else "no model states (*model_states.pt)"
    if layout == "megatron":
        if "model_optim_rng" in d.flags:
            return None
        if ".metadata" in d.markers and ({"metadata.json", "common.pt"} & d.markers.keys()):
            return None  # torch_dist format
        return "no mp_rank_*/model_optim_rng.pt and no torch_dist .metadata"
    if layout == "hf":
        if HF_INDEX in d.markers:
            try:
                index = json.loads(_read_text(store, f"{d.name}/{HF_INDEX}"))
                named = sorted(set(index["weight_map"].values()))
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                return f"{HF_INDEX} is not a valid safetensors index ({e})"
            present = {info.key[len(d.prefix) :] for info in d.files(store)}
            missing = [name for name in named if name not in present]
            if missing:
                return f"{HF_INDEX} names shard {missing[0]}, which is missing" + (
                    f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
                )
            return None
        return None if "model.safetensors" in d.markers else f"no model.safetensors or {HF_INDEX}"
    raise ConfigError(f"unknown checkpoint layout {layout!r}")


def pointer_notes(discovery: Discovery) -> list[str]:
    """What the "latest" pointers say, checked against what is actually there."""
    by_name = {d.name: d for d in discovery.checkpoints}
    by_step = {d.step: d for d in discovery.checkpoints}
    notes = []
    for name, text in discovery.pointers.items():
        target = text.strip()
        d = by_name.get(target) or (by_step.get(int(target)) if target.isdigit() else None)
        if d is None:
            notes.append(f"pointer {name} names {target!r}, which is not in the store (not trusted)")
        else:
            notes.append(f"pointer {name} names {target!r} (step {d.step}); checked like any other")
    return notes


def _read_text(store: Store, key: str, limit: int = 64 << 20) -> str:
    try:
        return b"".join(store.read(key, 0, limit)).decode("utf-8", "replace")
    except NotFound:
        return ""
