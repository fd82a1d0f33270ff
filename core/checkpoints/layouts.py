"""Checkpoint layouts: find the checkpoints in a store and what each directory holds.

A checkpoint is a top-level directory of the store (`global_step1200/`, `iter_0001200/`,
`checkpoint-1200/`, `step_1200/`). Discovery lists the store once and keeps, per directory,
a summary (object count, newest write, well-known marker files) and the objects themselves:
in memory while the store is small enough (`cache_limit`), past that in a temporary file
(one `marshal` block per batch of objects, read back a block at a time), so certification never lists a
store twice whatever its size, and memory stays flat.

Whether each is complete is each framework's own commit protocol, judged from what discovery
found: core/checkpoints/protocols.py (`incomplete_reason`). A root pointer (`latest`,
`latest_checkpointed_iteration.txt`) is part of that protocol: a step past the one it names
never committed; it is never followed alone.
"""

from __future__ import annotations

import marshal
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from lifeboat_dr.core.checkpoints.manifest import MANIFEST_NAME
from lifeboat_dr.core.checkpoints.receipt import RECEIPT_NAME
from lifeboat_dr.core.fencing import COMMIT_MARKER
from lifeboat_dr.core.transfer_records import sorted_items
from lifeboat_dr.kernel.errors import ConfigError, NotFound, RefusedKey
from lifeboat_dr.providers.storage.base import ObjectInfo, Store

LAYOUTS = ("dcp", "deepspeed", "megatron", "hf", "hf-weights", "manifest")
POINTERS = ("latest", "latest_checkpointed_iteration.txt")
HF_INDEX = "model.safetensors.index.json"  # a sharded safetensors checkpoint's index
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
    "config.json",
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
# Objects a discovery holds in memory before it spills them to its file (~350 bytes each):
# a replication pass's peak is its byte budget on top of what discovery left allocated, so
# this stays small (20,000 held 7 MiB of a 100 MiB goal, #31); reading the file back is cheap.
CACHE_LIMIT = 2_000


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
    spilled: list[tuple[_Spill, int, int]] = field(default_factory=list)  # past it: file ranges

    @property
    def prefix(self) -> str:
        return f"{self.name}/"

    def files(self, store: Store) -> Iterator[ObjectInfo]:
        """Every object in the checkpoint, sorted: from memory, from the spill file, or
        (a directory built by hand, with neither) listed."""
        if self.objects is not None:
            return iter(self.objects)
        if self.spilled:
            return (info for spill, start, end in self.spilled for info in spill.read(start, end))
        return store.list(self.prefix)


class _Spill:
    """Listed objects past the cache limit, in an unnamed temporary file: each `write` one
    `marshal` block of plain tuples (str, int, None: decoded in C, all at once, and only ever
    read back by this process), read back whole. Reads use offsets (pread), so readers never
    share a file position; a block holds at most the cache limit's objects (flat memory)."""

    def __init__(self):
        self._file = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the discovery
        self._fd = self._file.fileno()
        self.size = 0

    def write(self, infos: list[ObjectInfo]) -> tuple[int, int]:
        """Append objects as one block; returns its byte range."""
        block = marshal.dumps(
            [(i.key, i.size, i.updated.isoformat(), i.version, i.crc32c, i.etag) for i in infos]
        )
        start = self.size
        os.pwrite(self._fd, block, start)
        self.size += len(block)
        return start, self.size

    def read(self, start: int, end: int) -> Iterator[ObjectInfo]:
        """The objects of one range `write` returned, in the order written."""
        block = os.pread(self._fd, end - start, start)
        if len(block) != end - start:
            raise OSError(f"spill file: read {len(block)} of {end - start} bytes at {start}")
        for key, size, updated, version, crc, etag in marshal.loads(block):
            yield ObjectInfo(key, size, datetime.fromisoformat(updated), version, crc, etag)


@dataclass
class Discovery:
    layout: str | None  # resolved layout (None: an empty store under `auto`)
    checkpoints: list[CheckpointDir]  # newest (highest step) first
    pointers: dict[str, str]  # pointer file -> its content, e.g. {"latest": "global_step1200"}
    objects: int = 0
    pointer_infos: dict[str, ObjectInfo] = field(default_factory=dict)  # the pointer files as listed
    names: frozenset[str] = frozenset()  # every top-level directory listed, checkpoint or not


