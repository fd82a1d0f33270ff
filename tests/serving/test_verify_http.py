"""Verification against real toy model servers over HTTP, the digest taken from a store."""

import shutil

from lifeboat_dr.core.serving.digest import dir_weights_digest, store_weights_digest
from lifeboat_dr.core.serving.verify import verify_standby
from lifeboat_dr.providers.serving.http import HttpEndpoint
from lifeboat_dr.providers.storage.local import LocalStore
from lifeboat_dr.standins.model_server import toy_server


def _weights(root, name: bytes):
    d = root / "checkpoint-1"
    d.mkdir(parents=True)
    (d / "model.safetensors").write_bytes(name * 500)
    (d / "config.json").write_text('{"layers": 2}')
    return d


def test_the_certified_weights_digest_is_what_a_server_on_those_weights_reports(tmp_path):
    d = _weights(tmp_path / "store", b"v1")
    store = LocalStore(tmp_path / "store")
    expected = store_weights_digest(store, "checkpoint-1")
    assert expected == dir_weights_digest(d)
    with toy_server(d, "standby") as url:
        check = verify_standby(HttpEndpoint(url), expected, budget_s=2)
    assert check.ok, check.problems
    assert check.served_digest == expected and check.canary_latency_s < 2


def test_a_server_on_other_weights_is_refused(tmp_path):
    certified = _weights(tmp_path / "store", b"v1")
    stale = _weights(tmp_path / "stale", b"v0")
    with toy_server(stale, "standby") as url:
        check = verify_standby(HttpEndpoint(url), dir_weights_digest(certified), budget_s=2)
    assert not check.ok and "model version: standby serves" in check.problems[0]


def test_one_changed_byte_changes_the_digest(tmp_path):
    d = _weights(tmp_path / "a", b"v1")
    e = tmp_path / "b"
    shutil.copytree(d, e)
    data = bytearray((e / "model.safetensors").read_bytes())
    data[100] ^= 1
    (e / "model.safetensors").write_bytes(bytes(data))
    assert dir_weights_digest(d) != dir_weights_digest(e)


def test_a_dead_standby_is_an_answer_not_an_exception(tmp_path):
    from lifeboat_dr.providers.traffic.local_haproxy import free_port

    check = verify_standby(HttpEndpoint(f"http://127.0.0.1:{free_port()}"), "sha256:x", budget_s=0.5)
    assert not check.ok and check.problems[0].startswith("health: no answer")
