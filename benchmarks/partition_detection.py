"""Detection when the primary site *hangs* rather than refuses: how long each probe of `watch`
takes, and what it reads, when the primary's store stops answering mid-connection.

The primary's S3 store (moto) runs in its own network namespace behind a veth pair; the
probes run outside it, as the control plane would. The partition removes the namespace's
address while a permanent neighbour entry keeps our packets flowing to it: SYNs are dropped
in silence, so connections hang until the client's own timeouts (no netem or iptables
needed). Needs root and `ip netns`; says why and stops otherwise. Only 10.251.7.0/30, inside
namespaces this benchmark creates and removes.

    python -m benchmarks partition_detection
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from datetime import UTC, datetime
from pathlib import Path

NS, HOST, PRIMARY = f"lbpart{os.getpid()}", "10.251.7.1", "10.251.7.2"


def _ip(*args: str, ns: bool = False) -> None:
    cmd = ["ip", "netns", "exec", NS, "ip", *args] if ns else ["ip", *args]
    subprocess.run(cmd, check=True, capture_output=True)


def _up() -> str:
    veth = NS[:10]
    _ip("netns", "add", NS)
    _ip("link", "add", f"{veth}r", "type", "veth", "peer", "name", f"{veth}n")
    _ip("link", "set", f"{veth}n", "netns", NS)
    _ip("addr", "add", f"{HOST}/30", "dev", f"{veth}r")
    _ip("link", "set", f"{veth}r", "up")
    _ip("addr", "add", f"{PRIMARY}/30", "dev", f"{veth}n", ns=True)
    _ip("link", "set", f"{veth}n", "up", ns=True)
    _ip("link", "set", "lo", "up", ns=True)
    mac = subprocess.run(
        ["ip", "netns", "exec", NS, "cat", f"/sys/class/net/{veth}n/address"], capture_output=True, text=True
    ).stdout.strip()
    _ip("neigh", "replace", PRIMARY, "lladdr", mac, "dev", f"{veth}r", "nud", "permanent")
    return veth


def _partition(veth: str) -> None:
    _ip("addr", "del", f"{PRIMARY}/30", "dev", f"{veth}n", ns=True)


def _down(veth: str) -> None:
    subprocess.run(["ip", "link", "del", f"{veth}r"], capture_output=True)
    subprocess.run(["ip", "netns", "del", NS], capture_output=True)


def main() -> None:
    if os.geteuid() != 0 or not shutil.which("ip"):
        print("skipped: needs root and iproute2 (`ip netns`)")
        return
    from flows.wiring import PROBE_ATTEMPTS, build_probes
    from lifeboat.detection.quorum import QuorumPolicy, decide
    from providers.storage.emulators import new_s3_bucket
    from providers.storage.s3 import S3Store
    from runbooks.loader import load_runbook

    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        os.environ.setdefault(k, v)
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    try:
        veth = _up()
    except subprocess.CalledProcessError as e:
        print(f"skipped: cannot build namespaces here: {e.stderr.decode().strip()}")
        return
    moto = None
    try:
        endpoint = f"http://{PRIMARY}:5000"
        moto_bin = str(Path(sys.executable).parent / "moto_server")
        moto = subprocess.Popen(
            ["ip", "netns", "exec", NS, moto_bin, "-H", PRIMARY, "-p", "5000"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("moto did not come up in the primary namespace") from None
                time.sleep(0.3)
        bucket = new_s3_bucket(endpoint)
        primary = S3Store(bucket, "ckpt", endpoint_url=endpoint)
        now = datetime.now(UTC)
        primary.put("heartbeat.json", json.dumps({"step": 10, "at": now.isoformat()}).encode())
        primary.put(f"step-10/{uuid.uuid4().hex}", b"x")
        folder = Path(tempfile.mkdtemp(prefix="lifeboat-partition-"))
        path = folder / "partitioned.yaml"
        path.write_text(
            "name: partitioned\nworkload: finetuning\n"
            f"primary: {{infra: aws/us-east-1, store: 's3://{bucket}/ckpt', endpoint_url: '{endpoint}'}}\n"
            "secondary: {infra: local, store: file://secondary, candidates: [{infra: local}]}\n"
            "job: {command: echo resumed}\ncheckpoint: {cadence: 5m}\n"
            "detection: {signals: [training_progress, checkpoint_freshness, provider], quorum: 2, "
            f"window: 5m, stall_after: 30s, heartbeat: 's3://{bucket}/ckpt/heartbeat.json'}}\n"
        )
        probes = build_probes(load_runbook(path))  # as `watch` builds them
        shutil.rmtree(folder)
        _partition(veth)
        print(f"primary store {endpoint} partitioned (connections hang); S3 client: connect_timeout 5 s, ")
        print(
            f"read_timeout 60 s, {PROBE_ATTEMPTS} attempts per call in a probe (copies: {S3Store.max_attempts})"
        )
        readings, started = [], time.monotonic()
        for probe in probes:
            t = time.monotonic()
            r = probe.check(None)
            readings.append(r)
            print(f"  {r.signal:22s} {r.status:8s} after {time.monotonic() - t:5.1f}s: {r.summary[:90]}")
        policy = QuorumPolicy(signals=("training_progress", "checkpoint_freshness", "provider"), quorum=2)
        decision = decide(readings, datetime.now(UTC), policy, None)
        print(f"one watch run: {time.monotonic() - started:.1f}s; quorum 2 of 3: {decision.summary}")
    finally:
        if moto is not None:
            moto.kill()
            moto.wait()
        _down(veth)


if __name__ == "__main__":
    main()