def discover(
    store: Store,
    layout: str = "auto",
    *,
    cache_limit: int = CACHE_LIMIT,
    listing: Iterable[ObjectInfo] | None = None,
) -> Discovery:
    """List `store` once and return its checkpoints of `layout` (or the detected one).
    `listing`: the store's objects in key order, known already (`rediscover`): not listed."""
    dirs: dict[str, CheckpointDir] = {}
    pointer_infos: dict[str, ObjectInfo] = {}
    cached = total = 0
    spill: _Spill | None = None  # past cache_limit: objects go to a file, summaries stay
    pending: list[ObjectInfo] = []  # objects of `current` not yet written to the spill
    current: CheckpointDir | None = None

    def flush() -> None:
        if pending:
            start, end = spill.write(pending)
            current.spilled.append((spill, start, end))
            pending.clear()

    for info in store.list() if listing is None else listing:
        total += 1
        top, sep, rest = info.key.partition("/")
        if not sep:
            if top in POINTERS:
                pointer_infos[top] = info
            continue
        d = dirs.get(top)
        if d is None:
            d = dirs[top] = CheckpointDir(name=top, step=-1, objects=None if spill else [])
        d.count += 1
        d.bytes += info.size
        d.newest = info.updated if d.newest is None or info.updated > d.newest else d.newest
        if rest in _MARKERS:
            d.markers[rest] = info
        if rest.endswith(_SUFFIXES):
            for flag, (suffix, pattern) in _FLAGS.items():
                if flag not in d.flags and rest.endswith(suffix) and pattern.search(rest):
                    d.flags.add(flag)
        if spill is None and cached < cache_limit:
            d.objects.append(info)
            cached += 1
            continue
        if spill is None:  # the limit is reached: what is cached moves to the file
            spill = _Spill()
            for other in dirs.values():
                if other.objects:
                    other.spilled.append((spill, *spill.write(other.objects)))
                other.objects = None
        if d is not current:
            flush()
            current = d
        pending.append(info)
        if len(pending) >= 1000:
            flush()
    if spill is not None:
        flush()
    resolved = layout if layout != "auto" else detect_layout(dirs.values(), pointer_infos)
    if resolved is None:
        if dirs:
            raise ConfigError(
                f"{store.uri}: no checkpoint layout recognised (looked for {', '.join(LAYOUTS)}); "
                "set checkpoint.layout in the runbook"
            )
        return Discovery(None, [], {}, total, pointer_infos, frozenset(dirs))
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
    return Discovery(resolved, checkpoints, pointers, total, pointer_infos, frozenset(dirs))


def rediscover(
    store: Store,
    before: Discovery,
    directories: Mapping[str, Mapping[str, ObjectInfo] | None],
    pointers: Mapping[str, ObjectInfo] = {},  # noqa: B006 - read only
) -> Discovery:
    """The store as `before` listed it, with what this run changed since: each of
    `directories` (a top-level directory's name -> its objects by path under it, as the run
    left them; None: unknown, listed again) and the `pointers` it wrote. A discovery of the
    store without listing it a second time. Objects written since by someone else are not in
    it: whoever acts on it must only ever keep more for what it cannot see (retention does).
    Where the store's listing carries no CRC32C, neither does this one."""
    strip = not store.capabilities.crc32c_in_list

    def objects(name: str, known: Mapping[str, ObjectInfo] | None) -> Iterator[ObjectInfo]:
        if known is None:
            yield from store.list(f"{name}/")
            return
        for _, info in sorted_items(known):
            yield replace(info, crc32c=None) if strip and info.crc32c is not None else info

    def listing() -> Iterator[ObjectInfo]:
        listed = {d.name: d for d in before.checkpoints}
        for name in sorted(listed.keys() | directories.keys()):
            if name in directories:
                yield from objects(name, directories[name])
            else:
                yield from listed[name].files(store)
        roots = {**before.pointer_infos, **pointers}
        yield from (roots[name] for name in sorted(roots))

    return discover(store, before.layout or "auto", listing=listing())


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
    if any("config.json" in d.markers and _has_weights(d) for d in dirs):
        return "hf-weights"
    return None


def _has_weights(d: CheckpointDir) -> bool:
    return bool({"model.safetensors", HF_INDEX} & d.markers.keys())


def _step(layout: str, d: CheckpointDir) -> int | None:
    pattern = _DIR_STEP.get(layout)
    if pattern is not None:
        m = pattern.match(d.name)
        return int(m.group(1)) if m else None
    if layout == "dcp" and not (".metadata" in d.markers or "distcp" in d.flags):
        return None  # some other directory (logs, tokenizer): not a checkpoint
    if layout == "hf-weights" and not ("config.json" in d.markers or _has_weights(d)):
        return None
    m = _ANY_STEP.search(d.name)
    return int(m.group(1)) if m else None


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
    """A pointer file's text; "" when it is gone or refused (a link leaving the store): a
    pointer that names nothing commits nothing."""
    try:
        return b"".join(store.read(key, 0, limit)).decode("utf-8", "replace")
    except (NotFound, RefusedKey):
        return ""
