"""Lifeboat's checkpoint manifest: per-shard size and CRC32C, committed last.

A checkpoint directory `<prefix>/` is complete only once `lifeboat-manifest.json` exists in
it; the manifest is written create-only after every shard, so a crash mid-checkpoint leaves
an uncommitted (incomplete) checkpoint, never a wrong one. Format (JSON):

    {"format": "lifeboat-manifest/1", "step": 1200, "created": "2026-11-30T08:00:00+00:00",
     "shards": [{"path": "model-00001.npy", "size": 4096, "crc32c": "1a2b3c4d"}, ...]}

`path` is relative to the checkpoint directory; `crc32c` is 8 lowercase hex digits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from lifeboat.crc32c import crc32c_of
from lifeboat.errors import ConfigError
from providers.storage.base import Store, join

MANIFEST_NAME = "lifeboat-manifest.json"
FORMAT = "lifeboat-manifest/1"


@dataclass(frozen=True)
class Shard:
    path: str
    size: int
    crc32c: int


@dataclass(frozen=True)
class Manifest:
    step: int
    created: datetime
    shards: tuple[Shard, ...]

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "format": FORMAT,
                "step": self.step,
                "created": self.created.isoformat(),
                "shards": [
                    {"path": s.path, "size": s.size, "crc32c": f"{s.crc32c:08x}"} for s in self.shards
                ],
            },
            indent=1,
        ).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str = "manifest") -> Manifest:
        try:
            doc = json.loads(data)
            if doc.get("format") != FORMAT:
                raise ValueError(f"format is {doc.get('format')!r}, expected {FORMAT!r}")
            return cls(
                step=int(doc["step"]),
                created=datetime.fromisoformat(doc["created"]),
                shards=tuple(
                    Shard(path=s["path"], size=int(s["size"]), crc32c=int(s["crc32c"], 16))
                    for s in doc["shards"]
                ),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"{where}: not a valid Lifeboat manifest: {e}") from None


def build_manifest(store: Store, prefix: str, step: int) -> Manifest:
    """Describe every object under `prefix/` (but an old manifest), streaming those whose
    CRC32C the store does not report by metadata."""
    shards = []
    for info in store.list(prefix.rstrip("/") + "/"):
        rel = info.key[len(prefix.rstrip("/")) + 1 :]
        if rel == MANIFEST_NAME:
            continue
        crc = info.crc32c if info.crc32c is not None else crc32c_of(store.read(info.key))
        shards.append(Shard(path=rel, size=info.size, crc32c=crc))
    return Manifest(step=step, created=datetime.now(UTC), shards=tuple(shards))


def commit_manifest(store: Store, prefix: str, manifest: Manifest) -> None:
    """Write the manifest create-only: the commit point of the checkpoint."""
    store.put(join(prefix, MANIFEST_NAME), manifest.to_json(), if_none_match=True)


def write_manifest(directory: str | Path, step: int) -> Manifest:
    """For training jobs: commit the local checkpoint `directory` (shards already written)."""
    from providers.storage.local import LocalStore

    directory = Path(directory).resolve()
    store = LocalStore(directory.parent)
    manifest = build_manifest(store, directory.name, step)
    commit_manifest(store, directory.name, manifest)
    return manifest
