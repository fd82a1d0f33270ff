"""Replication throughput: Lifeboat's copy engine vs s5cmd and boto3's transfer manager on the
same moto S3 endpoint, in the same run; then the engine under 5% injected 503 SlowDown.

Printed ratios (targets): engine/s5cmd and engine/boto3 throughput (>= 0.9x), and
throttled/clean wall time (<= 1.3x, every object verified by CRC32C). Each figure is the
median of a few runs; both sides write to fresh buckets. The engine does more work than the
baselines (CRC32C end to end, a HEAD per object to verify what landed) and the ratios say
what that costs.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

OBJECTS = int(os.environ.get("LIFEBOAT_BENCH_OBJECTS", "48"))
OBJECT_MB = int(os.environ.get("LIFEBOAT_BENCH_OBJECT_MB", "4"))
RUNS = int(os.environ.get("LIFEBOAT_BENCH_RUNS", "5"))
CONCURRENCY = 8
THROTTLE_RATE = 0.05


def _dataset(root: Path) -> Path:
    """A checkpoint of OBJECTS shards (incompressible bytes) plus its Lifeboat manifest."""
    from lifeboat.checkpoints.manifest import write_manifest

    ckpt = root / "step-001000"
    ckpt.mkdir(parents=True)
    block = os.urandom(1 << 20)
    for i in range(OBJECTS):
        with open(ckpt / f"shard-{i:05d}.bin", "wb") as f:
            for j in range(OBJECT_MB):
                f.write(bytes([i, j]) + block[2:])
    write_manifest(ckpt, 1000)
    return ckpt


class _Race:
    """Seconds per contender per run. Each contender is (prepare, run): `prepare()` (fresh
    bucket, client built and connected) is not timed, `run(prepared)` is. Runs interleave,
    and ratios are taken per run then the median, so drift on a shared machine cancels."""

    def __init__(self, contenders: dict, runs: int = RUNS):
        self.times: dict[str, list[float]] = {name: [] for name in contenders}
        for _ in range(runs):
            for name, (prepare, run) in contenders.items():
                prepared = prepare()
                started = time.perf_counter()
                run(prepared)
                self.times[name].append(time.perf_counter() - started)

    def __getitem__(self, name: str) -> float:
        return statistics.median(self.times[name])

    def ratio(self, slow: str, fast: str) -> str:
        """time(slow)/time(fast): the ratio of the medians, then the median and range of the
        per-run (paired) ratios."""
        r = sorted(a / b for a, b in zip(self.times[slow], self.times[fast], strict=True))
        return f"{self[slow] / self[fast]:.2f}x (paired runs: median {statistics.median(r):.2f}, {r[0]:.2f}-{r[-1]:.2f})"


def main() -> None:
    import logging

    from lifeboat.transfer import copy_prefix
    from providers.storage.emulators import ThrottlingProxy, new_s3_bucket
    from providers.storage.local import LocalStore
    from providers.storage.s3 import S3Store

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    for k, v in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        os.environ.setdefault(k, v)
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    os.environ.setdefault("AWS_REGION", "us-east-1")
    s5cmd = str(Path(sys.executable).parent / "s5cmd")  # the `s5cmd` package's binary
    if not Path(s5cmd).exists():
        s5cmd = shutil.which("s5cmd") or "s5cmd"

    tmp = Path(tempfile.mkdtemp(prefix="lifeboat-bench-"))
    try:
        ckpt = _dataset(tmp / "local")
        local = LocalStore(ckpt.parent)
        files = sorted(f for f in ckpt.iterdir() if not f.name.startswith("."))
        total = sum(f.stat().st_size for f in files)
        nobj = len(files)
        print(f"dataset: {nobj} objects, {total / 1e6:.0f} MB; concurrency {CONCURRENCY}; median of {RUNS}")
        mbps = lambda t: total / t / 1e6  # noqa: E731

        with _moto_process() as endpoint:
            import boto3
            from boto3.s3.transfer import TransferConfig

            client = boto3.client("s3", endpoint_url=endpoint)

            def new_store(url: str = endpoint) -> S3Store:
                store = S3Store(new_s3_bucket(endpoint), "ckpt", endpoint_url=url)
                list(store.list())  # build the client and open a connection, outside the timing
                return store

            def engine(src):
                def run(dst):
                    report = copy_prefix(src, dst, "step-001000", "step-001000", concurrency=CONCURRENCY)
                    assert report.complete and not report.hashed
                    return report

                return run

            def s5cmd_cp(source: str):
                def run(bucket: str):
                    subprocess.run(
                        [s5cmd, "--endpoint-url", endpoint, "--numworkers", str(CONCURRENCY), "cp",
                         source, f"s3://{bucket}/ckpt/step-001000/"],
                        check=True, capture_output=True,
                    )  # fmt: skip

                return run

            def boto3_upload(bucket: str):
                from concurrent.futures import ThreadPoolExecutor

                config = TransferConfig(max_concurrency=CONCURRENCY)
                with ThreadPoolExecutor(CONCURRENCY) as pool:
                    list(pool.map(
                        lambda f: client.upload_file(str(f), bucket, f"ckpt/step-001000/{f.name}", Config=config),
                        files,
                    ))  # fmt: skip

            # 1. streamed: local -> S3 (bytes through us, CRC32C on the fly and verified)
            engine(local)(new_store())  # warm-up: moto code paths, page cache
            t = _Race(
                {
                    "engine": (new_store, engine(local)),
                    "s5cmd": (lambda: new_s3_bucket(endpoint), s5cmd_cp(f"{ckpt}/*")),
                    "boto3": (lambda: new_s3_bucket(endpoint), boto3_upload),
                }
            )
            print(f"upload local->s3   engine {mbps(t['engine']):7.1f} MB/s   s5cmd {mbps(t['s5cmd']):7.1f} MB/s"
                  f"   boto3 TransferManager {mbps(t['boto3']):7.1f} MB/s")  # fmt: skip
            print(f"  ratio engine/s5cmd {t.ratio('s5cmd', 'engine')}   engine/boto3 {t.ratio('boto3', 'engine')}"
                  "   (target >= 0.9x)")  # fmt: skip

            # 2. server-side: S3 -> S3 on one endpoint (CopyObject, no bytes through us)
            src = new_store()
            engine(local)(src)
            t = _Race(
                {
                    "engine": (new_store, engine(src)),
                    "s5cmd": (
                        lambda: new_s3_bucket(endpoint),
                        s5cmd_cp(f"s3://{src.bucket}/ckpt/step-001000/*"),
                    ),
                }
            )
            print(
                f"server-side s3->s3 engine {mbps(t['engine']):7.1f} MB/s   s5cmd {mbps(t['s5cmd']):7.1f} MB/s"
            )
            print(f"  ratio engine/s5cmd {t.ratio('s5cmd', 'engine')}   (target >= 0.9x)")

            # 3. throttling: the same upload through a loopback proxy, clean vs 5% 503 SlowDown
            with ThrottlingProxy(endpoint, seed=7) as proxy:
                landed, requests, refused = [], [0], [0]

                def throttled(dst):
                    seen, throttled_before = proxy.seen, proxy.throttled
                    proxy.rate = THROTTLE_RATE
                    engine(local)(dst)
                    proxy.rate = 0.0
                    requests[0] += proxy.seen - seen
                    refused[0] += proxy.throttled - throttled_before
                    landed.append(dst)  # verified after the race, outside the timing

                engine(local)(new_store(proxy.url))  # warm-up through the proxy
                t = _Race(
                    {
                        "clean": (lambda: new_store(proxy.url), engine(local)),
                        "throttled": (lambda: new_store(proxy.url), throttled),
                    }
                )
                verified = [_verify(local, dst) for dst in landed]
            print(f"throttled upload: {refused[0]} of {requests[0]} requests answered 503 SlowDown"
                  f" ({refused[0] / max(1, requests[0]):.1%}); every object verified by HEAD CRC32C"
                  f" in {sum(verified)}/{len(verified)} runs")  # fmt: skip
            print(f"  ratio throttled/clean wall time {t.ratio('throttled', 'clean')}   (target <= 1.3x)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def _moto_process():
    """moto in its own process, so the engine's threads and the server do not share a GIL
    (s5cmd, a separate process, would otherwise get the server to itself)."""
    code = (
        "import sys, time\n"
        "from moto.server import ThreadedMotoServer\n"
        "s = ThreadedMotoServer(ip_address='127.0.0.1', port=0, verbose=False); s.start()\n"
        "print(s.get_host_and_port()[1], flush=True)\n"
        "sys.stdin.read()\n"
    )
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)


def _verify(local, dst) -> bool:
    """Every object on the destination has the source's size and CRC32C (by HEAD)."""
    from lifeboat.crc32c import crc32c_of

    for info in local.list("step-001000/"):
        landed = dst.head(info.key)
        if (landed.size, landed.crc32c) != (info.size, crc32c_of(local.read(info.key))):
            print(f"  MISMATCH {info.key}: {landed} vs {info}")
            return False
    return True


if __name__ == "__main__":
    main()
