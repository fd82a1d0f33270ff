"""One upload engine in its own process, for benchmarks/s3_engines.py: every file of a folder
to `s3://bench/<prefix>/` on an endpoint, nothing else (the parent checks what landed, outside
the child's CPU). `python -m benchmarks._engine ENGINE URL DIR PREFIX`.

Engines: `botocore` (Lifeboat's S3Store.put of each file's chunks, sized, on 32 threads as
core/transfer.py runs it), `awscrt` (awscrt's S3 client, PutObject of each file by path with a
CRC32C computed in C; multipart above its threshold, parts and connections its own).
"""

from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CHUNK = 1 << 20


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_file())


def botocore(url: str, root: Path, prefix: str) -> None:
    from lifeboat_dr.providers.storage.s3 import S3Store

    store = S3Store("bench", prefix, endpoint_url=url)

    def chunks(path: Path):
        with open(path, "rb") as f:
            while block := f.read(CHUNK):
                yield block

    def put(path: Path) -> None:
        store.put(path.name, chunks(path), size=path.stat().st_size)

    with ThreadPoolExecutor(32) as pool:
        list(pool.map(put, _files(root)))


def awscrt(url: str, root: Path, prefix: str) -> None:
    from urllib.parse import urlsplit

    from awscrt.auth import AwsCredentialsProvider
    from awscrt.http import HttpHeaders, HttpRequest
    from awscrt.s3 import (
        S3ChecksumAlgorithm,
        S3ChecksumConfig,
        S3ChecksumLocation,
        S3Client,
        S3RequestTlsMode,
        S3RequestType,
        create_default_s3_signing_config,
    )

    where = urlsplit(url)
    location = S3ChecksumLocation[os.environ.get("LIFEBOAT_CRT_CHECKSUM_LOCATION", "HEADER")]
    credentials = AwsCredentialsProvider.new_static(
        os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]
    )
    client = S3Client(
        region="us-east-1",
        tls_mode=S3RequestTlsMode.DISABLED,
        signing_config=create_default_s3_signing_config(region="us-east-1", credential_provider=credentials),
        part_size=8 << 20,
        throughput_target_gbps=10.0,
        memory_limit=int(os.environ.get("LIFEBOAT_CRT_MEMORY_LIMIT", str(1 << 30))),
    )
    port = where.port or 80
    futures, errors = [], []
    lock = threading.Lock()
    for path in _files(root):
        headers = HttpHeaders(
            [
                ("Host", f"{where.hostname}:{port}"),
                ("Content-Length", str(path.stat().st_size)),
                ("Content-Type", "application/octet-stream"),
            ]
        )
        request = HttpRequest("PUT", f"/bench/{prefix}/{path.name}", headers)

        def done(error=None, status_code=None, error_body=None, **_):
            if error is not None:
                with lock:
                    errors.append(f"{status_code} {error} {error_body}")

        r = client.make_request(
            type=S3RequestType.PUT_OBJECT,
            request=request,
            send_filepath=str(path),
            checksum_config=S3ChecksumConfig(algorithm=S3ChecksumAlgorithm.CRC32C, location=location),
            on_done=done,
        )
        futures.append(r.finished_future)
    for f in futures:
        f.result()
    if errors:
        raise RuntimeError(f"{len(errors)} uploads failed: {errors[0]}")


def main(argv: list[str]) -> None:
    engine, url, root, prefix = argv
    {"botocore": botocore, "awscrt": awscrt}[engine](url, Path(root), prefix)


if __name__ == "__main__":
    main(sys.argv[1:])
