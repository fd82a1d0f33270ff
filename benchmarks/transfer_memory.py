"""Peak memory of `lifeboat replicate` against the number of files, on S3 and on GCS (#31).

The user's command, a process per run: `python -m lifeboat_dr replicate RUNBOOK` from a local
primary holding one committed checkpoint of mixed sizes (mostly 1-4 KiB, one file in 100 of
256 KiB, one in 1,000 of 3 MiB, one in 5,000 of 16 MiB, and one 48 MiB object in parts) to a
bucket on moto (benchmarks/_s3server.py, loopback; its indexed listing, so that moto lists
100,000 keys in seconds) at 5,000, 20,000 and 100,000 files; and to the GCS emulator at
16 x 16 MiB (plus one 48 MiB resumable upload) and 300 mixed files. Peak RSS: the CLI's own
VmHWM (benchmarks/_baseline.py says why not its rusage); CPU and wall from its rusage; the load
average beside each run.

Each shape runs twice, in alternating order: the current checkout ("after") and "before", the
same CLI with the copy engine, the replication pass, the receipt and the standby's view as
they were at BASELINE (`CHANGED`, from git: benchmarks/_baseline.py). Set
LIFEBOAT_BENCH_BASELINE to another commit, or to "none" to measure only the checkout.

Goal (a GOAL line per shape, the checkout's run): peak RSS <= 100 MiB.
`LIFEBOAT_BENCH_QUICK=1`: 2,000 and 5,000 files on S3, 8 x 16 MiB on GCS;
`LIFEBOAT_BENCH_FILES=5000,20000`: those file counts on S3.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks._baseline import materialize
from benchmarks._goals import goal

QUICK = os.environ.get("LIFEBOAT_BENCH_QUICK") == "1"
KiB, MiB = 1 << 10, 1 << 20
GOAL_RSS_MIB = 100
# main before a copy's per-file records became a byte of flags, its freed heap went back to
# the OS after the plan and S3 processes stopped loading pyOpenSSL (e648480 -> 9494441 made
# the records compact or spilled them to a file)
BASELINE = os.environ.get("LIFEBOAT_BENCH_BASELINE", "9494441")
CHANGED = (
    "core/transfer.py",
    "core/transfer_records.py",
    "core/replication/copying.py",
    "core/checkpoints/receipt.py",
    "core/checkpoints/layouts.py",
    "providers/storage/local.py",
    "providers/storage/s3.py",
    "providers/storage/buffers.py",
)
S3_FILES = tuple(
    int(n)
    for n in os.environ.get("LIFEBOAT_BENCH_FILES", "2000,5000" if QUICK else "5000,20000,100000").split(",")
)
GCS_SHAPES = [("GCS 8 x 16 MiB", 8, "large")] if QUICK else [
    ("GCS 16 x 16 MiB", 16, "large"),
    ("GCS 300 mixed", 300, "mixed"),  # 2,000: over 6 min a side, the emulator on CPU
]  # fmt: skip
REPO = Path(__file__).resolve().parent.parent
STEP_DIR = "step_0001000"
RUNBOOK = """\
name: bench
workload: finetuning
targets: {{rpo: 30m}}
primary: {{infra: local, store: "file://{primary}"}}
secondary: {{infra: local, store: "{store}",{endpoint} candidates: [{{infra: local}}]}}
job: {{command: "python train.py"}}
checkpoint: {{layout: manifest, cadence: 5m, retention: {{keep_last: 2}}}}
"""


def mixed_size(i: int) -> int:
    if i % 5000 == 4999:
        return 16 * MiB
    if i % 1000 == 999:
        return 3 * MiB
    if i % 100 == 99:
        return 256 * KiB
    return KiB + (i * 7919) % (3 * KiB)


def _dataset(root: Path, n: int, kind: str) -> tuple[int, int]:
    """One committed checkpoint of n files (+ one 48 MiB object and the manifest); (objects, bytes)."""
    from lifeboat_dr.core.checkpoints.manifest import write_manifest

    ckpt = root / STEP_DIR
    ckpt.mkdir(parents=True)
    noise = memoryview(os.urandom(16 * MiB))
    sizes = [16 * MiB if kind == "large" else mixed_size(i) for i in range(n)] + [48 * MiB]
    for i, size in enumerate(sizes):
        with open(ckpt / f"shard-{i:06d}.bin", "wb") as f:
            f.write(i.to_bytes(4, "big"))
            left, start = size - 4, (i * 4099) % MiB
            while left:
                piece = min(left, 15 * MiB)
                f.write(noise[start : start + piece])
                left -= piece
    write_manifest(ckpt, 1000)
    return len(sizes) + 1, sum(p.stat().st_size for p in ckpt.iterdir())


@dataclass
class Run:
    wall: float
    cpu: float
    rss_mib: float
    load: float


def _spawn(cmd: list[str], env: dict, cwd: Path, log: Path) -> Run:
    load = os.getloadavg()[0]
    with open(log, "w") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])} failed:\n{log.read_text()[-3000:]}")
    return Run(wall, usage.ru_utime + usage.ru_stime, 0.0, max(load, os.getloadavg()[0]))


class _Bench:
    def __init__(self, work: Path, old: Path | None):
        self.work, self.old = work, old
        self.env = {
            **os.environ,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1",
            "PYTHONPATH": str(REPO),
            "LIFEBOAT_LEDGER": str(work / "ledger.jsonl"),
        }

    def replicate(self, who: str, primary: Path, store: str, endpoint: str = "") -> Run:
        """One run; `endpoint`: an S3 endpoint (GCS takes STORAGE_EMULATOR_HOST)."""
        runbook = self.work / "bench.yaml"
        endpoint = f' endpoint_url: "{endpoint}",' if endpoint else ""
        runbook.write_text(RUNBOOK.format(primary=primary, store=store, endpoint=endpoint))
        hwm = self.work / "hwm"
        old = str(self.old) if who == "before" else "-"
        cmd = [sys.executable, "-m", "benchmarks._baseline", old, "replicate", str(runbook), "--no-progress"]
        run = _spawn(cmd, {**self.env, "LIFEBOAT_BENCH_HWM": str(hwm)}, self.work, self.work / f"{who}.log")
        run.rss_mib = int(hwm.read_text()) / 1024  # its own VmHWM: see benchmarks/_baseline.py
        return run


def _measure(bench: _Bench, name: str, objects: int, total: int, run_one) -> tuple:
    """One shape, before and after; returns goal()'s arguments for it."""
    print(f"\n{name}: {objects:,} objects, {total / MiB:,.0f} MiB", flush=True)
    order = ["after", "before"] if bench.old else ["after"]
    if len(name) % 2:  # alternate which goes first from shape to shape
        order.reverse()
    runs = {who: run_one(who) for who in order}
    for who in ("before", "after"):
        if who in runs:
            r = runs[who]
            print(
                f"  {who:<6} peak RSS {r.rss_mib:5.0f} MiB  wall {r.wall:6.1f} s  CPU {r.cpu:6.1f} s  "
                f"load average {r.load:.2f}",
                flush=True,
            )
    rss = runs["after"].rss_mib
    before = (
        f"before {runs['before'].rss_mib:.0f} MiB at {BASELINE}" if "before" in runs else "no baseline run"
    )
    return (
        f"transfer_memory {name} peak RSS",
        rss <= GOAL_RSS_MIB,
        f"{rss:.0f} MiB",
        before,
        f"<= {GOAL_RSS_MIB} MiB",
    )


