"""Certification cost: API calls, bytes read and wall time against a bare list loop.

A 1,000-shard checkpoint (with its manifest) is written to a source bucket and copied to a
replica bucket on moto (S3, real HTTP on loopback) and on the GCS emulator. Each mode is
timed against a bare `list_objects_v2` / `list_blobs` loop over the buckets that mode
touches, in the same run (best of 3 each). Then a 100,000-shard manifest is certified over
a generated store to show memory stays flat as the shard count grows.

At scale (`_at_scale`): 100,000 objects in one checkpoint on a moto server in its own process
that counts requests (benchmarks/_s3server.py), source and replica buckets, manifest and
replication receipt: certification with the source down and with it up, each against a bare
`list_objects_v2` loop over the same buckets, interleaved (the server cuts list pages from a
sorted index: moto's own listing is O(n) per page, an hour at this size). Goal: <= 1.2x the bare list, one
listing of each side (LIST requests counted at the server). `LIFEBOAT_BENCH_QUICK=1`: 25,000
objects (still past the 20,000-object cache limit).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime

from benchmarks._goals import goal
from lifeboat_dr.core.certify import certify_replica
from lifeboat_dr.core.checkpoints.manifest import FORMAT, MANIFEST_NAME
from lifeboat_dr.kernel.crc32c import crc32c
from lifeboat_dr.kernel.errors import NotFound
from lifeboat_dr.providers.storage.base import Capabilities, ObjectInfo
from lifeboat_dr.standins.checkpoints import shard_bytes

SHARDS = 1000
SHARD_SIZE = 4096
REPEAT = 5
GCS_REPEAT = 15  # a GCS emulator round is ~40 ms: more rounds, steadier minimum
STEP = 1000
DIR = f"step_{STEP:07d}"


def _best(*fns, repeat=REPEAT):
    """Best wall time of each function, run interleaved so machine noise hits all alike."""
    best, results = [float("inf")] * len(fns), [None] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t = time.perf_counter()
            results[i] = fn()
            best[i] = min(best[i], time.perf_counter() - t)
    return list(zip(best, results, strict=True))


def _write(store, n=SHARDS):
    """DCP-named shards plus .metadata, committed by a Lifeboat manifest (certified by it: the
    `.metadata` here is no torch pickle, so the `dcp` layout would read it as incomplete)."""
    from lifeboat_dr.core.checkpoints.manifest import Manifest, Shard

    files = [(f"__{i}_0.distcp", shard_bytes(STEP, i, SHARD_SIZE)) for i in range(n)]
    files.append((".metadata", b'{"step": 1000}'))
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda f: store.put(f"{DIR}/{f[0]}", f[1]), files))
    m = Manifest(
        STEP,
        datetime.now(UTC),
        tuple(sorted((Shard(p, len(b), crc32c(b)) for p, b in files), key=lambda s: s.path)),
    )
    store.put(f"{DIR}/{MANIFEST_NAME}", m.to_json())


def _replicate(source, replica):
    keys = [i.key for i in source.list()]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: replica.server_copy(source, k, k), keys))


def _row(name, seconds, baseline, report, calls):
    ratio = seconds / baseline
    certified = report.certified.step if report.certified else None
    if certified != STEP:  # a certification that stopped early must not be timed as a pass
        raise AssertionError(f"{name}: certified {certified}, not step {STEP}: {report.to_dict()}")
    print(
        f"{name:<34} {seconds * 1000:8.1f} ms  {ratio:5.2f}x  certified={certified} mode={report.mode}\n"
        f"{'':<34} object bytes read {report.object_bytes_read:,}, metadata bytes {report.metadata_bytes_read:,}\n"
        f"{'':<34} API calls: {dict(sorted(calls.items()))}"
    )
    return ratio


@contextmanager
def _moto_process():
    """moto in its own process, as a real S3 endpoint is: the client does not share its GIL."""
    import socket
    import urllib.request

    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        os.environ.setdefault(k, v)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(f"{url}/moto-api/", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def _s3():
    import boto3

    from lifeboat_dr.providers.storage.s3 import S3Store
    from lifeboat_dr.testing.emulators import new_s3_bucket

    with _moto_process() as url:
        source = S3Store(new_s3_bucket(url), "run", endpoint_url=url)
        replica = S3Store(new_s3_bucket(url), "run", endpoint_url=url)
        t = time.perf_counter()
        _write(source)
        _replicate(source, replica)
        print(
            f"setup: {SHARDS} shards x {SHARD_SIZE} B on moto, source + replica, {time.perf_counter() - t:.1f}s"
        )
        client = boto3.client("s3", endpoint_url=url, region_name="us-east-1")

        def bare(buckets):
            def loop():
                n = 0
                for b in buckets:
                    for page in client.get_paginator("list_objects_v2").paginate(Bucket=b, Prefix="run/"):
                        n += len(page.get("Contents", []))
                return n

            return loop

        def run(baseline, src, **kw):
            source.calls.clear()
            replica.calls.clear()
            (base, _), (seconds, report) = _best(
                baseline, lambda: certify_replica(replica, src, layout="manifest", **kw)
            )
            calls = {f"replica.{k}": v // REPEAT for k, v in replica.calls.items()}
            calls |= {f"source.{k}": v // REPEAT for k, v in source.calls.items()}
            return base, seconds, report, calls

        ratios = {}
        base, s, r, c = run(bare([source.bucket, replica.bucket]), source)
        print(f"{'bare list_objects_v2, both buckets':<34} {base * 1000:8.1f} ms  1.00x")
        ratios["s3 metadata (ETag)"] = _row("s3 metadata (source up, ETag=MD5)", s, base, r, c)
        base, s, r, c = run(bare([replica.bucket]), None)
        print(f"{'bare list_objects_v2, replica only':<34} {base * 1000:8.1f} ms  1.00x")
        ratios["s3 manifest"] = _row("s3 manifest (no source: HEAD each)", s, base, r, c)
        base, s, r, c = run(bare([source.bucket, replica.bucket]), source, deep=True)
        print(f"{'bare list_objects_v2, both buckets':<34} {base * 1000:8.1f} ms  1.00x")
        _row("s3 deep (stream both sides)", s, base, r, c)

        from lifeboat_dr.core.checkpoints.receipt import write_receipt

        t = time.perf_counter()
        write_receipt(replica, DIR)  # at replication time: the HEADs move out of the incident
        print(f"{'(receipt written after the copy)':<34} {(time.perf_counter() - t) * 1000:8.1f} ms")
        base, s, r, c = run(bare([replica.bucket]), None)
        print(f"{'bare list_objects_v2, replica only':<34} {base * 1000:8.1f} ms  1.00x")
        ratios["s3 manifest + receipt"] = _row("s3 manifest + receipt (no source)", s, base, r, c)
        return ratios


def _gcs():
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from lifeboat_dr.providers.storage.gcs import GcsStore
    from lifeboat_dr.testing.emulators import gcs_emulator, new_gcs_bucket

    with gcs_emulator() as url:
        source = GcsStore(new_gcs_bucket(url), "run", endpoint_url=url)
        replica = GcsStore(new_gcs_bucket(url), "run", endpoint_url=url)
        t = time.perf_counter()
        _write(source)
        _replicate(source, replica)
        print(f"setup: {SHARDS} shards on the GCS emulator, {time.perf_counter() - t:.1f}s")
        client = storage.Client(
            project="lifeboat", credentials=AnonymousCredentials(), client_options={"api_endpoint": url}
        )

        def loop():
            return sum(
                1
                for b in (source.bucket_name, replica.bucket_name)
                for _ in client.list_blobs(b, prefix="run/")
            )

        source.calls.clear()
        replica.calls.clear()
        (both, _), (s, r) = _best(
            loop, lambda: certify_replica(replica, source, layout="manifest"), repeat=GCS_REPEAT
        )
        calls = {f"replica.{k}": v // GCS_REPEAT for k, v in replica.calls.items()}
        calls |= {f"source.{k}": v // GCS_REPEAT for k, v in source.calls.items()}
        (floor, _), (base2, _) = _best(
            lambda: sum(1 for st in (source, replica) for _ in st.list()), loop, repeat=GCS_REPEAT
        )
        print(f"{'bare list_blobs, both buckets':<34} {both * 1000:8.1f} ms  1.00x")
        print(
            f"{'GcsStore.list() both (adapter floor)':<34} {floor * 1000:8.1f} ms  {floor / base2:5.2f}x"
            "  (ObjectInfo per object, no certification)"
        )
        return {"gcs metadata": _row("gcs metadata (list crc32c)", s, both, r, calls)}


class _GeneratedStore:
    """A read-only store whose listing and manifest are generated on the fly, so the memory
    measured is certification's own, not the store's."""

    capabilities = Capabilities(
        crc32c_in_list=True, crc32c_in_head=True, conditional_writes=False, server_side_copy=False
    )

    def __init__(self, n: int):
        self.n, self.uri = n, f"generated://{n}"
        self.when = datetime(2026, 11, 30, tzinfo=UTC)

    def _name(self, i):
        return f"shard-{i:07d}.bin"

    def _crc(self, i):
        return (i * 2654435761) & 0xFFFFFFFF

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        if not f"{DIR}/".startswith(prefix) and not prefix.startswith(f"{DIR}/"):
            return
        yield ObjectInfo(f"{DIR}/{MANIFEST_NAME}", 1, self.when, "1")
        for i in range(self.n):
            yield ObjectInfo(f"{DIR}/{self._name(i)}", 4096, self.when, "1", crc32c=self._crc(i))

    def head(self, key):
        raise NotImplementedError

    def read(self, key, start=0, end=None) -> Iterator[bytes]:
        if key != f"{DIR}/{MANIFEST_NAME}":  # e.g. the site state: never fenced
            raise NotFound(f"{self.uri}/{key}")
        yield f'{{"format": "{FORMAT}", "step": {STEP}, "created": "{self.when.isoformat()}", "shards": ['.encode()
        batch = []
        for i in range(self.n):
            batch.append(f'{{"path": "{self._name(i)}", "size": 4096, "crc32c": "{self._crc(i):08x}"}}')
            if len(batch) == 1000:
                yield (",\n".join(batch) + (",\n" if i + 1 < self.n else "")).encode()
                batch = []
        yield (",\n".join(batch) + "]}").encode()


def _memory():
    print("manifest certification memory (tracemalloc peak during certify_replica):")
    for n in (1_000, 10_000, 30_000, 100_000):
        store = _GeneratedStore(n)
        tracemalloc.start()
        t = time.perf_counter()
        report = certify_replica(store, None, layout="manifest")
        seconds = time.perf_counter() - t
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert report.certified is not None and sum(report.certified.verified_by.values()) == n
        print(
            f"  {n:>7,} shards: peak {peak / 2**20:6.2f} MiB, {seconds:5.2f}s (traced), certified step {report.certified.step}"
        )
    print("  (below 20,000 objects discovery keeps the listing in memory; above, in a temporary file)")


SCALE = 25_000 if os.environ.get("LIFEBOAT_BENCH_QUICK") == "1" else 100_000
SCALE_SIZE = 16


def _scale_fixture(server, store_cls, n: int = SCALE):
    """Source and replica buckets with `n` objects each, the manifest, and the replica's
    receipt; written straight into moto's backend (set-up, not measured)."""
    import hashlib
    import json

    import boto3

    from lifeboat_dr.core.checkpoints.manifest import Manifest, Shard
    from lifeboat_dr.core.checkpoints.receipt import RECEIPT_NAME

    client = boto3.client("s3", endpoint_url=server.url, region_name="us-east-1")
    shards, receipt = [], []
    for i in range(n):
        name = f"{i:07d}.bin"
        value = hashlib.sha256(f"run/{DIR}/{name}".encode()).digest()[:SCALE_SIZE]
        shards.append(Shard(name, SCALE_SIZE, crc32c(value)))
        receipt.append(
            json.dumps(
                {
                    "path": name,
                    "size": SCALE_SIZE,
                    "etag": hashlib.md5(value).hexdigest(),
                    "crc32c": f"{crc32c(value):08x}",
                },
                separators=(",", ":"),
            )
        )
    manifest = Manifest(STEP, datetime.now(UTC), tuple(shards)).to_json()
    stores = []
    for bucket in ("scale-source", "scale-replica"):
        client.create_bucket(Bucket=bucket)
        server.populate(bucket, f"run/{DIR}/", n, SCALE_SIZE)
        store = store_cls(bucket, "run", endpoint_url=server.url)
        store.put(f"{DIR}/{MANIFEST_NAME}", manifest)
        stores.append(store)
    stores[1].put(f"{DIR}/{RECEIPT_NAME}", ("\n".join(receipt) + "\n").encode())
    return client, stores[0], stores[1]


