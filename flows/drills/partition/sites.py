"""What runs inside each namespace of the partition drill (`flows/drills/partition/drill.py`).

    python -m lifeboat_dr.flows.drills.partition.sites primary RUNBOOK   # the primary site's job
    python -m lifeboat_dr.flows.drills.partition.sites vantage RUNBOOK NAME   # one probe round, JSON out

`primary`: the numpy trainer on the node's disk (paced, a checkpoint every 5 steps) and its
uploader, which puts each committed checkpoint and the heartbeat on the site's S3 store (moto
in the same namespace) twice a second. After the partition it trains on, unaware: the zombie.
`vantage`: the runbook's probes as `watch` builds them, tagged with the vantage, run at once
(each bounded), their readings printed as JSON lines.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BUCKET = "primary-ckpt"
STEP_SECONDS = 0.1


def _new_bucket(endpoint_url: str, name: str) -> None:
    import boto3

    boto3.client("s3", endpoint_url=endpoint_url, region_name="us-east-1").create_bucket(Bucket=name)


def primary_site(runbook: str) -> None:
    from lifeboat_dr.core.checkpoints.inventory import stored_checkpoints
    from lifeboat_dr.core.replication.copying import replicate_checkpoints
    from lifeboat_dr.flows.wiring import open_site
    from lifeboat_dr.providers.storage.local import LocalStore
    from lifeboat_dr.runbooks.loader import load_runbook
    from lifeboat_dr.standins.trainer.core import Trainer

    rb = load_runbook(runbook)
    disk = rb.base_dir / "primary-disk"
    heartbeat = disk / "heartbeat.json"
    for _ in range(100):  # moto starts beside us
        try:
            _new_bucket(rb.primary.endpoint_url, BUCKET)
            break
        except Exception:
            time.sleep(0.2)
    store, local = open_site(rb, rb.primary), LocalStore(disk)
    trainer = Trainer(disk, rb.base_dir / "primary-loss.jsonl", heartbeat=heartbeat)
    threading.Thread(
        target=trainer.run, args=(100_000, 5), kwargs={"step_seconds": STEP_SECONDS}, daemon=True
    ).start()
    while True:
        time.sleep(0.5)
        try:
            found = [c for c in stored_checkpoints(local, "manifest") if c.complete]
            replicate_checkpoints(local, store, found[:2], rpo_target=rb.rpo_target)
            if heartbeat.exists():
                store.put("heartbeat.json", heartbeat.read_bytes())
        except Exception as e:  # the store is in our namespace: only a bug lands here
            print(f"upload failed: {e}", file=sys.stderr, flush=True)


def vantage_round(runbook: str, vantage: str) -> list:
    """One bounded probe round from `vantage`, every probe at once."""
    from lifeboat_dr.flows.wiring import build_probes
    from lifeboat_dr.runbooks.loader import load_runbook

    probes = build_probes(load_runbook(runbook), vantage=vantage)
    with ThreadPoolExecutor(len(probes)) as pool:
        return list(pool.map(lambda p: p.check(None), probes))


def main(argv: list[str]) -> None:
    role, runbook, *rest = argv
    if role == "primary":
        primary_site(runbook)
    elif role == "vantage":
        for r in vantage_round(runbook, rest[0]):
            print(json.dumps(r.to_dict()), flush=True)
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path.cwd()))
    main(sys.argv[1:])
