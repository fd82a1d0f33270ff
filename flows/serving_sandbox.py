"""A realtime-serving runbook rewritten onto this machine: toy model servers behind HAProxy.

Used by `failover --dry-run` on a serving runbook and by `make demo DEMO_ARGS=--serving`.
Like `lifeboat_dr.flows.sandbox` for training: the runbook's stores become `file://` folders (the model's
weights on the primary, replicated to the secondary, as replication would leave them), each
site is a toy model server process (`lifeboat_dr.standins.model_server`) on a free loopback port, and the
router is a real HAProxy on loopback whatever the runbook names (Route 53 cannot run here).
The runbook's policy is kept (latency budget, switch steps, thresholds) with two rewrites: the
canary and endpoints become the toy's, and the watch and holds are capped at a few seconds.
"""

from __future__ import annotations

import json
import random
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

WATCH_CAP, HOLD_CAP = timedelta(seconds=3), timedelta(seconds=1)


@dataclass
class ServingSandbox:
    rb: object  # the rewritten runbook
    urls: dict[str, str]  # site -> the toy server's URL
    frontend: str  # HAProxy's frontend: where clients send requests
    folder: Path
    processes: dict[str, subprocess.Popen]

    def kill_primary(self) -> None:
        """SIGKILL the primary's model server: a lost node."""
        proc = self.processes["primary"]
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def confirm_outage(self, router, timeout_s: float = 10.0) -> tuple[datetime, list[str]]:
        """Two independent signals: the primary's own health endpoint, and the router's check
        of it. Returns when the first one failed, and both signals' evidence."""
        from lifeboat_dr.providers.serving.http import HttpEndpoint

        primary, first = HttpEndpoint(self.urls["primary"]), None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            own, seen = primary.get("/healthz", timeout=0.5), router.health()["primary"]
            signals = [f"health endpoint: {own.error or own.status}"] if not own.ok else []
            signals += [f"haproxy check: {seen.detail}"] if seen.state == "down" else []
            first = first or (datetime.now(UTC) if signals else None)
            if len(signals) == 2:
                return first, signals
            time.sleep(0.05)
        raise TimeoutError(f"the outage was not confirmed by two signals within {timeout_s:.0f} s")


def _weights(folder: Path, seed: int) -> None:
    """A `save_pretrained`-shaped export: config.json and one real safetensors file (8-byte
    header length, JSON header, data), so it certifies as `hf-weights`."""
    folder.mkdir(parents=True)
    data = random.Random(seed).randbytes(256 << 10)
    header = json.dumps({"w": {"dtype": "U8", "shape": [len(data)], "data_offsets": [0, len(data)]}}).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + data)
    (folder / "config.json").write_text('{"model_type": "toy", "hidden_size": 64}\n')


@contextmanager
def serving_sandbox(rb, folder: Path, *, stale_standby: bool = False) -> Iterator[ServingSandbox]:
    """Stage, start and route; stop every process on the way out. `stale_standby` gives the
    standby other weights than the certified ones (it must be refused)."""
    from lifeboat_dr.providers.serving.http import HttpEndpoint
    from lifeboat_dr.providers.storage.local import LocalStore
    from lifeboat_dr.providers.traffic.local_haproxy import free_port, local_haproxy
    from lifeboat_dr.standins.checkpoints import replicate

    primary, secondary = folder / "primary", folder / "secondary"
    _weights(primary / "checkpoint-1", 1)
    secondary.mkdir(parents=True)
    replicate(LocalStore(primary), LocalStore(secondary), "checkpoint-1")
    standby_weights = secondary / "checkpoint-1"
    if stale_standby:
        standby_weights = folder / "stale-weights"
        _weights(standby_weights, 0)
    ports = {"primary": free_port(), "secondary": free_port()}
    urls = {site: f"http://127.0.0.1:{port}" for site, port in ports.items()}
    procs: dict[str, subprocess.Popen] = {}
    try:
        for site, weights in (("primary", primary / "checkpoint-1"), ("secondary", standby_weights)):
            procs[site] = _start_toy(weights, ports[site], site, folder)
        for url in urls.values():
            _wait(lambda url=url: HttpEndpoint(url).get("/healthz", timeout=0.5).ok, 15, f"{url} to answer")
        t = rb.serving.traffic
        servers = {
            t.primary: ("127.0.0.1", ports["primary"], 255),
            t.secondary: ("127.0.0.1", ports["secondary"], 0),
        }
        with local_haproxy(t.backend or "serving", servers) as lb:
            yield ServingSandbox(_rewrite(rb, folder, urls, lb), urls, lb.frontend, folder, procs)
    finally:
        for proc in procs.values():
            stop(proc)


def _rewrite(rb, folder: Path, urls: dict[str, str], lb):
    s = rb.serving
    from lifeboat_dr.runbooks.model import TrafficRouterKind

    traffic = s.traffic.model_copy(
        update={"router": TrafficRouterKind.haproxy, "socket": lb.socket, "backend": lb.backend}
    )
    serving = s.model_copy(
        update={
            "traffic": traffic,
            "primary_url": urls["primary"],
            "standby_url": urls["secondary"],
            "weights": None,
            "health_path": "/healthz",
            "model_path": "/v1/model",
            "canary": s.canary.model_copy(
                update={"path": "/v1/infer", "body": {"prompt": "lifeboat canary"}}
            ),
            "switch": s.switch.model_copy(update={"hold": min(s.switch.hold, HOLD_CAP)}),
            "watch": s.watch.model_copy(update={"duration": min(s.watch.duration, WATCH_CAP)}),
        }
    )
    return rb.model_copy(
        update={
            "serving": serving,
            "primary": rb.primary.model_copy(
                update={"store": f"file://{(folder / 'primary').resolve()}", "endpoint_url": None}
            ),
            "secondary": rb.secondary.model_copy(
                update={"store": f"file://{(folder / 'secondary').resolve()}", "endpoint_url": None}
            ),
            "checkpoint": rb.checkpoint.model_copy(update={"layout": "hf-weights"}),
        }
    )


def _start_toy(weights: Path, port: int, name: str, folder: Path) -> subprocess.Popen:
    log = open(folder / f"{name}.log", "wb")  # noqa: SIM115 - lives as long as the process
    return subprocess.Popen(
        [sys.executable, "-m", "lifeboat_dr.standins.model_server", "--weights", str(weights), "--port", str(port), "--name", name],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def _wait(ready, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
