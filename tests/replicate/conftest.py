"""Stores for replication tests: local stores, and proxies that misbehave like a network."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from lifeboat_dr.core.checkpoints.manifest import build_manifest, commit_manifest
from lifeboat_dr.kernel.errors import ProviderUnavailable
from lifeboat_dr.providers.storage.local import LocalStore
from tests.runbook_yaml import two_site_runbook


class ProxyStore:
    """Forwards to a real store; subclasses override one primitive to inject a fault."""

    def __init__(self, inner):
        self.inner = inner
        self.uri = inner.uri
        self.capabilities = inner.capabilities
        self.lock = threading.Lock()
        self.calls: list[tuple[str, str]] = []

    def _log(self, op: str, key: str) -> None:
        with self.lock:
            self.calls.append((op, key))

    def list(self, prefix: str = ""):
        return self.inner.list(prefix)

    def head(self, key: str):
        return self.inner.head(key)

    def read(self, key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        return self.inner.read(key, start, end)

    def put(self, key: str, data, **kw):
        self._log("put", key)
        return self.inner.put(key, data, **kw)

    def delete(self, key: str) -> None:
        self._log("delete", key)
        self.inner.delete(key)

    def server_copy(self, source, src_key: str, dst_key: str, **cond):
        return None  # force streaming through Lifeboat


class CheckingStore(ProxyStore):
    """Runs `check()` (a reader's view of the store) around every write and delete."""

    def __init__(self, inner, check):
        super().__init__(inner)
        self.check = check

    def put(self, key: str, data, **kw):
        self.check()
        info = super().put(key, data, **kw)
        self.check()
        return info

    def delete(self, key: str) -> None:
        super().delete(key)
        self.check()


class FlippingStore(ProxyStore):
    """A source whose reads flip one byte of the chosen keys, `times` times."""

    def __init__(self, inner, keys: set[str], times: int = 1):
        super().__init__(inner)
        self.keys, self.left = keys, {k: times for k in keys}

    def read(self, key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        flip = False
        with self.lock:
            if self.left.get(key, 0) > 0:
                self.left[key] -= 1
                flip = True
        for i, chunk in enumerate(self.inner.read(key, start, end)):
            if flip and i == 0 and chunk:
                chunk = bytes([chunk[0] ^ 0x01]) + chunk[1:]
            yield chunk


class ThrottlingStore(ProxyStore):
    """A destination answering every `every`-th put with a 503 SlowDown."""

    def __init__(self, inner, every: int = 2):
        super().__init__(inner)
        self.every, self.n, self.throttled = every, 0, 0

    def put(self, key: str, data, **kw):
        with self.lock:
            self.n += 1
            throttle = self.n % self.every == 0
            self.throttled += throttle
        if throttle:
            for _ in data if not isinstance(data, bytes) else ():
                pass  # the request body went out before the 503 came back
            raise ProviderUnavailable(f"{key}: 503 SlowDown")
        return super().put(key, data, **kw)


def write_checkpoint(store, prefix: str, step: int, shards: int = 4, size: int = 3000) -> None:
    """A committed Lifeboat-manifest checkpoint: shards first, manifest last."""
    for i in range(shards):
        pattern = bytes((step * 7 + i * 13 + j) % 251 for j in range(251))
        body = (pattern * (size // 251 + 1))[:size]
        store.put(f"{prefix}/shard-{i:03d}.bin", body)
    commit_manifest(store, prefix, build_manifest(store, prefix, step))


@pytest.fixture
def primary(tmp_path):
    return LocalStore(tmp_path / "primary")


@pytest.fixture
def secondary(tmp_path):
    return LocalStore(tmp_path / "secondary")


@pytest.fixture
def no_sleep():
    from lifeboat_dr.core.transfer import RetryPolicy

    return RetryPolicy(attempts=5, base_delay=0.0, sleep=lambda s: None)


@pytest.fixture
def faults():
    """The proxy classes, for tests to wrap stores with (and subclass)."""
    from types import SimpleNamespace

    return SimpleNamespace(
        Proxy=ProxyStore, Checking=CheckingStore, Flipping=FlippingStore, Throttling=ThrottlingStore
    )


@pytest.fixture(name="write_checkpoint")
def _write_checkpoint():
    return write_checkpoint


@pytest.fixture
def runbook_file(tmp_path):
    """A runbook whose primary and secondary are the `primary`/`secondary` fixtures' folders."""
    path = tmp_path / "trainer.yaml"
    path.write_text(
        two_site_runbook(
            "trainer",
            checkpoint={
                "layout": "manifest",
                "cadence": "5m",
                "retention": {"keep_last": 2, "keep_every": 100},
            },
            targets={"rpo": "30m"},
        )
    )
    return path


@pytest.fixture
def make_store(request, tmp_path):
    """`make_store("local" | "s3" | "gcs" | "fake-gcs" | "memory", endpoint_url=None)`: a fresh
    store (new bucket)."""
    from itertools import count

    n = count()

    def make(backend: str, endpoint_url: str | None = None):
        if backend == "local":
            return LocalStore(tmp_path / f"{backend}{next(n)}")
        if backend == "s3":
            from lifeboat_dr.providers.storage.s3 import S3Store
            from lifeboat_dr.testing.emulators import new_s3_bucket

            url = request.getfixturevalue("s3_endpoint")
            return S3Store(new_s3_bucket(url), "ckpt", endpoint_url=endpoint_url or url)
        if backend in ("gcs", "fake-gcs"):  # fake-gcs-server enforces generation preconditions
            from lifeboat_dr.providers.storage.gcs import GcsStore
            from lifeboat_dr.testing.emulators import new_gcs_bucket

            url = request.getfixturevalue("gcs_endpoint" if backend == "gcs" else "fake_gcs_endpoint")
            return GcsStore(new_gcs_bucket(url), "ckpt", endpoint_url=url)
        if backend == "memory":
            from lifeboat_dr.testing.memory_store import MemoryStore

            return MemoryStore()
        raise ValueError(backend)

    return make
