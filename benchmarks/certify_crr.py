"""What `replication: s3-crr` costs certification: HEAD requests and wall time at 1,000 objects.

A 1,000-shard checkpoint (benchmarks/certify.py's shape: 4 KiB shards, `.metadata`, manifest)
on moto, "replicated" by `testing.bucket_replication.moto_replicate` (server-side copies, then
the statuses a CRR rule leaves: COMPLETED on the source, REPLICA on the replica; moto itself
replicates nothing). Certified with `replicated_by="lifeboat"` and `"s3-crr"`, the source up
and down, each against a bare `list_objects_v2` loop over the buckets it lists, interleaved,
best of 3. moto runs in this process (the statuses are set through its backend), so the
client and the server share the GIL: the ratios are this setup's, not a real endpoint's; the
request counts are exact.
"""

from __future__ import annotations

import os
import time

from benchmarks.certify import DIR, SHARDS, _best, _write

REPEAT = 3


def main() -> None:
    import logging

    import boto3

    from lifeboat_dr.core.certify import certify_replica
    from lifeboat_dr.providers.storage.s3 import S3Store
    from lifeboat_dr.testing.bucket_replication import moto_replicate
    from lifeboat_dr.testing.emulators import moto_server, new_s3_bucket

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the in-process server's request log
    shards = int(os.environ.get("LIFEBOAT_BENCH_CRR_SHARDS", SHARDS))
    with moto_server() as url:
        source = S3Store(new_s3_bucket(url), "run", endpoint_url=url)
        replica = S3Store(new_s3_bucket(url), "run", endpoint_url=url)
        t = time.perf_counter()
        _write(source, shards)
        moto_replicate(source, replica, [i.key for i in source.list(f"{DIR}/")])
        print(
            f"setup: {shards} shards on moto (in process), CRR statuses set, {time.perf_counter() - t:.1f}s"
        )
        client = boto3.client("s3", endpoint_url=url, region_name="us-east-1")

        def bare(*buckets):
            def loop():
                for b in buckets:
                    for _ in client.get_paginator("list_objects_v2").paginate(Bucket=b, Prefix="run/"):
                        pass

            return loop

        rows = [
            ("lifeboat, source up", bare(source.bucket, replica.bucket), source, {}),
            ("s3-crr, source up", bare(source.bucket, replica.bucket), source, {"replicated_by": "s3-crr"}),
            ("lifeboat, source down (no receipt)", bare(replica.bucket), None, {}),
            ("s3-crr, source down", bare(replica.bucket), None, {"replicated_by": "s3-crr"}),
        ]
        for name, baseline, src, kw in rows:
            source.calls.clear()
            replica.calls.clear()
            (base, _), (seconds, report) = _best(
                baseline,
                lambda src=src, kw=kw: certify_replica(replica, src, layout="manifest", **kw),
                repeat=REPEAT,
            )
            assert report.certified is not None, report.to_dict()
            heads = {
                side: store.calls.get("HeadObject", 0) // REPEAT
                for side, store in (("replica", replica), ("source", source))
            }
            print(
                f"{name:<36} {seconds * 1000:8.1f} ms  {seconds / base:5.2f}x bare list ({base * 1000:.1f} ms)  "
                f"HEAD replica {heads['replica']}, source {heads['source']}  verified_by {report.certified.verified_by}"
            )


if __name__ == "__main__":
    main()
