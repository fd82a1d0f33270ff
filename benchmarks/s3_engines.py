"""Upload engines compared on one folder, each in its own process: Lifeboat's (botocore,
S3Store.put on 32 threads), awscrt's S3 client (C: its own HTTP, SigV4, CRC32C, parts and
connections), and s5cmd (Go) for reference; on SeaweedFS and on moto.

No replication logic here (benchmarks/replicate*.py time the CLI): the engine alone, so the
figures say what moving the request path to C would buy. Per run: wall, CPU (the child's
rusage: awscrt's native threads included) and peak RSS; afterwards, outside the timing, what
the server reports for each object (up to 20 a run): a full-object CRC32C equal to the file's
counts verifiable, anything else (COMPOSITE, none) unverifiable by metadata.

`LIFEBOAT_BENCH_QUICK=1`: smaller shapes; `LIFEBOAT_BENCH_SHAPES=0,2`; `LIFEBOAT_BENCH_SERVERS=seaweedfs`
(or moto); `LIFEBOAT_CRT_CHECKSUM_LOCATION=TRAILER` sends awscrt's CRC32C as a trailer.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.replicate import QUICK, _s5cmd, _spawn

MiB = 1 << 20
SHAPES = (
    [("2,000 x 4 KiB", 2000, 4096), ("1 x 256 MiB", 1, 256 * MiB)]
    if QUICK
    else [("20,000 x 4 KiB", 20_000, 4096), ("8 x 256 MiB", 8, 256 * MiB), ("1 x 2 GiB", 1, 2048 * MiB)]
)
RUNS = int(os.environ.get("LIFEBOAT_BENCH_RUNS", "2"))
ONLY = os.environ.get("LIFEBOAT_BENCH_SHAPES")
SERVERS = os.environ.get("LIFEBOAT_BENCH_SERVERS", "seaweedfs,moto").split(",")
ENGINES = ("botocore", "awscrt", "s5cmd")
if importlib.util.find_spec("awscrt") is None:  # the `crt` extra
    ENGINES = ("botocore", "s5cmd")
REPO = Path(__file__).resolve().parent.parent


def _folder(root: Path, n: int, size: int) -> Path:
    root.mkdir(parents=True)
    block = os.urandom(min(size, MiB))
    for i in range(n):
        with open(root / f"shard-{i:05d}.bin", "wb") as f:
            left = size
            while left:
                piece = block[: min(left, len(block))]
                f.write(i.to_bytes(4, "big") + piece[4:] if left == size else piece)
                left -= len(piece)
    return root


def _verifiable(client, root: Path, prefix: str) -> str:
    """Of up to 20 objects: how many the server reports with the file's full-object CRC32C."""
    from lifeboat_dr.kernel.crc32c import crc32c, to_b64

    files = sorted(root.iterdir())[:20]
    good, kinds = 0, set()
    for path in files:
        h = client.head_object(Bucket="bench", Key=f"{prefix}/{path.name}", ChecksumMode="ENABLED")
        crc = 0
        with open(path, "rb") as f:
            while block := f.read(MiB):
                crc = crc32c(block, crc)
        got, kind = h.get("ChecksumCRC32C"), h.get("ChecksumType", "FULL_OBJECT")
        kinds.add(f"{kind if got else 'no CRC32C'}")
        good += got == to_b64(crc) and kind == "FULL_OBJECT"
    return f"{good}/{len(files)} verifiable ({', '.join(sorted(kinds))})"


def _run(engine: str, url: str, folder: Path, work: Path, client) -> tuple[float, float, float, str]:
    import urllib.request

    from botocore.exceptions import ClientError

    try:
        client.delete_bucket(Bucket="bench")  # SeaweedFS: with its objects; moto: empty only
    except ClientError as e:
        if e.response["Error"]["Code"] == "BucketNotEmpty":  # moto: every bucket dropped at once
            urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST")).close()
        elif e.response["Error"]["Code"] != "NoSuchBucket":
            raise
    client.create_bucket(Bucket="bench")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if engine == "s5cmd":
        cmd = [_s5cmd(), "--endpoint-url", url, "cp", f"{folder}/*", "s3://bench/up/"]
    else:
        cmd = [sys.executable, "-m", "benchmarks._engine", engine, url, str(folder), "up"]
    wall, cpu, rss = _spawn(cmd, env, work, work / f"{engine}.log")
    return wall, cpu, rss, _verifiable(client, folder, "up")


def _server(kind: str):
    from lifeboat_dr.testing.emulators import moto_server, seaweedfs_server

    return seaweedfs_server() if kind == "seaweedfs" else moto_server()


def main() -> None:
    import logging

    import boto3

    from lifeboat_dr.testing.emulators import AWS_TEST_ENV

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    for k, v in AWS_TEST_ENV.items():
        os.environ.setdefault(k, v)
    work = Path(tempfile.mkdtemp(prefix="lifeboat-engines-"))
    try:
        for i, (name, n, size) in enumerate(SHAPES):
            if ONLY is not None and str(i) not in ONLY.split(","):
                continue
            folder = _folder(work / f"data-{i}", n, size)
            for kind in SERVERS:
                with _server(kind) as url:
                    client = boto3.client("s3", endpoint_url=url, region_name="us-east-1")
                    print(f"\n{name} on {kind} (load {' '.join(f'{x:.2f}' for x in os.getloadavg())}):")
                    runs = {e: [] for e in ENGINES}
                    for r in range(RUNS + 1):  # the first round is a warm-up
                        order = ENGINES if r % 2 == 0 else ENGINES[::-1]
                        for engine in order:
                            result = _run(engine, url, folder, work, client)
                            if r:
                                runs[engine].append(result)
                    for engine, rs in runs.items():
                        print(
                            f"  {engine:<8} wall {statistics.median(x[0] for x in rs):6.2f} s  "
                            f"CPU {statistics.median(x[1] for x in rs):6.2f} s  "
                            f"peak RSS {max(x[2] for x in rs):5.0f} MiB  {rs[-1][3]}"
                        )
            shutil.rmtree(folder, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
