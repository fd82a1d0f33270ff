"""Lifeboat's checkpoint manifest: per-shard size and CRC32C, committed last.

A checkpoint directory `<prefix>/` is complete only once `lifeboat-manifest.json` exists in
it; the manifest is written create-only after every shard, so a crash mid-checkpoint leaves
an uncommitted (incomplete) checkpoint, never a wrong one. Format (JSON):

    {"format": "lifeboat-manifest/1", "step": 1200, "created": "2026-11-30T08:00:00+00:00",
     "shards": [{"path": "model-00001.npy", "size": 4096, "crc32c": "1a2b3c4d"}, ...]}

`path` is relative to the checkpoint directory; `crc32c` is 8 lowercase hex digits.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from lifeboat_dr.kernel.crc32c import crc32c_of
from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.providers.storage.base import Store, join

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
    from lifeboat_dr.providers.storage.local import LocalStore

    directory = Path(directory).resolve()
    store = LocalStore(directory.parent)
    manifest = build_manifest(store, directory.name, step)
    commit_manifest(store, directory.name, manifest)
    return manifest


def iter_manifest(chunks: Iterable[bytes], where: str = "manifest") -> tuple[dict, Iterator[Shard]]:
    """Parse a manifest incrementally: its header now, its shards as a stream.

    Memory stays flat however many shards it lists (a 100,000-shard manifest is ~7 MB of
    JSON). Manifests written by `Manifest.to_json` put `shards` last, which this relies on;
    any other key order falls back to parsing the whole document."""
    it = _text(chunks, where)
    buf = ""
    decoder = json.JSONDecoder()
    while True:
        m = re.search(r'"shards"\s*:\s*\[', buf)
        if m:
            break
        chunk = next(it, None)
        if chunk is None:  # no shards key: let the strict parser explain
            return _whole(buf.encode(), where)
        buf += chunk
    head_text = buf[: m.start()].rstrip().rstrip(",") + "}"
    try:
        header = json.loads(head_text)
        header = {"format": header["format"], "step": int(header["step"]), "created": header["created"]}
        header["created"] = datetime.fromisoformat(header["created"])
    except (ValueError, KeyError, TypeError):  # another key order: parse the whole document
        return _whole((buf + "".join(it)).encode(), where)
    if header.pop("format") != FORMAT:
        return _whole((buf + "".join(it)).encode(), where)  # the strict parser names the problem
    rest = buf[m.end() :]

    def shards() -> Iterator[Shard]:
        nonlocal rest
        pos = 0
        while True:
            while True:  # skip separators, refilling the buffer as needed
                while pos < len(rest) and rest[pos] in " \t\r\n,":
                    pos += 1
                if pos < len(rest):
                    break
                chunk = next(it, None)
                if chunk is None:
                    raise ConfigError(f"{where}: not a valid Lifeboat manifest: truncated shard list")
                rest, pos = rest[pos:] + chunk, 0
            if rest[pos] == "]":
                return
            try:
                obj, end = decoder.raw_decode(rest, pos)
            except json.JSONDecodeError:
                chunk = next(it, None)
                if chunk is None:
                    raise ConfigError(f"{where}: not a valid Lifeboat manifest: truncated shard") from None
                rest, pos = rest[pos:] + chunk, 0
                continue
            try:
                yield Shard(path=obj["path"], size=int(obj["size"]), crc32c=int(obj["crc32c"], 16))
            except (KeyError, TypeError, ValueError) as e:
                raise ConfigError(
                    f"{where}: not a valid Lifeboat manifest: bad shard {obj!r} ({e})"
                ) from None
            pos = end
            if pos > 1 << 16:  # drop what is parsed
                rest, pos = rest[pos:], 0

    return header, shards()


def _text(chunks: Iterable[bytes], where: str) -> Iterator[str]:
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        for chunk in chunks:
            yield decoder.decode(bytes(chunk))
        yield decoder.decode(b"", final=True)
    except UnicodeDecodeError as e:
        raise ConfigError(f"{where}: not a valid Lifeboat manifest: not UTF-8 ({e.reason})") from None


def _whole(data: bytes, where: str) -> tuple[dict, Iterator[Shard]]:
    manifest = Manifest.from_json(data, where)
    return {"step": manifest.step, "created": manifest.created}, iter(
        sorted(manifest.shards, key=lambda s: s.path)
    )
