"""Prestage against a real OCI registry: the Distribution registry (Debian's `docker-registry`)
on loopback with basic auth, the image pushed by a real client (Debian's `skopeo`, from an OCI
layout written here). The secondary's mirror is that registry; the credentials come from the
environment as a secret. The runbook pins the digest skopeo pushed: prestage pulls every blob
through the mirror by it, and a wrong digest, a missing tag and a refused login each say so in
one line. (The loopback stub in conftest.py stays for what this registry does not do here: a
Bearer token service, as nvcr.io and Docker Hub answer, and a 503.)
"""

from __future__ import annotations

import uuid

import pytest
from pydantic import SecretStr

from lifeboat_dr.core.prestage import check_readiness
from lifeboat_dr.providers.image_registry import FakeRegistry, OciRegistry, registry_credentials
from lifeboat_dr.providers.storage import open_store
from tests.peers import needs, without

pytestmark = needs(without("docker-registry", "skopeo"))

LAYERS = [b"cuda libraries " * 2000, b"python and torch " * 5000]


@pytest.fixture
def pushed(oci_registry):
    """An image skopeo pushed to the registry as `nvcr/<team>/pytorch:24.05-py3` (the
    mirror's path for nvcr.io/<team>/pytorch): (registry, image reference, digest, blob bytes)."""
    from lifeboat_dr.testing.oci_registry import push_image

    url, user, password = oci_registry
    team = f"t{uuid.uuid4().hex[:8]}"
    digest, size = push_image(url, f"nvcr/{team}/pytorch", "24.05-py3", (user, password), LAYERS)
    return oci_registry, f"nvcr.io/{team}/pytorch:24.05-py3", digest, size


def _mirror(url: str) -> dict[str, str]:
    return {"nvcr.io": f"{url}/nvcr"}


def _registry(url: str, user: str, password: str) -> OciRegistry:
    return OciRegistry(
        mirror=_mirror(url), credentials={url.removeprefix("http://"): (user, SecretStr(password))}
    )


def _one_line(readiness) -> str:
    (line,) = readiness.items
    assert "\n" not in line and "Traceback" not in line, line
    return line


def test_an_image_skopeo_pushed_is_prestaged_by_its_pinned_digest_through_the_mirror(pushed):
    (url, user, password), image, digest, size = pushed
    registry = _registry(url, user, password)
    ready = check_readiness([(image, digest)], [], "file:///unused", registry, open_store, pull=True)
    assert ready.ready, ready.items
    line = _one_line(ready)
    assert "pulled 3 blobs" in line and f"via {url}" in line and "pinned digest" in line
    assert registry.pull(image).bytes == size  # the config and both layers, each digest-checked
    assert registry.pull(image.split(":")[0] + "@" + digest).digest == digest  # by digest alone


def test_the_digest_alone_is_read_with_basic_auth_too(pushed):
    """The approval card's check reads only the manifest digest (a HEAD) through the same
    basic-auth mirror. It used to answer only a Bearer challenge: "registry refused (...
    registry wants Basic we cannot do)"."""
    (url, user, password), image, digest, _ = pushed
    ready = check_readiness(
        [(image, digest)], [], "file:///unused", _registry(url, user, password), open_store
    )
    assert ready.ready, ready.items
    assert "present, pinned digest" in _one_line(ready)


def test_the_mirror_credentials_come_from_the_environment_and_stay_secret(pushed, monkeypatch):
    (url, user, password), image, digest, _ = pushed
    host = url.removeprefix("http://")
    monkeypatch.setenv("LIFEBOAT_REGISTRY_" + host.replace(".", "_").replace(":", "_"), f"{user}:{password}")
    credentials = registry_credentials([host])
    assert isinstance(credentials[host][1], SecretStr) and password not in repr(credentials)
    registry = OciRegistry.for_images([image], _mirror(url))
    assert password not in repr(vars(registry))
    assert registry.pull(image).digest == digest


@pytest.mark.parametrize("pull", [True, False], ids=["pull", "digest"])
def test_a_wrong_pinned_digest_is_one_line_naming_both(pushed, pull):
    (url, user, password), image, digest, _ = pushed
    pinned = "sha256:" + "0" * 64
    check = check_readiness(
        [(image, pinned)], [], "file:///", _registry(url, user, password), open_store, pull=pull
    )
    assert not check.ready
    assert _one_line(check) == f"image {image}: digest {digest[:19]}… differs from pinned {pinned[:19]}…"


@pytest.mark.parametrize("pull", [True, False], ids=["pull", "digest"])
def test_a_tag_the_registry_lacks_is_one_line(pushed, pull):
    (url, user, password), image, digest, _ = pushed
    missing_tag = image.replace("24.05-py3", "25.01-py3")
    registry = _registry(url, user, password)
    check = check_readiness([(missing_tag, digest)], [], "file:///", registry, open_store, pull=pull)
    assert not check.ready
    assert _one_line(check) == f"image {missing_tag}: absent where the secondary pulls from"


@pytest.mark.parametrize("pull", [True, False], ids=["pull", "digest"])
def test_a_refused_login_is_one_line_that_says_401_and_never_the_password(pushed, pull):
    (url, user, password), image, digest, _ = pushed
    wrong = _registry(url, user, "guess-" + password)
    check = check_readiness([(image, digest)], [], "file:///", wrong, open_store, pull=pull)
    assert not check.ready
    line = _one_line(check)
    assert line.startswith(f"image {image}: registry refused (") and "(401)" in line, line
    assert "guess-" not in line and password not in line
    anonymous = OciRegistry(mirror=_mirror(url))
    check = check_readiness([(image, digest)], [], "file:///", anonymous, open_store, pull=pull)
    assert "no credentials are configured" in _one_line(check)


def test_an_index_skopeo_pushed_for_two_platforms_prestages_the_amd64_image(oci_registry):
    from lifeboat_dr.testing.oci_registry import push_image

    url, user, password = oci_registry
    team = f"t{uuid.uuid4().hex[:8]}"
    platforms = ["linux/arm64", "linux/amd64"]
    digest, size = push_image(
        url, f"nvcr/{team}/pytorch", "24.05", (user, password), LAYERS, platforms=platforms
    )
    report = _registry(url, user, password).pull(f"nvcr.io/{team}/pytorch:24.05")
    assert (report.digest, report.blobs, report.bytes) == (digest, 3, size)


def test_the_fake_registry_answers_as_the_real_one(pushed):
    (url, user, password), image, digest, _ = pushed
    absent = image.replace("24.05-py3", "0.1")
    for registry in (FakeRegistry({image: digest}), _registry(url, user, password)):
        assert (registry.digest(image), registry.digest(absent)) == (digest, None)
        assert registry.pull(image).digest == digest and registry.pull(absent) is None
