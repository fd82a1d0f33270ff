"""`make demo DEMO_ARGS=--serving`: kill a model server, move its traffic to the verified standby.

Two toy model servers (`lifeboat.serving.toy`, each its own process) serve the weights of
`runbooks/demo-serving.yaml`'s two sites behind a real HAProxy on loopback; the standby's
weights are the replica on the secondary. An independent client process
(`lifeboat.serving.client`, 50 requests/s through HAProxy) keeps a log of every request. The
primary is SIGKILLed; two signals (its own health endpoint, HAProxy's check) confirm the
outage; the serving failover certifies the replica's weights, verifies the standby (same
digest, health, canary in budget), switches HAProxy's weights at once and watches the
standby. The client's log gives the client-visible error window, printed against the RTO
target and recorded in the ledger; the timeline picture shows it. `--bad-standby` gives the
standby other weights: it is refused and traffic stays put. Exit 0 when the window meets
the target (or, with --bad-standby, when the standby was refused).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNBOOK = "runbooks/demo-serving.yaml"
DEMO = Path(".lifeboat/serving-demo")
RATE = 50.0  # client requests per second


def say(text: str) -> None:
    print(f"[lifeboat serving demo] {text}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="make demo DEMO_ARGS=--serving", description=__doc__.splitlines()[0])
    p.add_argument("--serving", action="store_true", help="(selects this demo from flows.demo)")
    p.add_argument(
        "--bad-standby", action="store_true", help="the standby loads other weights: it must be refused"
    )
    args = p.parse_args(argv)
    os.chdir(ROOT)
    shutil.rmtree(DEMO, ignore_errors=True)
    DEMO.mkdir(parents=True)
    from runbooks.loader import load_runbook

    rb = load_runbook(RUNBOOK)
    primary_weights, standby_weights = stage_weights(rb, bad=args.bad_standby)
    procs: list[subprocess.Popen] = []
    try:
        return play(rb, primary_weights, standby_weights, procs, bad_standby=args.bad_standby)
    finally:
        for proc in procs:
            stop(proc)


def stage_weights(rb, *, bad: bool) -> tuple[Path, Path]:
    """The model on the primary's store, replicated to the secondary's (as replication would)."""
    import random

    from lifeboat.checkpoints.synthetic import replicate
    from providers.storage.local import LocalStore

    primary, secondary = (
        Path(rb.store_uri(s.store).removeprefix("file://")) for s in (rb.primary, rb.secondary)
    )
    ckpt = primary / "checkpoint-1"
    ckpt.mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(random.Random(1).randbytes(256 << 10))
    (ckpt / "config.json").write_text('{"model_type": "toy", "hidden_size": 64}\n')
    secondary.mkdir(parents=True)
    replicate(LocalStore(primary), LocalStore(secondary), "checkpoint-1")
    standby = secondary / "checkpoint-1"
    if bad:  # the standby was left on last week's weights
        standby = DEMO / "stale-weights"
        standby.mkdir()
        (standby / "model.safetensors").write_bytes(random.Random(0).randbytes(256 << 10))
        (standby / "config.json").write_text('{"model_type": "toy", "hidden_size": 64}\n')
    say(f"weights on the primary store, replicated to the secondary: {secondary / 'checkpoint-1'}")
    return ckpt, standby


def play(rb, primary_weights: Path, standby_weights: Path, procs: list, *, bad_standby: bool) -> int:
    from flows.wiring import build_router, certified_weights_digest, serving_settings
    from lifeboat.ledger import LedgerFile, RtoLedger
    from lifeboat.serving.client import client_window, read_samples
    from lifeboat.serving.failover import serving_failover
    from lifeboat.timeline import entry_markdown, render_timeline, timeline_path
    from providers.serving.http import HttpEndpoint
    from providers.traffic.local_haproxy import free_port, local_haproxy

    ports = {"primary": free_port(), "standby": free_port()}
    procs.append(start_server(primary_weights, ports["primary"], "primary"))
    procs.append(start_server(standby_weights, ports["standby"], "standby"))
    urls = {site: f"http://127.0.0.1:{port}" for site, port in ports.items()}
    for url in urls.values():
        wait_healthy(HttpEndpoint(url))
    servers = {
        rb.serving.traffic.primary: ("127.0.0.1", ports["primary"], 255),
        rb.serving.traffic.secondary: ("127.0.0.1", ports["standby"], 0),
    }
    with local_haproxy(rb.serving.traffic.backend, servers) as lb:
        rb = with_loopback(rb, urls, lb.socket)
        router = build_router(rb)
        say(f"1. two toy model servers behind HAProxy {lb.frontend}: weights {router.weights()}")
        samples = DEMO / "client.jsonl"
        procs.append(start_client(f"{lb.frontend}/v1/infer", samples))
        wait_for(
            lambda: sum(s["ok"] for s in read_samples(samples)) >= RATE,
            10,
            "the client's first second of answers",
        )

        victim = procs[0]
        outage = datetime.now(UTC)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        say("2. SIGKILL the primary model server (a lost node)")
        detected, evidence = confirm_outage(HttpEndpoint(urls["primary"]), router)
        say(
            f"3. confirmed: 2 of 2 signals agree ({'; '.join(evidence)}), {(datetime.now(UTC) - outage).total_seconds():.2f} s after the kill"
        )

        ledger = RtoLedger.for_runbook(
            rb, f"demo-{outage:%Y%m%dT%H%M%S}", drill=True, sink=LedgerFile(), kind="serving"
        )
        entry = serving_failover(
            serving_settings(rb),
            router=router,
            standby=HttpEndpoint(urls["standby"]),
            expected_digest=certified_weights_digest(rb),
            ledger=ledger,
            outage_started_at=outage,
            detected_at=detected,
        )
        time.sleep(0.5)  # let the client see the standby after the watch, too
        stop(procs.pop())
        switched = entry.phases.get("first_step")
        measured = f"python load loop in its own process, {RATE:.0f} req/s from 4 workers through HAProxy, 1 s timeout"
        window = client_window(read_samples(samples), switched or datetime.now(UTC), measured)
        ledger.client_window(window)
        picture = render_timeline(ledger.entry, timeline_path(ledger.entry))
    say(
        f"4. {entry.outcome}: "
        + ("; ".join(f.error for f in entry.failures) or f"weights now {router_weights(entry)}")
    )
    print(entry_markdown(ledger.entry), flush=True)
    say(f"timeline: {picture}")
    if bad_standby:
        ok = entry.outcome == "failed" and "model version" in entry.failures[0].error
        say("demo passed: the standby on other weights got no traffic" if ok else "demo FAILED")
        return 0 if ok else 1
    if switched is None or window.window is None:
        say("demo FAILED: traffic never reached the standby")
        return 1
    target = rb.rto_target
    verdict = "met" if window.window <= target else "MISSED"
    say(
        f"client-visible error window {window.window.total_seconds():.2f} s (target {target.total_seconds():.0f} s): {verdict}; "
        f"{window.errors} of {window.requests} requests failed; switch took "
        f"{(switched - entry.phases['confirmed']).total_seconds():.2f} s after confirmation"
    )
    ok = entry.outcome == "completed" and window.window <= target
    say("demo passed" if ok else "demo FAILED")
    return 0 if ok else 1


def router_weights(entry) -> str:
    return entry.notes.get("switch", "") + " on the standby"


def with_loopback(rb, urls: dict[str, str], socket_path: str):
    """The runbook with the ports and the socket this run picked."""
    traffic = rb.serving.traffic.model_copy(update={"socket": socket_path})
    serving = rb.serving.model_copy(
        update={"primary_url": urls["primary"], "standby_url": urls["standby"], "traffic": traffic}
    )
    return rb.model_copy(update={"serving": serving})


def confirm_outage(primary, router, timeout_s: float = 10.0) -> tuple[datetime, list[str]]:
    """Two independent signals: the primary's own health endpoint, and HAProxy's check of it."""
    first: datetime | None = None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        own = primary.get("/healthz", timeout=0.5)
        seen = router.health()["primary"]
        signals = []
        if not own.ok:
            signals.append(f"health endpoint: {own.error or own.status}")
        if seen.state == "down":
            signals.append(f"haproxy check: {seen.detail}")
        if signals and first is None:
            first = datetime.now(UTC)
        if len(signals) == 2:
            return first, signals
        time.sleep(0.05)
    raise SystemExit("the outage was not confirmed by two signals within 10 s")


def start_server(weights: Path, port: int, name: str) -> subprocess.Popen:
    log = open(DEMO / f"{name}.log", "wb")  # noqa: SIM115 - lives as long as the process
    return subprocess.Popen(
        [sys.executable, "-m", "lifeboat.serving.toy", "--weights", str(weights), "--port", str(port), "--name", name],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def start_client(url: str, out: Path) -> subprocess.Popen:
    log = open(DEMO / "client.log", "wb")  # noqa: SIM115 - lives as long as the process
    return subprocess.Popen(
        [sys.executable, "-m", "lifeboat.serving.client", "--url", url, "--rate", str(RATE), "--out", str(out)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def wait_healthy(endpoint, timeout_s: float = 15.0) -> None:
    wait_for(lambda: endpoint.get("/healthz", timeout=0.5).ok, timeout_s, f"{endpoint.url} to answer")


def wait_for(ready, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    sys.exit(main())
