"""The client-visible serving RTO through the deployed path, not the sandbox's 50 ms loop.

What `lifeboat drill RUNBOOK --kind serving-rto` measures (the product's
`lifeboat_dr.flows.drills.serving.measure_deployed_rto`): toy model servers behind a real
HAProxy, an independent client process at 40 req/s; the primary SIGKILLed at a random point of
the watch's schedule; the watch's probes (`endpoint_health`, `router_health` among them) and
quorum, each probe a task run, every watch period until they confirm; then the `failover`
flow's serving path with the watch's evidence (each step a task run). Run here on a real
`prefect server start`, for chat-serving at the period `lifeboat deploy` gives it and at 1 s.
Prints, per run: kill → confirmed, confirmed → all traffic on the standby, and the client's
error window (first failed request to the first good one after the switch), against the
runbook's RTO target. Nothing here asserts a speed.

    python -m benchmarks serving_deployed_rto
"""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta
from pathlib import Path

RUNS = 3
ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    from prefect import flow
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from lifeboat_dr.flows.drills.serving import measure_deployed_rto
    from lifeboat_dr.runbooks.loader import load_runbook
    from lifeboat_dr.testing.prefect_servers import prefect_server

    rb = load_runbook(ROOT / "runbooks" / "chat-serving.yaml")
    one_second = rb.model_copy(
        update={"cadences": rb.cadences.model_copy(update={"watch": timedelta(seconds=1)})}
    )

    @flow(name="serving-rto-benchmark")
    def measure(runbook, folder: str, run_id: str):  # the watch's probes are task runs of a flow run
        return measure_deployed_rto(runbook, Path(folder), run_id)

    print(f"load average at the start: {os.getloadavg()}")
    with tempfile.TemporaryDirectory(prefix="lifeboat-serving-rto-") as tmp:
        os.environ["LIFEBOAT_LEDGER"] = str(Path(tmp) / "ledger.jsonl")
        with prefect_server() as url, temporary_settings(updates={PREFECT_API_URL: url}):
            for label, runbook in (("deployed", rb), ("1 s", one_second)):
                for i in range(RUNS):
                    m = measure(runbook, str(Path(tmp) / f"{label}-{i}"), f"rto-{label[0]}{i}")
                    secs = lambda td: f"{td.total_seconds():.2f} s" if td is not None else "never"  # noqa: E731
                    print(
                        f"{label} run {i + 1}: {m.outcome}; watch every {m.period.total_seconds():g} s ({m.period_why}), "
                        f"{m.ticks} tick(s): kill → confirmed {secs(m.detect)}, confirmed → switched {secs(m.switch)}; "
                        f"client error window {secs(m.window.window)} ({m.window.errors}/{m.window.requests} failed), "
                        f"target {rb.rto_target.total_seconds():g} s",
                        flush=True,
                    )
    print(f"load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