def _s3(bench: _Bench) -> list:
    import boto3

    from benchmarks._s3server import counted_s3

    goals = []
    with counted_s3(indexed_list=True) as server:
        client = boto3.client("s3", endpoint_url=server.url, region_name="us-east-1")

        def run_one(primary: Path, objects: int):
            def one(who: str) -> Run:
                server.reset()
                client.create_bucket(Bucket="bench")
                run = bench.replicate(who, primary, "s3://bench/ckpt", server.url)
                pages = client.get_paginator("list_objects_v2").paginate(
                    Bucket="bench", Prefix=f"ckpt/{STEP_DIR}/"
                )
                landed = sum(len(p.get("Contents", [])) for p in pages)
                assert landed >= objects, f"{who} left {landed} of {objects} objects"
                return run

            return one

        for n in S3_FILES:
            primary = bench.work / f"primary-{n}"
            objects, total = _dataset(primary, n, "mixed")
            goals.append(_measure(bench, f"S3 {n:,} mixed", objects, total, run_one(primary, objects)))
            shutil.rmtree(primary, ignore_errors=True)
    return goals


def _gcs(bench: _Bench) -> list:
    from lifeboat_dr.testing.emulators import gcs_emulator, new_gcs_bucket

    goals = []
    with gcs_emulator() as url:
        bench.env["STORAGE_EMULATOR_HOST"] = url
        for name, n, kind in GCS_SHAPES:
            primary = bench.work / f"primary-gcs-{n}"
            objects, total = _dataset(primary, n, kind)

            def one(who: str, primary=primary) -> Run:
                return bench.replicate(who, primary, f"gs://{new_gcs_bucket(url)}/ckpt")

            goals.append(_measure(bench, name, objects, total, one))
            shutil.rmtree(primary, ignore_errors=True)
    return goals


def main() -> None:
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    for k, v in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        os.environ.setdefault(k, v)
    work = Path(tempfile.mkdtemp(prefix="lifeboat-bench-mem-"))
    old = None
    if BASELINE != "none":
        old = work / "baseline"
        materialize(BASELINE, CHANGED, old)
        print(f"before: {', '.join(CHANGED)} at {BASELINE}; after: this checkout")
    goals = []
    try:
        bench = _Bench(work, old)
        goals += _gcs(bench)  # the shorter first
        goals += _s3(bench)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\ngoals (load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}):")
    for args in goals:
        goal(*args)


if __name__ == "__main__":
    main()
