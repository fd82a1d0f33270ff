"""Answers that cost an `import sky` (~3 s), kept by the exact inputs they were computed from.

A key is the SHA-256 of everything the answer depends on: file contents (runbook, task
YAML), the catalog's files (path, size, mtime), the arguments, SkyPilot's version. Same
inputs, same answer: the optimizer is deterministic over a fixed catalog, and the schema
check over a fixed file. A changed input is a new key, so nothing stale is ever served;
entries are JSON files under `$LIFEBOAT_CACHE_DIR` (default `~/.cache/lifeboat/memo`),
written atomically, and a corrupt one is ignored and recomputed. `LIFEBOAT_MEMO_REFRESH=1`
recomputes and rewrites instead of reading (a background refresh).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

SKY_VERSION = "0.14.1"  # pinned in pyproject.toml; part of every key


def cache_dir() -> Path:
    env = os.environ.get("LIFEBOAT_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "lifeboat" / "memo"


def fingerprint(*, files: Iterable[Path] = (), trees: Iterable[Path] = (), **values: Any) -> str:
    """SHA-256 over file contents, the (path, size, mtime) of every file under `trees`, and
    `values` (JSON). A missing file hashes as missing."""
    h = hashlib.sha256(SKY_VERSION.encode())
    for f in files:
        h.update(str(f).encode())
        try:
            h.update(Path(f).read_bytes())
        except OSError:
            h.update(b"\0missing")
    for root in trees:
        for p in sorted(Path(root).rglob("*")) if Path(root).exists() else ():
            if p.is_file():
                st = p.stat()
                h.update(f"{p}:{st.st_size}:{st.st_mtime_ns}".encode())
    h.update(json.dumps(values, sort_keys=True, default=str).encode())
    return h.hexdigest()


def remembered(kind: str, key: str, compute: Callable[[], Any]) -> tuple[Any, bool]:
    """`compute()`'s JSON-able answer for `key`, from the cache when there; returns
    (answer, hit). An unwritable cache only costs the speed-up."""
    path = cache_dir() / kind / f"{key}.json"
    if not os.environ.get("LIFEBOAT_MEMO_REFRESH"):  # set: recompute and rewrite (a refresh)
        with contextlib.suppress(OSError, ValueError, KeyError):
            return json.loads(path.read_text())["value"], True
    value = compute()
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump({"value": value}, f)
        os.replace(tmp, path)
    return value, False
