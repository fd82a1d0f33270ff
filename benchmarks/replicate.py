"""`lifeboat replicate` against `s5cmd cp`, both as processes, on one moto S3 server.

The user's command is what is timed: `python -m lifeboat_dr replicate RUNBOOK` (primary: a local
folder holding one committed checkpoint; secondary: a bucket on moto), start-up, listing,
copy, receipt, certification and retention included; against `s5cmd cp DIR/* s3://…` of the
same folder (s5cmd from the `s5cmd` package in the test extra, its default settings). Three
shapes: many small files, 16 MiB objects (one PUT each at our 16 MiB limit), one object far
above it (multipart). Runs are paired and interleaved (the order alternates), after one
untimed warm-up of each; every bucket is deleted between runs (moto reset).

Figures per run, none taken from the client's own word: wall time (spawn to exit), CPU time
(the child's rusage), peak RSS (Lifeboat's own VmHWM, benchmarks/_baseline.py; s5cmd's rusage,
which carries this process's high-water mark), requests by S3 operation counted at the server
(benchmarks/_s3server.py), and for Lifeboat the bytes hashed in its process counted where the
hash libraries are entered (benchmarks/_probe/sitecustomize.py: CRC32C, MD5, SHA-256).

Goals (a GOAL line each, per shape): wall <= 1.2x s5cmd's (median of the paired ratios), content
hashing 1.0 byte per byte copied, 0 HEAD per object (a HEAD of Lifeboat's own records under
`_lifeboat/`, such as the replication lock's first read, is counted apart), peak RSS <= 100 MiB.

`LIFEBOAT_BENCH_QUICK=1` (or `python -m benchmarks replicate --quick`): smaller shapes, 2 runs.
`LIFEBOAT_BENCH_RUNS=N` sets the paired runs per shape (default 3); `LIFEBOAT_BENCH_SHAPES=0,2`
runs only those shapes.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks._goals import goal

QUICK = os.environ.get("LIFEBOAT_BENCH_QUICK") == "1" or "--quick" in sys.argv
MiB = 1 << 20
SHAPES = (
    [("500 x 4 KiB", 500, 4096), ("8 x 16 MiB", 8, 16 * MiB), ("1 x 256 MiB", 1, 256 * MiB)]
    if QUICK
    else [("5,000 x 4 KiB", 5000, 4096), ("64 x 16 MiB", 64, 16 * MiB), ("1 x 2 GiB", 1, 2048 * MiB)]
)
RUNS = int(os.environ.get("LIFEBOAT_BENCH_RUNS", "2" if QUICK else "3"))
ONLY = os.environ.get("LIFEBOAT_BENCH_SHAPES")  # e.g. "0,2": run only those shapes
GOAL_RATIO = 1.2
GOAL_RSS_MIB = 100  # memory bounded whatever the sizes
REPO = Path(__file__).resolve().parent.parent
PROBE = Path(__file__).resolve().parent / "_probe"
STEP_DIR = "step_0001000"

RUNBOOK = """\
name: bench
workload: finetuning
targets: {{rpo: 30m}}
primary: {{infra: local, store: "file://{primary}"}}
secondary: {{infra: local, store: "s3://bench/ckpt", endpoint_url: "{endpoint}", candidates: [{{infra: local}}]}}
job: {{command: "python train.py"}}
checkpoint: {{layout: manifest, cadence: 5m, retention: {{keep_last: 2}}}}
"""


@dataclass
class Run:
    wall: float
    cpu: float
    rss_mib: float
    ops: dict[str, int]
    signed: dict[str, int]  # body-carrying requests by x-amz-content-sha256: sha256 / unsigned
    sent: int  # PUT / UploadPart body bytes the server received
    hashed: dict[str, int] = field(default_factory=dict)


def _dataset(root: Path, n: int, size: int) -> tuple[Path, int]:
    """One committed checkpoint: n incompressible shards of `size` bytes + its manifest."""
    from lifeboat_dr.core.checkpoints.manifest import write_manifest

    ckpt = root / STEP_DIR
    ckpt.mkdir(parents=True)
    block = os.urandom(min(size, MiB))
    for i in range(n):
        with open(ckpt / f"shard-{i:05d}.bin", "wb") as f:
            left = size
            while left:
                piece = block[: min(left, len(block))]
                f.write(i.to_bytes(4, "big") + piece[4:] if left == size else piece)
                left -= len(piece)
    write_manifest(ckpt, 1000)
    total = sum(p.stat().st_size for p in ckpt.iterdir() if not p.name.startswith("."))
    return ckpt, total


def _s5cmd() -> str:
    here = Path(sys.executable).parent / "s5cmd"  # the `s5cmd` package's binary
    return str(here) if here.exists() else shutil.which("s5cmd") or "s5cmd"


def _spawn(cmd: list[str], env: dict, cwd: Path, log: Path) -> tuple[float, float, float]:
    """Run a process; (wall seconds, CPU seconds, peak RSS MiB) from its own rusage."""
    with open(log, "w") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} exited {proc.returncode}:\n{log.read_text()[-3000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def _diff(after: dict, before: dict) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


class _Bench:
    def __init__(self, server, work: Path):
        import boto3

        self.server, self.work = server, work
        self.client = boto3.client("s3", endpoint_url=server.url, region_name="us-east-1")
        self.env = {
            **os.environ,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1",
        }

    def _fresh_bucket(self) -> dict:
        self.server.reset()  # every bucket from the previous run deleted, counts zeroed
        self.client.create_bucket(Bucket="bench")
        return self.server.counts()["ops"]

    def lifeboat(self, primary: Path) -> Run:
        runbook = self.work / "bench.yaml"
        runbook.write_text(RUNBOOK.format(primary=primary, endpoint=self.server.url))
        probe = self.work / "probe.json"
        env = {
            **self.env,
            "PYTHONPATH": os.pathsep.join([str(PROBE), str(REPO)]),
            "LIFEBOAT_BENCH_PROBE": str(probe),
            "LIFEBOAT_LEDGER": str(self.work / "ledger.jsonl"),
        }
        before = self._fresh_bucket()
        hwm = self.work / "hwm"  # the CLI's own peak RSS: its rusage carries this process's (_baseline.py)
        cmd = [sys.executable, "-m", "benchmarks._baseline", "-", "replicate", str(runbook), "--no-progress"]
        wall, cpu, _ = _spawn(
            cmd, {**env, "LIFEBOAT_BENCH_HWM": str(hwm)}, self.work, self.work / "lifeboat.log"
        )
        after = self.server.counts()
        return Run(
            wall,
            cpu,
            int(hwm.read_text()) / 1024,
            _diff(after["ops"], before),
            after["payload_hashes"],
            after["body_bytes"],
            json.loads(probe.read_text()),
        )

    def s5cmd(self, primary: Path) -> Run:
        before = self._fresh_bucket()
        cmd = [_s5cmd(), "--endpoint-url", self.server.url, "cp", f"{primary}/{STEP_DIR}/*",
               f"s3://bench/ckpt/{STEP_DIR}/"]  # fmt: skip
        wall, cpu, rss = _spawn(cmd, self.env, self.work, self.work / "s5cmd.log")
        after = self.server.counts()
        return Run(wall, cpu, rss, _diff(after["ops"], before), after["payload_hashes"], after["body_bytes"])

    def landed(self, n: int) -> int:
        """Objects the last run left under the checkpoint (outside the timing)."""
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket="bench", Prefix=f"ckpt/{STEP_DIR}/"
        )
        return sum(len(p.get("Contents", [])) for p in pages)


def _shape(bench: _Bench, name: str, n: int, size: int) -> list[tuple]:
    primary = bench.work / f"primary-{n}-{size}"
    _, total = _dataset(primary, n, size)
    objects = n + 1  # the shards and the manifest
    print(f"\n{name}: {objects:,} objects, {total / MiB:,.1f} MiB; {RUNS} paired runs after a warm-up")
    bench.lifeboat(primary)  # warm-up: page cache, moto's code paths
    bench.s5cmd(primary)
    runs: dict[str, list[Run]] = {"lifeboat": [], "s5cmd": []}
    for r in range(RUNS):
        order = ["lifeboat", "s5cmd"] if r % 2 == 0 else ["s5cmd", "lifeboat"]
        for who in order:
            runs[who].append(getattr(bench, who)(primary))
            assert bench.landed(n) >= objects, f"{who} left {bench.landed(n)} of {objects} objects"
    shutil.rmtree(primary, ignore_errors=True)

    for who, rs in runs.items():
        ops = {k: sum(r.ops.get(k, 0) for r in rs) / len(rs) for k in sorted({k for r in rs for k in r.ops})}
        per_obj = " ".join(f"{k} {v / objects:.2f}" for k, v in ops.items())
        line = (
            f"  {who:<8} wall {statistics.median(r.wall for r in rs):6.2f} s "
            f"({' '.join(f'{r.wall:.2f}' for r in rs)})  CPU {statistics.median(r.cpu for r in rs):6.2f} s  "
            f"peak RSS {max(r.rss_mib for r in rs):5.0f} MiB  requests/object {sum(ops.values()) / objects:.3f}"
        )
        signed = {k: sum(r.signed.get(k, 0) for r in rs) for k in ("sha256", "unsigned")}
        print(line)
        print(f"{'':<11}by operation per object: {per_obj}")
        print(
            f"{'':<11}PUT/UploadPart bodies SigV4-signed (SHA-256): {signed['sha256']}, unsigned: {signed['unsigned']}"
        )
    lb = runs["lifeboat"]
    # per byte the server received: the checkpoint, and the receipt Lifeboat adds to it
    hashed = {
        k: statistics.median(r.hashed.get(k, 0) / r.sent for r in lb) for k in ("crc32c", "md5", "sha256")
    }
    content = hashed["crc32c"] + hashed["md5"]
    sent = statistics.median(r.sent for r in lb) / total
    print(
        f"  lifeboat hashed per byte sent ({sent:.3f} x the checkpoint): CRC32C {hashed['crc32c']:.3f}, "
        f"MD5 {hashed['md5']:.3f} (content checksums {content:.3f}); SHA-256 in Python "
        f"{hashed['sha256']:.3f} (SigV4 signs bodies sent over plain HTTP, as to loopback moto: see 'signed' above)"
    )
    ratios = sorted(a.wall / b.wall for a, b in zip(lb, runs["s5cmd"], strict=True))
    ratio = statistics.median(ratios)
    heads = max(r.ops.get("HeadObject", 0) for r in lb) / objects
    rss = max(r.rss_mib for r in lb)
    print(f"  ratio core/s5cmd wall: median of paired {ratio:.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f})")
    return [  # goal() arguments: name, ok, figure, baseline, goal
        (f"replicate {name} wall", ratio <= GOAL_RATIO, f"{ratio:.2f}x", "s5cmd's", f"<= {GOAL_RATIO}x"),
        (
            f"replicate {name} content hashing",
            abs(content - 1.0) <= 0.01,
            f"{content:.3f} byte per byte sent",
            "the checkpoint's bytes",
            "1.0 +- 0.01",
        ),
        (f"replicate {name} HEADs", heads == 0, f"{heads:.3f} per object", "none needed", "0"),
        (
            f"replicate {name} peak RSS",
            rss <= GOAL_RSS_MIB,
            f"{rss:.0f} MiB",
            "a fixed bound",
            f"<= {GOAL_RSS_MIB} MiB",
        ),
    ]


def main() -> None:
    import logging

    from benchmarks._s3server import counted_s3

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    for k, v in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        os.environ.setdefault(k, v)
    work = Path(tempfile.mkdtemp(prefix="lifeboat-bench-"))
    goals = []
    try:
        with counted_s3() as server:
            bench = _Bench(server, work)
            for i, (name, n, size) in enumerate(SHAPES):
                if ONLY is None or str(i) in ONLY.split(","):
                    goals += _shape(bench, name, n, size)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\ngoals:")
    for args in goals:
        goal(*args)


if __name__ == "__main__":
    main()
