"""How long a provider probe takes to read "failing" when the primary store is down.

Per backend (moto S3, the GCS emulator): a dead port (connections refused) and a frozen
server (SIGSTOP: connections accepted, nothing answered), with the watch flow's probe
deadline. Goal (issue #16): a failing reading in under 10 s.
"""

from __future__ import annotations

import os
import time

from benchmarks._goals import goal

GOAL_S = 10.0


def main() -> None:
    from lifeboat_dr.core.detection.provider import ProviderProbe
    from lifeboat_dr.flows.wiring import probe_deadline
    from lifeboat_dr.providers.health.control_plane import StoreControlPlane
    from lifeboat_dr.providers.storage.gcs import GcsStore
    from lifeboat_dr.providers.storage.s3 import S3Store
    from lifeboat_dr.testing.emulators import AWS_TEST_ENV, dead_port, stopped_server

    for k, v in AWS_TEST_ENV.items():
        os.environ.setdefault(k, v)
    deadline = probe_deadline()
    print(f"store outage: provider probe (3 pings), store deadline {deadline:g} s per call")
    worst = 0.0
    for kind, cls in (("s3", S3Store), ("gcs", GcsStore)):
        for outage in ("dead port", "frozen server"):
            if outage == "dead port":
                url, ctx = dead_port(), None
            else:
                ctx = stopped_server(kind)
                url = ctx.__enter__()
            try:
                probe = ProviderProbe(
                    StoreControlPlane(cls("bucket", "run", endpoint_url=url, deadline_s=deadline))
                )
                started = time.perf_counter()
                reading = probe.check(None)
                took = time.perf_counter() - started
            finally:
                if ctx is not None:
                    ctx.__exit__(None, None, None)
            worst = max(worst, took)
            print(f"  {kind:4} {outage:14} {reading.status.value:8} {took:6.2f} s")
    goal(
        "store_outage failing reading, refused or frozen store",
        worst < GOAL_S,
        f"worst {worst:.2f} s",
        f"a store deadline of {deadline:g} s per call",
        f"< {GOAL_S:g} s",
    )
