"""Prestage pre-warms the secondary's mirror: every blob of each image fetched through it and
checked against its digest, with credentials from the environment, a Prefect block or the
docker config; readiness says the digest and what was pulled, per image."""

from __future__ import annotations

import base64
import json

import pytest
from pydantic import SecretStr

from lifeboat_dr.core.prestage import check_readiness
from lifeboat_dr.kernel.errors import ConfigError, ProviderUnavailable
from lifeboat_dr.providers.image_registry import OciRegistry, registry_credentials
from lifeboat_dr.providers.storage import open_store

IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"
LAYERS = [b"layer-one" * 1000, b"layer-two" * 3000]


def _mirror(stub) -> dict[str, str]:
    return {"nvcr.io": f"{stub.url}/nvcr"}


def test_pull_fetches_the_amd64_manifest_and_every_blob_through_the_mirror(stub_registry):
    stub_registry.require_token = True
    digest = stub_registry.publish("nvcr/nvidia/pytorch", "24.05-py3", LAYERS)
    report = OciRegistry(mirror=_mirror(stub_registry)).pull(IMAGE)
    assert report.digest == digest and report.blobs == 3 and report.where == stub_registry.url
    assert report.bytes == sum(map(len, LAYERS)) + len(b'{"architecture": "amd64"}')
    fetched = [p for m, p, _ in stub_registry.requests if m == "GET" and "/blobs/" in p]
    assert len(fetched) == 3 and not any(stub_registry.blobs[p.rsplit("/", 1)[1]] == b"arm" for p in fetched)
    again = OciRegistry(mirror=_mirror(stub_registry)).pull(IMAGE)  # twice: same answer
    assert again == report


def test_readiness_reports_digest_and_pull_per_image_and_refuses_a_corrupt_layer(stub_registry):
    digest = stub_registry.publish("nvcr/nvidia/pytorch", "24.05-py3", LAYERS)
    registry = OciRegistry(mirror=_mirror(stub_registry))
    ready = check_readiness([(IMAGE, digest)], [], "file:///unused", registry, open_store, pull=True)
    assert ready.ready and ready.images[0].found == digest
    assert "pulled 3 blobs" in ready.items[0] and "pinned digest" in ready.items[0]
    layer = next(d for d, b in stub_registry.blobs.items() if b == LAYERS[1])
    stub_registry.blobs[layer] = LAYERS[1][:-1] + b"X"  # the mirror serves a damaged layer
    bad = check_readiness([(IMAGE, digest)], [], "file:///unused", registry, open_store, pull=True)
    assert not bad.ready and "do not match" in bad.items[0]
    with pytest.raises(ProviderUnavailable, match="do not match"):
        registry.pull(IMAGE)


def test_an_absent_image_is_not_ready(stub_registry):
    registry = OciRegistry(mirror=_mirror(stub_registry))
    assert registry.pull(IMAGE) is None
    check = check_readiness([(IMAGE, None)], [], "file:///unused", registry, open_store, pull=True)
    assert not check.ready and "absent" in check.items[0]


def test_basic_auth_mirror_with_credentials_from_the_environment(stub_registry, monkeypatch):
    stub_registry.basic = ("puller", "s3cret")
    stub_registry.publish("nvcr/nvidia/pytorch", "24.05-py3", LAYERS)
    host = stub_registry.url.removeprefix("http://")
    with pytest.raises(ConfigError, match="no credentials"):
        OciRegistry(mirror=_mirror(stub_registry)).pull(IMAGE)
    monkeypatch.setenv("LIFEBOAT_REGISTRY_" + host.replace(".", "_").replace(":", "_"), "puller:s3cret")
    creds = registry_credentials([host])
    assert {h: (u, p.get_secret_value()) for h, (u, p) in creds.items()} == {host: ("puller", "s3cret")}
    assert OciRegistry(mirror=_mirror(stub_registry), credentials=creds).pull(IMAGE).blobs == 3
    wrong = OciRegistry(mirror=_mirror(stub_registry), credentials={host: ("puller", SecretStr("guess"))})
    with pytest.raises(ConfigError, match="refused"):
        wrong.pull(IMAGE)


def test_credentials_from_the_docker_config(tmp_path):
    config = tmp_path / "config.json"
    auth = base64.b64encode(b"robot$ci:tok:en").decode()
    config.write_text(json.dumps({"auths": {"https://nvcr.io": {"auth": auth}, "bad.io": {}}}))
    found = registry_credentials(["nvcr.io", "bad.io"], env={}, docker_config=config)
    assert {h: (u, p.get_secret_value()) for h, (u, p) in found.items()} == {
        "nvcr.io": ("robot$ci", "tok:en")
    }
    config.write_text("not json")
    assert registry_credentials(["nvcr.io"], env={}, docker_config=config) == {}


def test_a_registry_that_stopped_answering_is_unreachable_not_a_traceback():
    from lifeboat_dr.testing.emulators import dead_port

    registry = OciRegistry(mirror={"nvcr.io": dead_port()}, timeout=2)
    with pytest.raises(ProviderUnavailable):
        registry.pull(IMAGE)
    check = check_readiness([(IMAGE, None)], [], "file:///unused", registry, open_store, pull=True)
    assert not check.ready and "unreachable" in check.items[0]
