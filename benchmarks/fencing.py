"""Fencing and approval-ack costs, each against a bare baseline.

- fence(): read + conditional write of the lease, vs one unconditional put of the same bytes
  (LocalStore, MemoryStore, S3 on moto);
- a 16-writer race round (threads), vs 16 bare puts from 16 threads;
- /slack/actions: signature check + allow-list + background resume, vs a bare Starlette route.
Prints ratios; nothing here asserts a speed."""

from __future__ import annotations

import contextlib
import logging
import statistics
import tempfile
import threading
import time
from pathlib import Path


def _median_ms(fn, n: int) -> float:
    samples = []
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        samples.append((time.perf_counter() - t) * 1000)
    return statistics.median(samples)


def _race_round(store, trial: int, work) -> None:
    barrier = threading.Barrier(16)
    threads = [
        threading.Thread(target=lambda i=i: (barrier.wait(), work(store, trial, i))) for i in range(16)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


BODY = b'{"acquired_at": "2026-11-30T08:00:00+00:00", "epoch": 1, "holder": "secondary", "run_id": "r"}'


def _fence_vs_put(name: str, store, bare, n: int) -> None:
    from lifeboat.fencing import LEASE_KEY, fence

    fence_ms = _median_ms(lambda i: fence(store, run_id=f"run-{i}", holder="secondary"), n)
    put_ms = _median_ms(lambda i: bare.put(LEASE_KEY, BODY), n)
    print(
        f"fence() on {name}: {fence_ms:.3f} ms median vs bare put {put_ms:.3f} ms ({fence_ms / put_ms:.1f}x)"
    )


def _fencing(root: Path) -> None:
    from lifeboat.errors import StopFailover
    from lifeboat.fencing import fence
    from providers.storage.emulators import moto_server, new_s3_bucket
    from providers.storage.local import LocalStore
    from providers.storage.memory import MemoryStore
    from providers.storage.s3 import S3Store

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    bare = LocalStore(root / "bare")
    _fence_vs_put("LocalStore", LocalStore(root / "fence"), bare, 200)
    _fence_vs_put("MemoryStore", MemoryStore(), MemoryStore(), 200)
    with moto_server() as url:
        _fence_vs_put(
            "S3 (moto, loopback)",
            S3Store(new_s3_bucket(url), "fence", endpoint_url=url),
            S3Store(new_s3_bucket(url), "bare", endpoint_url=url),
            40,
        )

    def racer(s, trial, i):
        with contextlib.suppress(StopFailover):
            fence(s, run_id=f"t{trial}-w{i}", holder=f"w{i}", expect_epoch=trial)

    race_store = LocalStore(root / "race")
    race_ms = _median_ms(lambda t: _race_round(race_store, t, racer), 20)
    bare_ms = _median_ms(lambda t: _race_round(bare, t, lambda s, trial, i: s.put(f"k{i}", BODY)), 20)
    print(
        f"16-writer race round: {race_ms:.2f} ms median vs 16 bare puts {bare_ms:.2f} ms ({race_ms / bare_ms:.1f}x)"
    )


def _slack_ack() -> None:
    import json
    import warnings

    warnings.filterwarnings("ignore", category=DeprecationWarning)  # starlette's TestClient/httpx notice
    from urllib.parse import urlencode

    from pydantic import SecretStr
    from slack_sdk.signature import SignatureVerifier
    from starlette.responses import Response
    from starlette.routing import Route
    from starlette.testclient import TestClient

    from shell.server import create_app
    from shell.slack_actions import SlackSettings, slack_routes

    class QuietChat:
        def ephemeral(self, *a):
            pass

        def update_blocks(self, *a, **k):
            pass

    secret = "bench-signing-secret"
    settings = SlackSettings(
        signing_secret=SecretStr(secret),
        bot_token=SecretStr("x"),
        approvers={"job": ["U1"]},
        channels={"job": "C1"},
    )
    actions = TestClient(create_app(slack_routes(settings, resume=lambda r, i: None, chat=QuietChat())))
    bare = TestClient(create_app([Route("/slack/actions", lambda req: Response("ok"), methods=["POST"])]))

    def click(client, i):
        payload = {
            "user": {"id": "U1"},
            "channel": {"id": "C1"},
            "message": {"ts": "1.0", "blocks": []},
            "actions": [
                {"action_id": "lifeboat_approve", "value": json.dumps({"run_id": f"r{i}", "runbook": "job"})}
            ],
        }
        body = urlencode({"payload": json.dumps(payload)})
        ts = str(int(time.time()))
        sig = SignatureVerifier(secret).generate_signature(timestamp=ts, body=body)
        client.post(
            "/slack/actions",
            content=body,
            headers={
                "x-slack-request-timestamp": ts,
                "x-slack-signature": sig,
                "content-type": "application/x-www-form-urlencoded",
            },
        )

    ours = _median_ms(lambda i: click(actions, i), 200)
    base = _median_ms(lambda i: click(bare, i), 200)
    print(
        f"/slack/actions ack (verify + checks + background resume): {ours:.2f} ms median vs bare route "
        f"{base:.2f} ms ({ours / base:.2f}x); Slack's limit is 3000 ms"
    )


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _fencing(Path(tmp))
    _slack_ack()


if __name__ == "__main__":
    main()
