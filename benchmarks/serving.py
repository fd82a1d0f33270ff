"""Realtime-serving failover, five times over: the serving demo (toy servers behind a real
HAProxy, an independent client at 50 req/s) with the primary SIGKILLed each time.

Prints, per run and as medians: the client-visible error window (first failed request to the
first good one after the switch), kill → confirmed (two signals), confirmed → all traffic on
the verified standby, and the whole kill → switched (the ledger's RTO); against the 10 s
target. Nothing here asserts a speed."""

from __future__ import annotations

import contextlib
import io
import os
import statistics
import tempfile
from pathlib import Path

RUNS = 5


def main() -> None:
    from lifeboat_dr.core.ledger import LedgerFile
    from lifeboat_dr.demo import serving as serving_demo

    with tempfile.TemporaryDirectory() as tmp:
        ledger = Path(tmp) / "ledger.jsonl"
        old = os.environ.get("LIFEBOAT_LEDGER")
        os.environ["LIFEBOAT_LEDGER"] = str(ledger)
        cwd = os.getcwd()
        try:
            for _ in range(RUNS):
                with contextlib.redirect_stdout(io.StringIO()):
                    code = serving_demo.main(["--serving"])
                if code != 0:
                    print("a run FAILED; see .lifeboat/serving-demo/")
        finally:
            os.chdir(cwd)
            if old is None:
                os.environ.pop("LIFEBOAT_LEDGER", None)
            else:
                os.environ["LIFEBOAT_LEDGER"] = old
        entries = LedgerFile(ledger).read("demo-serving")
    rows = []
    for e in entries:
        p = e.phases
        rows.append(
            (
                e.client.window.total_seconds() if e.client and e.client.window is not None else float("nan"),
                (p["confirmed"] - p["outage_start"]).total_seconds(),
                (p["traffic_switched"] - p["confirmed"]).total_seconds(),
                e.rto.total_seconds(),
                f"{e.client.errors}/{e.client.requests}",
            )
        )
        print(
            f"run {e.run_id}: client window {rows[-1][0]:.3f} s, kill→confirmed {rows[-1][1]:.3f} s, "
            f"confirmed→switched {rows[-1][2]:.3f} s, RTO {rows[-1][3]:.3f} s, failed {rows[-1][4]}"
        )
    if rows:
        med = [statistics.median(r[i] for r in rows) for i in range(4)]
        print(
            f"median of {len(rows)}: client-visible error window {med[0]:.3f} s (target 10 s, max "
            f"{max(r[0] for r in rows):.3f} s), kill→confirmed {med[1]:.3f} s, confirmed→switched "
            f"{med[2]:.3f} s, RTO {med[3]:.3f} s"
        )