def _at_scale() -> dict[str, float]:
    import statistics

    from benchmarks._s3server import counted_s3
    from lifeboat_dr.providers.storage.s3 import S3Store

    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        os.environ.setdefault(k, v)
    ratios = {}
    with counted_s3(indexed_list=True) as server:
        t = time.perf_counter()
        client, source, replica = _scale_fixture(server, S3Store)
        print(f"\nat scale: {SCALE:,} objects x {SCALE_SIZE} B in one checkpoint, source + replica on moto"
              f" (set-up {time.perf_counter() - t:.0f}s)")  # fmt: skip

        def bare(buckets):
            n = 0
            for b in buckets:
                for page in client.get_paginator("list_objects_v2").paginate(Bucket=b, Prefix="run/"):
                    n += len(page.get("Contents", []))
            return n

        def lists_during(fn):
            before = server.counts()["ops"].get("ListObjects", 0)
            result = fn()
            return result, server.counts()["ops"].get("ListObjects", 0) - before

        for label, src, buckets in (
            ("source down (manifest + receipt)", None, ["scale-replica"]),
            ("source up (ETags)", source, ["scale-source", "scale-replica"]),
        ):
            walls = {"bare": [], "certify": []}
            for _ in range(3):
                t = time.perf_counter()
                _, bare_lists = lists_during(lambda b=buckets: bare(b))
                walls["bare"].append(time.perf_counter() - t)
                t = time.perf_counter()
                report, lists = lists_during(lambda s=src: certify_replica(replica, s, layout="manifest"))
                walls["certify"].append(time.perf_counter() - t)
                assert report.certified is not None and report.certified.step == STEP, report.rejected
            paired = sorted(c / b for c, b in zip(walls["certify"], walls["bare"], strict=True))
            ratio = statistics.median(paired)
            print(
                f"  {label:<34} certify {statistics.median(walls['certify']):6.2f} s  bare list "
                f"{statistics.median(walls['bare']):6.2f} s  ratio {ratio:.2f} ({paired[0]:.2f}-{paired[-1]:.2f})"
                f"\n  {'':<34} LIST requests: certify {lists}, bare {bare_lists}; HEADs "
                f"{report.calls.get('replica.head', 0) + report.calls.get('source.head', 0)}; mode {report.mode}"
            )
            ratios[f"s3 {SCALE // 1000}k {label}"] = ratio
            LISTED_ONCE[f"s3 {SCALE // 1000}k {label}: each side listed once"] = (lists, bare_lists)
    return ratios


LISTED_ONCE: dict[str, tuple[int, int]] = {}  # goal -> (certify's LISTs, the bare loop's)


KNOWN_GAPS = {  # measured and printed, not goals (docs/DESIGN.md, section 5)
    "s3 manifest": "an S3 replica without a Lifeboat receipt needs a HEAD per object with the source down",
    "gcs metadata": "the in-process emulator lists nearly for free, so the adapter's per-object work shows",
}


def main() -> None:
    scale = _at_scale()
    ratios = _s3() | _gcs() | scale
    print("\ngoals: certification reads 0 object bytes and takes <= 1.2x the bare list loop")
    for name, ratio in ratios.items():
        if name not in KNOWN_GAPS:
            goal(f"certify {name}", ratio <= 1.2, f"{ratio:.2f}x wall", "the bare list loop", "<= 1.2x")
    for name, why in KNOWN_GAPS.items():
        print(f"  ----  {name}: {ratios[name]:.2f}x (not a goal: {why})")
    for name, (lists, bare) in LISTED_ONCE.items():
        goal(f"certify {name}", lists == bare, f"{lists} LISTs", f"the bare list's {bare}", "equal")
    _memory()


if __name__ == "__main__":
    main()
