"""The model version a server runs, as one digest of its weight files.

`sha256:` over the sorted lines `path<TAB>size<TAB>crc32c` of every weight file, paths
relative to the weights directory. Lifeboat computes it from the *certified* weights in the
secondary's store (`store_weights_digest`); a model server computes it from the files it
loaded (`dir_weights_digest`) and reports it. Equal digests mean the same bytes, file by
file; Lifeboat's own bookkeeping files (manifest, receipt) are not weights and not counted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from lifeboat_dr.core.checkpoints.manifest import MANIFEST_NAME
from lifeboat_dr.core.checkpoints.receipt import RECEIPT_NAME
from lifeboat_dr.kernel.crc32c import crc32c_of
from lifeboat_dr.providers.storage.base import Store

_NOT_WEIGHTS = {MANIFEST_NAME, RECEIPT_NAME}


def weights_digest(files: Iterable[tuple[str, int, int]]) -> str:
    """Digest of (relative path, size, crc32c) triples, in any order."""
    h = hashlib.sha256()
    for path, size, crc in sorted(files):
        h.update(f"{path}\t{size}\t{crc:08x}\n".encode())
    return "sha256:" + h.hexdigest()


def store_weights_digest(store: Store, prefix: str) -> str:
    """Digest of the weights under `prefix/` in a store (CRC32C by metadata, else streamed)."""
    base = prefix.rstrip("/") + "/"
    files = []
    for info in store.list(base):
        rel = info.key[len(base) :]
        if rel.rsplit("/", 1)[-1] in _NOT_WEIGHTS:
            continue
        crc = info.crc32c
        if crc is None:
            crc = store.head(info.key).crc32c
        if crc is None:
            crc = crc32c_of(store.read(info.key))
        files.append((rel, info.size, crc))
    if not files:
        raise ValueError(f"{store.uri}/{base}: no weight files")
    return weights_digest(files)


def dir_weights_digest(directory: str | Path) -> str:
    """Digest of the weight files a server loaded from a local directory."""
    root = Path(directory)
    files = [
        (p.relative_to(root).as_posix(), p.stat().st_size, crc32c_of([p.read_bytes()]))
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name not in _NOT_WEIGHTS and not p.name.startswith(".")
    ]
    if not files:
        raise ValueError(f"{root}: no weight files")
    return weights_digest(files)
