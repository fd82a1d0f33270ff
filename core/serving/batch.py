"""Batch inference whose checkpoint is its progress: which input shards are done, and the
size and CRC32C of each one's output. Resumed on the secondary, it skips exactly the shards
whose output is there intact, and redoes the rest: exactly-once output.

Store layout (one store per site, replicated like any checkpoint store):

    outputs/<shard>.jsonl                   one object per input shard, at a fixed key
    progress-000012/progress.json           {"format": ..., "done": {shard: {"key", "size", "crc32c"}}}
    progress-000012/lifeboat-manifest.json  committed last (the `manifest` layout)

A progress checkpoint is certified like any other (`certify_replica(..., layout="manifest")`).
Why exactly once: an output is written whole to its shard's own key before the shard counts
as done, so redoing a shard replaces its output instead of adding a second; a shard counts as
done on resume only if its output on *this* store has the recorded size and CRC32C, so a
missing or corrupt replica output is redone, never skipped; shards finished after the last
checkpoint are not in it and are redone (the at-least-once part that the fixed key makes
exactly-once).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lifeboat_dr.core.checkpoints.manifest import build_manifest, commit_manifest
from lifeboat_dr.kernel.crc32c import crc32c, crc32c_of
from lifeboat_dr.kernel.errors import ConfigError, NotFound
from lifeboat_dr.providers.storage.base import Store

FORMAT = "lifeboat-batch-progress/1"
PROGRESS = "progress.json"
_SHARD = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


@dataclass(frozen=True)
class Done:
    key: str  # the output object, outputs/<shard>.jsonl
    size: int
    crc32c: int


def output_key(shard: str) -> str:
    if not _SHARD.match(shard) or shard in (".", ".."):
        raise ConfigError(f"input shard name {shard!r}: letters, digits, . _ - only")
    return f"outputs/{shard}.jsonl"


def progress_dir(n: int) -> str:
    return f"progress-{n:06d}"


def last_progress_number(store: Store) -> int:
    numbers = [re.match(r"progress-(\d+)/", i.key) for i in store.list("progress-")]
    return max((int(m.group(1)) for m in numbers if m), default=0)


def write_progress(store: Store, n: int, done: dict[str, Done]) -> str:
    """Commit progress checkpoint number `n`: progress.json, then its manifest (the commit)."""
    directory = progress_dir(n)
    doc = {
        "format": FORMAT,
        "done": {
            s: {"key": d.key, "size": d.size, "crc32c": f"{d.crc32c:08x}"} for s, d in sorted(done.items())
        },
    }
    store.put(f"{directory}/{PROGRESS}", json.dumps(doc, indent=1).encode())
    commit_manifest(store, directory, build_manifest(store, directory, n))
    return directory


def read_progress(store: Store, directory: str) -> dict[str, Done]:
    """The done shards a (certified) progress checkpoint lists; a hostile entry is an error."""
    where = f"{store.uri}/{directory}/{PROGRESS}"
    try:
        doc = json.loads(b"".join(store.read(f"{directory.rstrip('/')}/{PROGRESS}")))
        if doc.get("format") != FORMAT:
            raise ValueError(f"format is {doc.get('format')!r}, expected {FORMAT!r}")
        done = {
            s: Done(key=e["key"], size=int(e["size"]), crc32c=int(e["crc32c"], 16))
            for s, e in doc["done"].items()
        }
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ConfigError(f"{where}: not a batch progress file: {e}") from None
    for shard, d in done.items():
        if d.key != output_key(shard):  # never trust a path from the file: outputs/<shard> only
            raise ConfigError(f"{where}: shard {shard!r} points at {d.key!r}, expected {output_key(shard)!r}")
    return done


def verified_done(store: Store, done: dict[str, Done]) -> dict[str, Done]:
    """The listed shards whose output on `store` has the recorded size and CRC32C."""
    ok = {}
    for shard, d in done.items():
        try:
            info = store.head(d.key)
        except NotFound:
            continue
        crc = info.crc32c if info.crc32c is not None else crc32c_of(store.read(d.key))
        if info.size == d.size and crc == d.crc32c:
            ok[shard] = d
    return ok


@dataclass
class BatchRun:
    """What one run of the job did."""

    skipped: list[str]  # done before (verified on this store)
    processed: list[str]  # inferred by this run
    checkpoints: list[str]  # progress checkpoints it committed


def run_batch(
    store: Store,
    shards: Sequence[str],
    read_shard: Callable[[str], list[str]],
    infer: Callable[[str], str],
    *,
    every: int = 5,
    resume_from: str | None = None,
    stop_after: int | None = None,
) -> BatchRun:
    """Process every input shard not already done, one output object per shard, committing a
    progress checkpoint every `every` shards and at the end. `resume_from` is a certified
    progress checkpoint directory on `store`. `stop_after=k` stops after k shards' outputs
    are written (a crash, for tests and drills), before any checkpoint that would cover them."""
    resume_from = resume_from.rstrip("/").rsplit("/", 1)[-1] if resume_from else None  # a URI or a name
    done = verified_done(store, read_progress(store, resume_from)) if resume_from else {}
    n = last_progress_number(store)  # past every progress folder here, even a rejected one
    run = BatchRun(skipped=sorted(s for s in shards if s in done), processed=[], checkpoints=[])
    for shard in shards:
        if shard in done:
            continue
        body = "".join(
            json.dumps({"shard": shard, "id": rid, "out": infer(rec)}) + "\n"
            for rid, rec in enumerate(read_shard(shard))
        )
        data = body.encode()
        store.put(output_key(shard), data)
        done[shard] = Done(output_key(shard), len(data), crc32c(data))
        run.processed.append(shard)
        if stop_after is not None and len(run.processed) >= stop_after:
            return run
        if len(run.processed) % every == 0:
            n += 1
            run.checkpoints.append(write_progress(store, n, done))
    if run.processed or not resume_from:
        n += 1
        run.checkpoints.append(write_progress(store, n, done))
    return run


def audit_outputs(store: Store, shards: Sequence[str], records: Callable[[str], list[str]]) -> list[str]:
    """Problems with the finished outputs (empty: exactly once): a shard without output, a
    record missing or repeated, an output for no input shard."""
    problems, expected = [], {output_key(s): s for s in shards}
    for info in store.list("outputs/"):
        if info.key not in expected:
            problems.append(f"stray output {info.key}")
    for key, shard in expected.items():
        try:
            lines = b"".join(store.read(key)).decode().splitlines()
        except NotFound:
            problems.append(f"shard {shard}: no output")
            continue
        ids = [json.loads(line)["id"] for line in lines]
        want = list(range(len(records(shard))))
        if sorted(ids) != want:
            dup = sorted({i for i in ids if ids.count(i) > 1})
            missing = sorted(set(want) - set(ids))
            problems.append(f"shard {shard}: records missing {missing}, repeated {dup}")
    return problems
