"""Image presence and digest where the secondary pulls from, over the OCI distribution API."""

from __future__ import annotations

import pytest

from lifeboat_dr.kernel.errors import ProviderUnavailable
from lifeboat_dr.providers.image_registry import DOCKER_HUB, FakeRegistry, ImageRef, OciRegistry

DIGEST = "sha256:" + "ab" * 32


def test_image_references_split_like_a_registry_needs():
    assert ImageRef.parse("nvcr.io/nvidia/pytorch:24.05-py3") == ImageRef(
        "nvcr.io", "nvidia/pytorch", "24.05-py3"
    )
    assert ImageRef.parse("ubuntu") == ImageRef(DOCKER_HUB, "library/ubuntu", "latest")
    assert ImageRef.parse("localhost:5000/team/app@" + DIGEST) == ImageRef(
        "localhost:5000", "team/app", DIGEST
    )


def _registry(stub) -> OciRegistry:
    return OciRegistry(mirror={"nvcr.io": f"{stub.url}/nvcr"})


def test_present_image_reports_the_digest_the_mirror_serves(stub_registry):
    stub_registry.manifests[("nvcr/nvidia/pytorch", "24.05-py3")] = DIGEST
    assert _registry(stub_registry).digest("nvcr.io/nvidia/pytorch:24.05-py3") == DIGEST
    method, path, _ = stub_registry.requests[-1]
    assert (method, path) == ("HEAD", "/v2/nvcr/nvidia/pytorch/manifests/24.05-py3")


def test_absent_image_is_none_not_an_error(stub_registry):
    assert _registry(stub_registry).digest("nvcr.io/nvidia/pytorch:99.99") is None


def test_bearer_challenge_is_answered_with_a_pull_token_and_reused(stub_registry):
    stub_registry.require_token = True
    stub_registry.manifests[("nvcr/nvidia/pytorch", "24.05-py3")] = DIGEST
    reg = _registry(stub_registry)
    assert reg.digest("nvcr.io/nvidia/pytorch:24.05-py3") == DIGEST
    assert reg.digest("nvcr.io/nvidia/pytorch:24.05-py3") == DIGEST
    token_calls = [r for r in stub_registry.requests if r[0] == "GET"]
    assert len(token_calls) == 1 and "scope=repository%3Anvcr%2Fnvidia%2Fpytorch%3Apull" in token_calls[0][1]
    assert stub_registry.requests[-1][2] == "Bearer good-token"


def test_registry_outage_is_retryable(stub_registry):
    stub_registry.status_override = 503
    with pytest.raises(ProviderUnavailable):
        _registry(stub_registry).digest("nvcr.io/nvidia/pytorch:24.05-py3")


def test_unreachable_registry_is_retryable():
    reg = OciRegistry(mirror={"nvcr.io": "http://127.0.0.1:9"}, timeout=2)
    with pytest.raises(ProviderUnavailable):
        reg.digest("nvcr.io/nvidia/pytorch:24.05-py3")


@pytest.mark.parametrize("make", ["fake", "oci"])
def test_fake_and_real_registry_agree(make, stub_registry):
    image = "nvcr.io/nvidia/pytorch:24.05-py3"
    stub_registry.manifests[("nvcr/nvidia/pytorch", "24.05-py3")] = DIGEST
    reg = FakeRegistry({image: DIGEST}) if make == "fake" else _registry(stub_registry)
    assert reg.digest(image) == DIGEST and reg.digest("nvcr.io/nvidia/pytorch:0.1") is None
