"""`make demo DEMO_ARGS=--serving`: kill a model server, move its traffic to the verified standby.

`runbooks/demo-serving.yaml` in `lifeboat_dr.flows.serving_sandbox`: two toy model servers (each its own
process) behind a real HAProxy on loopback, the standby serving the weights replicated to
the secondary. An independent client process (`lifeboat_dr.standins.serving_client`, 50 requests/s from
4 workers through HAProxy) logs every request. The primary is SIGKILLed; two signals (its own
health endpoint, HAProxy's check) confirm the outage; the serving walk that the `failover`
flow runs (`lifeboat_dr.core.serving.failover`) certifies the replica's weights, verifies the
standby (same digest, health, canary in budget), switches HAProxy's weights at once and
watches the standby. The client's log gives the client-visible
error window, printed against the RTO target and recorded in the ledger; the timeline
picture shows it. `--bad-standby` leaves the standby on other weights: it must be refused.
Exit 0 when the window meets the target (with --bad-standby: when the standby was refused).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from lifeboat_dr.demo.home import enter

RUNBOOK = "runbooks/demo-serving.yaml"
DEMO = Path(".lifeboat/serving-demo")
RATE, WORKERS = 50, 4  # the client's requests per second, and requests in flight


def say(text: str) -> None:
    print(f"[lifeboat serving demo] {text}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="make demo DEMO_ARGS=--serving", description=__doc__.splitlines()[0])
    p.add_argument(
        "--serving", action="store_true", help="(selects this demo from lifeboat_dr.demo.training)"
    )
    p.add_argument(
        "--bad-standby", action="store_true", help="the standby serves other weights: it must be refused"
    )
    args = p.parse_args(argv)
    enter()
    shutil.rmtree(DEMO, ignore_errors=True)
    DEMO.mkdir(parents=True)
    from lifeboat_dr.flows.serving_sandbox import serving_sandbox
    from lifeboat_dr.runbooks.loader import load_runbook

    with serving_sandbox(load_runbook(RUNBOOK), DEMO, stale_standby=args.bad_standby) as box:
        return play(box, bad_standby=args.bad_standby)


def play(box, *, bad_standby: bool) -> int:
    from lifeboat_dr.core.ledger import LedgerFile
    from lifeboat_dr.core.serving.failover import serving_failover
    from lifeboat_dr.core.timeline import entry_markdown, render_timeline, timeline_path
    from lifeboat_dr.flows.serving import primary_site
    from lifeboat_dr.flows.serving_sandbox import stop
    from lifeboat_dr.flows.wiring import build_router, certified_weights_digest, new_ledger, serving_settings
    from lifeboat_dr.providers.serving.http import HttpEndpoint
    from lifeboat_dr.standins.serving_client import client_window, read_samples

    rb, router, samples = box.rb, build_router(box.rb), DEMO / "client.jsonl"
    say(f"1. two toy model servers behind HAProxy {box.frontend}: weights {router.weights()}")
    client = start_client(f"{box.frontend}/v1/infer", samples)
    try:
        wait_for(
            lambda: sum(s["ok"] for s in read_samples(samples)) >= RATE, 15, "the client's first answers"
        )
        outage = datetime.now(UTC)
        box.kill_primary()
        say("2. SIGKILL the primary model server (a lost node)")
        detected, evidence = box.confirm_outage(router)
        after = (datetime.now(UTC) - outage).total_seconds()
        say(f"3. confirmed: 2 of 2 signals agree ({'; '.join(evidence)}), {after:.2f} s after the kill")
        ledger = new_ledger(
            rb, f"demo-{outage:%Y%m%dT%H%M%S}", drill=True, sink=LedgerFile(), table="serving"
        )
        entry = serving_failover(
            serving_settings(rb),
            router=router,
            standby=HttpEndpoint(rb.serving.standby_url),
            expected_digest=certified_weights_digest(rb),
            ledger=ledger,
            outage_started_at=outage,
            detected_at=detected,
            sites=primary_site(rb),
        )
        time.sleep(0.5)  # the client keeps going a little after the watch
    finally:
        stop(client)
    switched = entry.phases.get("traffic_switched")
    measured = f"python load loop in its own process, {RATE} req/s from {WORKERS} workers through HAProxy, 1 s timeout"
    window = client_window(read_samples(samples), switched or datetime.now(UTC), measured)
    ledger.client_window(window)
    picture = render_timeline(ledger.entry, timeline_path(ledger.entry))
    failures = "; ".join(f.error for f in entry.failures)
    say(f"4. {entry.outcome}: {failures or 'all traffic on the verified standby'}")
    print(entry_markdown(ledger.entry), flush=True)
    say(f"timeline: {picture}")
    if bad_standby:
        ok = entry.outcome == "failed" and "model version" in failures and router.weights()["secondary"] == 0
        say("demo passed: the standby on other weights got no traffic" if ok else "demo FAILED")
        return 0 if ok else 1
    if switched is None or window.window is None:
        say("demo FAILED: traffic never reached the standby")
        return 1
    target, met = rb.rto_target, window.window <= rb.rto_target
    say(
        f"client-visible error window {window.window.total_seconds():.2f} s "
        f"(target {target.total_seconds():.0f} s): {'met' if met else 'MISSED'}; {window.errors} of "
        f"{window.requests} requests failed; traffic switched "
        f"{(switched - entry.phases['confirmed']).total_seconds():.2f} s after confirmation, "
        f"{(switched - entry.phases['outage_start']).total_seconds():.2f} s after the kill"
    )
    ok = entry.outcome == "completed" and met
    say("demo passed" if ok else "demo FAILED")
    return 0 if ok else 1


def start_client(url: str, out: Path) -> subprocess.Popen:
    log = open(DEMO / "client.log", "wb")  # noqa: SIM115 - lives as long as the process
    return subprocess.Popen(
        [sys.executable, "-m", "lifeboat_dr.standins.serving_client", "--url", url, "--rate", str(RATE),
         "--workers", str(WORKERS), "--out", str(out)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def wait_for(ready, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())
