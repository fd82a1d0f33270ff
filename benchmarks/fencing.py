"""Fencing and approval-ack costs, each against a bare baseline.

- fence(): read + conditional write of the lease, vs one unconditional put of the same bytes
  (LocalStore, MemoryStore, S3 on moto);
- a 16-writer race round (threads), vs 16 bare puts from 16 threads;
- 16 guarded commits racing one fence, 1,000 rounds on MemoryStore, 300 on LocalStore, 3 on S3/moto,
  1,000 on GCS (fake-gcs-server, which enforces ifGenerationMatch; 30 with --quick):
  rounds where a writer's "committed"/"fenced out" disagrees with what certification reads,
  for the guarded commit and for the old check-put-check protocol judged by timestamps;
- guarded_commit vs a bare create-only put of the marker;
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
    from lifeboat_dr.core.fencing import LEASE_KEY, fence

    fence_ms = _median_ms(lambda i: fence(store, run_id=f"run-{i}", holder="secondary"), n)
    put_ms = _median_ms(lambda i: bare.put(LEASE_KEY, BODY), n)
    print(
        f"fence() on {name}: {fence_ms:.3f} ms median vs bare put {put_ms:.3f} ms ({fence_ms / put_ms:.1f}x)"
    )


def _fencing(root: Path) -> None:
    from lifeboat_dr.core.fencing import fence
    from lifeboat_dr.kernel.errors import StopFailover
    from lifeboat_dr.providers.storage.local import LocalStore
    from lifeboat_dr.providers.storage.s3 import S3Store
    from lifeboat_dr.testing.emulators import moto_server, new_s3_bucket
    from lifeboat_dr.testing.memory_store import MemoryStore

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


def _commit_round(store, n: int, rng, commit, counts, unavailable: list | None = None) -> tuple[bool, int]:
    """16 commits and one fence at once: (consistent, commits that count). A writer told
    ProviderUnavailable (the lease kept changing under its reads) must leave no marker that
    counts; `unavailable` collects them. A fence that fails (it has no rival) even retried
    on ProviderUnavailable, as the failover's step is, raises."""
    from lifeboat_dr.core.fencing import fence, read_lease
    from lifeboat_dr.kernel.errors import NotFound, ProviderUnavailable, StopFailover

    barrier, told, fenced = threading.Barrier(17), {}, []
    delay = rng.random() * 0.002

    def writer(i):
        barrier.wait()
        try:
            commit(store, f"r{n}/step-{i}/lifeboat-commit.json", i)
            told[i] = True
        except StopFailover:
            told[i] = False
        except ProviderUnavailable:
            told[i] = False
            if unavailable is not None:
                unavailable.append((n, i))

    def fencer():
        barrier.wait()
        time.sleep(delay)
        for attempt in range(3):  # retried on ProviderUnavailable, as the failover's step is
            try:
                fence(store, run_id=f"round-{n}", holder="secondary")
                fenced.append(None)
                return
            except ProviderUnavailable as e:
                if attempt == 2:
                    fenced.append(e)
            except Exception as e:
                fenced.append(e)
                return

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(16)] + [
        threading.Thread(target=fencer)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if fenced != [None]:
        raise RuntimeError(f"round {n}: the fence failed: {fenced[0] if fenced else 'never ran'}")
    lease, ok, counted = read_lease(store)[0], len(told) == 16, 0
    for i, committed in told.items():
        try:
            c = counts(b"".join(store.read(f"r{n}/step-{i}/lifeboat-commit.json")), lease)
        except NotFound:
            c = False
        counted += c
        ok &= c == committed
    return ok, counted


def _old_commit(store, key, step):
    """The protocol before #13: check the lease, put the marker, check again."""
    import json
    from datetime import UTC, datetime

    from lifeboat_dr.core.fencing import check_lease
    from lifeboat_dr.kernel.errors import StopFailover

    check_lease(store, 0)
    body = {"epoch": 0, "step": step, "written_at": datetime.now(UTC).isoformat()}
    store.put(key, json.dumps(body).encode(), if_none_match=True)
    try:
        check_lease(store, 0)
    except StopFailover:
        store.delete(key)
        raise


def _old_counts(marker: bytes, lease) -> bool:
    """The old reader: an older-epoch marker written at or after the fence's stamp is stale."""
    import json
    from datetime import datetime

    doc = json.loads(marker)
    return not (doc["epoch"] < lease.epoch and datetime.fromisoformat(doc["written_at"]) >= lease.acquired_at)


def _commit_race() -> None:
    import random

    from lifeboat_dr.core.fencing import guarded_commit, marker_is_fenced_out
    from lifeboat_dr.providers.storage.local import LocalStore
    from lifeboat_dr.providers.storage.s3 import S3Store
    from lifeboat_dr.testing.emulators import moto_server, new_s3_bucket
    from lifeboat_dr.testing.memory_store import MemoryStore

    def new(s, key, i):
        guarded_commit(s, key, 0, i)

    def new_counts(marker, lease):
        return not marker_is_fenced_out(marker, lease)

    def run(label, make_store, rounds, commit, counts):
        rng = random.Random(13)
        started = time.perf_counter()
        results = [_commit_round(make_store(n), n, rng, commit, counts) for n in range(rounds)]
        bad = sum(not ok for ok, _ in results)
        raced = sum(0 < c < 16 for _, c in results)
        print(
            f"16 commits vs a fence, {label}: {bad}/{rounds} inconsistent rounds "
            f"({raced} rounds split commits across the fence; {time.perf_counter() - started:.1f} s)"
        )

    run("MemoryStore, guarded commit", lambda n: MemoryStore(), 1000, new, new_counts)
    with tempfile.TemporaryDirectory() as tmp:
        for name, commit, counts in (
            ("guarded commit", new, new_counts),
            ("old check-put-check", _old_commit, _old_counts),
        ):
            run(
                f"LocalStore, {name}",
                lambda n, name=name: LocalStore(Path(tmp) / f"{name}-{n}"),
                300,
                commit,
                counts,
            )
    with moto_server() as url:
        rng, rounds = random.Random(13), []
        started = time.perf_counter()
        for n in range(3):
            store = S3Store(new_s3_bucket(url), f"race/{n}", endpoint_url=url)
            rounds.append(_commit_round(store, n, rng, new, new_counts))
        print(
            f"16 commits vs a fence, S3 (moto), guarded commit: {sum(not ok for ok, _ in rounds)}/3 inconsistent "
            f"rounds ({(time.perf_counter() - started) / 3:.1f} s a round: 16 writers contend on one lease)"
        )
        store, bare = (S3Store(new_s3_bucket(url), p, endpoint_url=url) for p in ("commit", "bare"))
        commit_ms = _median_ms(lambda i: guarded_commit(store, f"c{i}/lifeboat-commit.json", 0, i), 40)
        put_ms = _median_ms(lambda i: bare.put(f"c{i}/lifeboat-commit.json", BODY, if_none_match=True), 40)
        print(
            f"guarded_commit on S3 (moto): {commit_ms:.2f} ms median vs a bare create-only put "
            f"{put_ms:.2f} ms ({commit_ms / put_ms:.1f}x)"
        )
    _commit_race_on_gcs(new, new_counts)


def _commit_race_on_gcs(commit, counts) -> None:
    import os
    import random

    from lifeboat_dr.providers.storage.gcs import GcsStore
    from lifeboat_dr.testing.emulators import fake_gcs_server, new_gcs_bucket

    rounds = 30 if os.environ.get("LIFEBOAT_BENCH_QUICK") else 1000
    with fake_gcs_server() as url:
        rng, unavailable = random.Random(13), []
        started = time.perf_counter()
        results = [  # a bucket a round: fake-gcs-server scans a bucket's objects on every write
            _commit_round(
                GcsStore(new_gcs_bucket(url), "race", endpoint_url=url), n, rng, commit, counts, unavailable
            )
            for n in range(rounds)
        ]
        print(
            f"16 commits vs a fence, GCS (fake-gcs-server), guarded commit: {sum(not ok for ok, _ in results)}"
            f"/{rounds} inconsistent rounds ({sum(0 < c < 16 for _, c in results)} split commits across "
            f"the fence; {len(unavailable)} of {16 * rounds} writers told unavailable, none counted; "
            f"{(time.perf_counter() - started) / rounds:.2f} s a round)"
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

    from lifeboat_dr.shell.server import create_app
    from lifeboat_dr.shell.slack_actions import SlackSettings, slack_routes

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
    _commit_race()
    _slack_ack()


if __name__ == "__main__":
    main()
