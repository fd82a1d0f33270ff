"""The synthetic client: an independent load loop, and the error window it saw.

    python -m lifeboat_dr.standins.serving_client --url http://127.0.0.1:8000/v1/infer --rate 50 --out samples.jsonl

Runs in its own process (so nothing Lifeboat does can hide its errors from it), sends `rate`
requests per second from a few concurrent workers, and appends one JSON line per request to `--out`:
`{"t": <send time, epoch s>, "ok": true, "status": 200, "ms": 3.1}`, until SIGTERM.
`client_window()` reads those lines back: first failed request -> first good one after
traffic moved to the standby, the client-visible RTO the ledger records for serving runbooks.
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from lifeboat_dr.core.ledger import ClientWindow
from lifeboat_dr.providers.serving.http import HttpEndpoint


def load_loop(url: str, rate: float, out: Path, timeout: float = 1.0, workers: int = 4) -> None:
    """`workers` threads, each sending `rate / workers` requests/s, staggered: like real
    traffic, one request stuck for `timeout` does not blind the client to the others."""
    scheme, _, rest = url.partition("://")
    base, _, path = rest.partition("/")
    endpoint = HttpEndpoint(f"{scheme}://{base}")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    lock = threading.Lock()
    period = workers / rate
    with open(out, "a") as f:

        def worker(k: int) -> None:
            start, n = time.monotonic() + k * period / workers, 0
            while not stop.is_set():
                time.sleep(max(0.0, start + n * period - time.monotonic()))
                sent = time.time()
                a = endpoint.post("/" + path, {"prompt": f"load {k}-{n}"}, timeout=timeout)
                line = json.dumps(
                    {"t": sent, "ok": a.ok, "status": a.status, "ms": round(a.latency_s * 1000, 2)}
                )
                with lock:
                    f.write(line + "\n")
                    f.flush()
                n += 1

        threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(workers)]
        for t in threads:
            t.start()
        while not stop.wait(0.1):
            pass
        for t in threads:
            t.join(timeout + 1)


def read_samples(path: Path) -> list[dict]:
    """The client's lines; a torn last line (killed mid-write) is skipped."""
    samples = []
    path = Path(path)
    for line in (path.read_text() if path.exists() else "").splitlines():
        try:
            samples.append(json.loads(line))
        except ValueError:
            continue
    return samples


def client_window(samples: Iterable[dict], switched_at: datetime, measured_by: str) -> ClientWindow:
    """First failed request -> first good one sent after `switched_at` (all traffic moved)."""
    samples = sorted(samples, key=lambda s: s["t"])
    at = lambda s: datetime.fromtimestamp(s["t"], UTC)  # noqa: E731
    first_error = next((at(s) for s in samples if not s["ok"]), None)
    good_after = next(
        (at(s) for s in samples if s["ok"] and at(s) >= switched_at and first_error and at(s) > first_error),
        None,
    )
    return ClientWindow(
        first_error=first_error,
        first_good_after=good_after,
        requests=len(samples),
        errors=sum(not s["ok"] for s in samples),
        measured_by=measured_by,
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m lifeboat_dr.standins.serving_client", description=__doc__.splitlines()[0]
    )
    p.add_argument("--url", required=True, help="full URL of the inference endpoint")
    p.add_argument("--rate", type=float, default=50.0, help="requests per second")
    p.add_argument("--out", required=True, type=Path, help="JSON lines, one per request")
    p.add_argument("--timeout", type=float, default=1.0, help="seconds before a request counts as failed")
    p.add_argument("--workers", type=int, default=4, help="concurrent requests in flight")
    a = p.parse_args(argv)
    load_loop(a.url, a.rate, a.out, a.timeout, a.workers)


if __name__ == "__main__":
    main()
