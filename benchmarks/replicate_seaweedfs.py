"""`lifeboat replicate` against `s5cmd cp` on SeaweedFS: a server whose CPU is not the bottleneck.

On loopback moto every tool waits on moto's Python (benchmarks/replicate.py): ratios near 1
hide the client. SeaweedFS (`weed server -s3`, Go, testing/emulators.py `seaweedfs_server`)
answers a small PUT in well under a millisecond, so wall and CPU here are the clients'.

The same commands as benchmarks/replicate.py, as processes: `python -m lifeboat_dr replicate
RUNBOOK` (a local primary holding one committed checkpoint, the secondary a bucket on
SeaweedFS; start-up, listing, copy, receipt, certification and retention included) against
`s5cmd cp DIR/* s3://…` (its defaults). Paired runs, the order alternating, after one untimed
warm-up of each; the bucket is deleted and made again before every run. Figures per run:
wall (spawn to exit), CPU (user + system, the child's own rusage: the client's CPU, not the
server's) and peak RSS. No request counting here (a counting proxy would be the bottleneck);
benchmarks/replicate.py counts requests at its server.

Lifeboat runs twice per round: as shipped (botocore) and with `LIFEBOAT_S3_ENGINE=awscrt`
(single PUTs through awscrt's client, providers/storage/s3_crt.py). Goals (PASS/FAIL per shape
and per Lifeboat side, the median of the paired ratios): wall <= 1.2x s5cmd's, CPU <= 1.5x
s5cmd's.

`LIFEBOAT_BENCH_QUICK=1`: smaller shapes, 2 runs; `LIFEBOAT_BENCH_RUNS=N`, `LIFEBOAT_BENCH_SHAPES=0,2`
as in benchmarks/replicate.py.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.replicate import QUICK, RUNBOOK, STEP_DIR, _dataset, _s5cmd, _spawn

MiB = 1 << 20
SHAPES = (
    [("2,000 x 4 KiB", 2000, 4096), ("8 x 32 MiB", 8, 32 * MiB), ("1 x 256 MiB", 1, 256 * MiB)]
    if QUICK
    else [("20,000 x 4 KiB", 20_000, 4096), ("8 x 256 MiB", 8, 256 * MiB), ("1 x 2 GiB", 1, 2048 * MiB)]
)
RUNS = int(os.environ.get("LIFEBOAT_BENCH_RUNS", "2" if QUICK else "3"))
ONLY = os.environ.get("LIFEBOAT_BENCH_SHAPES")
GOAL_WALL = 1.2
GOAL_CPU = 1.5
REPO = Path(__file__).resolve().parent.parent
# Lifeboat as shipped (botocore), Lifeboat with LIFEBOAT_S3_ENGINE=awscrt (single PUTs through
# awscrt's client), s5cmd; the pairs' order alternates
SIDES = ("lifeboat", "lifeboat_awscrt", "s5cmd")
HAS_AWSCRT = importlib.util.find_spec("awscrt") is not None  # the `crt` extra
if not HAS_AWSCRT:
    SIDES = ("lifeboat", "s5cmd")


class _Bench:
    def __init__(self, url: str, work: Path):
        import boto3

        self.url, self.work = url, work
        self.client = boto3.client("s3", endpoint_url=url, region_name="us-east-1")
        self.env = {
            **os.environ,
            "AWS_ACCESS_KEY_ID": os.environ["AWS_ACCESS_KEY_ID"],
            "AWS_SECRET_ACCESS_KEY": os.environ["AWS_SECRET_ACCESS_KEY"],
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1",
        }

    def _fresh_bucket(self) -> None:
        """The bucket deleted with everything in it (SeaweedFS drops its collection) and made again."""
        from botocore.exceptions import ClientError

        try:
            self.client.delete_bucket(Bucket="bench")
        except ClientError as e:
            if e.response["Error"]["Code"] != "NoSuchBucket":
                raise
        self.client.create_bucket(Bucket="bench")

    def lifeboat(self, primary: Path, engine: str = "botocore") -> tuple[float, float, float]:
        runbook = self.work / "bench.yaml"
        runbook.write_text(RUNBOOK.format(primary=primary, endpoint=self.url))
        env = {**self.env, "PYTHONPATH": str(REPO), "LIFEBOAT_LEDGER": str(self.work / "ledger.jsonl")}
        env["LIFEBOAT_S3_ENGINE"] = engine
        self._fresh_bucket()
        cmd = [sys.executable, "-m", "lifeboat_dr", "replicate", str(runbook), "--no-progress"]
        return _spawn(cmd, env, self.work, self.work / "lifeboat.log")

    def lifeboat_awscrt(self, primary: Path) -> tuple[float, float, float]:
        return self.lifeboat(primary, "awscrt")

    def s5cmd(self, primary: Path) -> tuple[float, float, float]:
        self._fresh_bucket()
        cmd = [_s5cmd(), "--endpoint-url", self.url, "cp", f"{primary}/{STEP_DIR}/*",
               f"s3://bench/ckpt/{STEP_DIR}/"]  # fmt: skip
        return _spawn(cmd, self.env, self.work, self.work / "s5cmd.log")

    def landed(self) -> int:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket="bench", Prefix=f"ckpt/{STEP_DIR}/"
        )
        return sum(len(p.get("Contents", [])) for p in pages)


def _shape(bench: _Bench, name: str, n: int, size: int) -> list[tuple[str, bool, str]]:
    primary = bench.work / f"primary-{n}-{size}"
    _, total = _dataset(primary, n, size)
    objects = n + 1  # the shards and the manifest
    print(f"\n{name}: {objects:,} objects, {total / MiB:,.1f} MiB; {RUNS} paired runs after a warm-up")
    print(f"  load before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    for who in SIDES:  # warm-up: page cache, the server's volumes
        getattr(bench, who)(primary)
    runs: dict[str, list[tuple[float, float, float]]] = {who: [] for who in SIDES}
    for r in range(RUNS):
        for who in SIDES if r % 2 == 0 else SIDES[::-1]:
            runs[who].append(getattr(bench, who)(primary))
            landed = bench.landed()
            assert landed >= objects, f"{who} left {landed} of {objects} objects"
    shutil.rmtree(primary, ignore_errors=True)
    for who, rs in runs.items():
        walls, cpus = [w for w, _, _ in rs], [c for _, c, _ in rs]
        print(
            f"  {who:<15} wall {statistics.median(walls):6.2f} s ({' '.join(f'{w:.2f}' for w in walls)})  "
            f"CPU {statistics.median(cpus):6.2f} s ({' '.join(f'{c:.2f}' for c in cpus)})  "
            f"peak RSS {max(m for _, _, m in rs):5.0f} MiB"
        )
    goals = []
    for who in SIDES[:-1]:
        pairs = list(zip(runs[who], runs["s5cmd"], strict=True))
        wall = statistics.median(a[0] / b[0] for a, b in pairs)
        cpu = statistics.median(a[1] / b[1] for a, b in pairs)
        print(f"  {who}/s5cmd: wall {wall:.2f}x, CPU {cpu:.2f}x (medians of the paired ratios)")
        goals += [
            (f"SeaweedFS {name}, {who}: wall <= {GOAL_WALL}x s5cmd", wall <= GOAL_WALL, f"{wall:.2f}x"),
            (f"SeaweedFS {name}, {who}: CPU <= {GOAL_CPU}x s5cmd", cpu <= GOAL_CPU, f"{cpu:.2f}x"),
        ]
    print(f"  load after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    return goals


def main() -> None:
    from lifeboat_dr.testing.emulators import SEAWEEDFS_MISSING, seaweedfs_server, weed_binary

    if weed_binary() is None:
        print(f"skipped: {SEAWEEDFS_MISSING}")
        return
    if not HAS_AWSCRT:
        print("no awscrt here (pip install -e '.[crt]'): Lifeboat with LIFEBOAT_S3_ENGINE=awscrt not timed")
    work = Path(tempfile.mkdtemp(prefix="lifeboat-bench-"))
    goals = []
    try:
        with seaweedfs_server() as url:
            bench = _Bench(url, work)
            for i, (name, n, size) in enumerate(SHAPES):
                if ONLY is None or str(i) in ONLY.split(","):
                    goals += _shape(bench, name, n, size)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\ngoals:")
    for what, ok, value in goals:
        print(f"  {'PASS' if ok else 'FAIL'}  {what}: {value}")


if __name__ == "__main__":
    main()
