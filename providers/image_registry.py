"""Container registries: is an image present, with which digest, where the secondary pulls from?

One primitive over the OCI distribution API: `HEAD /v2/<name>/manifests/<tag>` answers 200
with `Docker-Content-Digest` (present), 404 (absent) or 401 with a challenge: Bearer, which
we answer with the registry's anonymous (or basic-auth) token endpoint, or Basic (a
Distribution registry with htpasswd, a mirror behind a proxy), answered with the
credentials; then we retry once. No image bytes move. Header names are matched in any case
(Go's servers send `Www-Authenticate`). `OciRegistry` speaks HTTP with the standard library (no SDK);
`FakeRegistry` holds a dict and raises the same errors.

`mirror` maps an image's registry host to where the secondary actually pulls from (a
regional pull-through cache, Artifact Registry, ECR), e.g.
`{"nvcr.io": "https://us-central1-docker.pkg.dev/acme/nvcr"}`.

`pull(image)` pre-warms that mirror: it GETs the manifest (and, for an index, the
linux/amd64 one), then every blob (config and layers), streaming, each checked against its
sha256 digest, so a pull-through cache holds the whole image before the secondary's nodes
ask for it. Credentials (`registry_credentials`) come from `LIFEBOAT_REGISTRY_<HOST>`
(`user:password`), else the Prefect Secret block `lifeboat-registry-<host>`, else
`~/.docker/config.json`; the password is a `SecretStr`, unwrapped only into the header that
answers a Bearer token challenge or a Basic one.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import SecretStr

from lifeboat_dr.kernel.errors import ConfigError, ProviderUnavailable

MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ]
)
DOCKER_HUB = "registry-1.docker.io"


@dataclass(frozen=True)
class ImageRef:
    """`nvcr.io/nvidia/pytorch:24.05-py3` split the way a registry needs it."""

    host: str  # registry host[:port]
    name: str  # repository path, e.g. nvidia/pytorch (library/ added for Docker Hub)
    reference: str  # tag or sha256:... digest

    @classmethod
    def parse(cls, image: str) -> ImageRef:
        rest, digest = (image.split("@", 1) + [""])[:2]
        first, _, remainder = rest.partition("/")
        if remainder and ("." in first or ":" in first or first == "localhost"):
            host, path = first, remainder
        else:
            host, path = DOCKER_HUB, rest
        name, tag = path, "latest"
        if ":" in path.rsplit("/", 1)[-1]:
            name, tag = path.rsplit(":", 1)
        if host in (DOCKER_HUB, "docker.io") and "/" not in name:
            name = f"library/{name}"
        host = DOCKER_HUB if host == "docker.io" else host
        if not re.fullmatch(r"[a-z0-9]+(?:[._/-][a-z0-9]+)*", name):
            raise ConfigError(f"{image!r} is not an image reference")
        return cls(host=host, name=name, reference=digest or tag)


@dataclass(frozen=True)
class PullReport:
    """What pre-warming one image through the mirror fetched, every byte digest-checked."""

    digest: str  # the manifest (or index) digest the mirror serves for the reference
    blobs: int  # config + layer blobs fetched
    bytes: int  # blob bytes fetched
    where: str  # the base URL pulled from (the mirror, or the registry itself)


@runtime_checkable
class Registry(Protocol):
    def digest(self, image: str) -> str | None:
        """The manifest digest (`sha256:...`) the registry serves for `image`, or None when
        it does not have it. Raises `ProviderUnavailable` when the registry cannot answer."""
        ...

    def pull(self, image: str) -> PullReport | None:
        """Fetch the image's manifest and every blob where the secondary pulls from (warming a
        pull-through mirror), verifying each digest; None when absent. Raises
        `ProviderUnavailable` (unreachable, or a blob that does not match its digest)."""
        ...


Credentials = dict[str, tuple[str, SecretStr]]  # registry host[:port] -> (user, password)


def registry_credentials(hosts, env=None, docker_config: Path | None = None) -> Credentials:
    """`user:password` per registry host: `LIFEBOAT_REGISTRY_<HOST>` (host upper-cased, every
    other character `_`), else the Prefect Secret block `lifeboat-registry-<host>` (dots and
    colons as `-`), else `~/.docker/config.json`'s `auths`. Hosts with none are left out."""
    env = os.environ if env is None else env
    docker = _docker_auths(docker_config or Path.home() / ".docker" / "config.json")
    out = {}
    for host in hosts:
        value = env.get("LIFEBOAT_REGISTRY_" + re.sub(r"[^A-Z0-9]", "_", host.upper()))
        value = value or _secret_block("lifeboat-registry-" + re.sub(r"[^a-z0-9]", "-", host.lower()))
        value = value or docker.get(host)
        if value and ":" in value:
            user, _, password = value.partition(":")
            out[host] = (user, SecretStr(password))
    return out


def _docker_auths(path: Path) -> dict[str, str]:
    try:
        auths = json.loads(path.read_text()).get("auths") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    out = {}
    for host, entry in auths.items():
        try:
            out[urllib.parse.urlparse(host).netloc or host] = base64.b64decode(entry["auth"]).decode()
        except (KeyError, TypeError, ValueError):
            continue
    return out


def _secret_block(name: str) -> str | None:
    if not os.environ.get("PREFECT_API_URL"):
        return None  # no server: no blocks (and no temporary server started for a lookup)
    from lifeboat_dr.kernel.errors import LifeboatError
    from lifeboat_dr.providers.orchestrator.prefect_api import secret

    try:
        return secret(name)
    except LifeboatError:  # no such block, server down: no credentials from there
        return None


class FakeRegistry:
    """A dict of `image -> digest`; `down=True` makes every call fail like an outage."""

    def __init__(self, images: dict[str, str] | None = None, *, down: bool = False):
        self.images = dict(images or {})
        self.down = down
        self.calls: list[str] = []
        self.pulled: list[str] = []
        self.layers = 3  # blobs a fake pull reports

    def digest(self, image: str) -> str | None:
        self.calls.append(image)
        ImageRef.parse(image)
        if self.down:
            raise ProviderUnavailable(f"registry for {image} unavailable (fake outage)")
        return self.images.get(image)

    def pull(self, image: str) -> PullReport | None:
        digest = self.digest(image)
        if digest is None:
            return None
        self.pulled.append(image)
        return PullReport(digest, self.layers, self.layers * 1024, "fake")


class OciRegistry:
    """The OCI distribution API over HTTPS (or HTTP for a local mirror)."""

    def __init__(
        self,
        *,
        mirror: dict[str, str] | None = None,
        credentials: Credentials | None = None,
        timeout: float = 10.0,
    ):
        self.mirror = {k: v.rstrip("/") for k, v in (mirror or {}).items()}
        self.credentials = credentials or {}  # the password is unwrapped only into a header
        self.timeout = timeout
        self._auth: dict[tuple[str, str], str] = {}  # (base, repository) -> Authorization header

    def _base(self, ref: ImageRef) -> tuple[str, str]:
        """Base URL and repository path prefix where this image is pulled from."""
        url = self.mirror.get(ref.host) or f"https://{ref.host}"
        parsed = urllib.parse.urlparse(url)
        return f"{parsed.scheme}://{parsed.netloc}", parsed.path.strip("/")

    def digest(self, image: str) -> str | None:
        ref = ImageRef.parse(image)
        base, prefix = self._base(ref)
        name = f"{prefix}/{ref.name}" if prefix else ref.name
        url = f"{base}/v2/{name}/manifests/{ref.reference}"
        status, headers, _ = self._request("HEAD", url, ref, base, name)
        if status == 404:
            return None
        digest = headers.get("docker-content-digest")
        if not digest:
            raise ProviderUnavailable(f"{url}: {status} without Docker-Content-Digest")
        return digest

    @classmethod
    def for_images(cls, images: Iterable[str], mirror: Mapping[str, str]) -> OciRegistry:
        """Pulls through `mirror` (registry host -> mirror URL), with the credentials for
        every host involved: the images' own and the mirrors'."""
        mirrors = dict(mirror)
        hosts = {ImageRef.parse(image).host for image in images}
        hosts |= {urllib.parse.urlparse(u).netloc for u in mirrors.values()}
        return cls(mirror=mirrors, credentials=registry_credentials(sorted(hosts)))

    def pull(self, image: str) -> PullReport | None:
        ref = ImageRef.parse(image)
        base, prefix = self._base(ref)
        name = f"{prefix}/{ref.name}" if prefix else ref.name
        found = self._get_manifest(ref, base, name, ref.reference)
        if found is None:
            return None
        digest, manifest = found
        if "manifests" in manifest:  # an index: the platform the GPU nodes run
            chosen = next(
                (
                    m
                    for m in manifest["manifests"]
                    if (m.get("platform") or {}).get("os") == "linux"
                    and (m.get("platform") or {}).get("architecture") == "amd64"
                ),
                (manifest["manifests"] or [None])[0],
            )
            if chosen is None:
                raise ProviderUnavailable(f"{image}: empty image index")
            inner = self._get_manifest(ref, base, name, chosen["digest"])
            if inner is None:
                raise ProviderUnavailable(
                    f"{image}: index names {chosen['digest']}, which the registry lacks"
                )
            manifest = inner[1]
        blobs = [manifest.get("config"), *(manifest.get("layers") or [])]
        total = 0
        for blob in (b for b in blobs if b):
            total += self._get_blob(ref, base, name, blob["digest"])
        return PullReport(digest, sum(1 for b in blobs if b), total, base)

    def _get_manifest(self, ref: ImageRef, base: str, name: str, reference: str) -> tuple[str, dict] | None:
        url = f"{base}/v2/{name}/manifests/{reference}"
        status, headers, body = self._request("GET", url, ref, base, name)
        if status == 404:
            return None
        actual = "sha256:" + hashlib.sha256(body).hexdigest()
        digest = headers.get("docker-content-digest") or actual
        if digest != actual or (reference.startswith("sha256:") and reference != actual):
            raise ProviderUnavailable(f"{url}: manifest body is {actual}, not {digest}")
        try:
            return digest, json.loads(body)
        except ValueError:
            raise ProviderUnavailable(f"{url}: manifest is not JSON") from None

    def _get_blob(self, ref: ImageRef, base: str, name: str, digest: str) -> int:
        url = f"{base}/v2/{name}/blobs/{digest}"
        h, size = hashlib.sha256(), 0

        def sink(chunk: bytes) -> None:
            nonlocal size
            h.update(chunk)
            size += len(chunk)

        status, _, _ = self._request("GET", url, ref, base, name, sink=sink)
        if status == 404:
            raise ProviderUnavailable(f"{url}: blob missing where the secondary pulls from")
        if "sha256:" + h.hexdigest() != digest:
            raise ProviderUnavailable(f"{url}: blob bytes do not match {digest}")
        return size

    def _request(self, method, url, ref, base, name, *, sink=None) -> tuple[int, dict[str, str], bytes]:
        """One GET/HEAD, answering a 401 challenge once (the answer is kept for the next
        request to the repository); non-2xx other than 404 raise. Header names lower-cased."""
        status, headers, body = self._send(method, url, self._auth.get((base, name)), sink)
        if status == 401:
            self._auth[(base, name)] = self._answer(base, name, headers.get("www-authenticate", ""), ref.host)
            status, headers, body = self._send(method, url, self._auth[(base, name)], sink)
        if status in (401, 403):
            raise ConfigError(f"{url}: registry refused us ({status}); check the pull credentials")
        if status != 404 and not 200 <= status < 300:
            raise ProviderUnavailable(f"{url}: registry answered {status}")
        return status, headers, body

    def _send(self, method, url, auth, sink) -> tuple[int, dict[str, str], bytes]:
        req = urllib.request.Request(url, method=method, headers={"Accept": MANIFEST_TYPES})
        if auth:
            req.add_header("Authorization", auth)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                if sink is None:
                    return resp.status, _lower(resp.headers), resp.read()
                while chunk := resp.read(1 << 20):
                    sink(chunk)
                return resp.status, _lower(resp.headers), b""
        except urllib.error.HTTPError as e:
            return e.code, _lower(e.headers or {}), b""
        except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
            raise ProviderUnavailable(f"{url}: {getattr(e, 'reason', e)}") from e

    def _answer(self, base: str, name: str, challenge: str, host: str) -> str:
        """The Authorization header for a 401 challenge: a Bearer token, or Basic credentials."""
        if challenge.lower().startswith("basic"):
            user_pw = self._credentials_for(base, host)
            if user_pw is None:
                raise ConfigError(
                    f"{base}: registry wants Basic auth and no credentials are configured for it"
                )
            return _basic(user_pw)
        return f"Bearer {self._token(base, name, challenge, host)}"

    def _credentials_for(self, base: str, host: str) -> tuple[str, SecretStr] | None:
        return self.credentials.get(urllib.parse.urlparse(base).netloc) or self.credentials.get(host)

    def _token(self, base: str, name: str, challenge: str, host: str) -> str:
        if not challenge.lower().startswith("bearer "):
            raise ConfigError(f"{base}: registry wants {challenge.split(' ')[0] or 'auth'} we cannot do")
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = params.pop("realm", None)
        if not realm:
            raise ProviderUnavailable(f"{base}: Bearer challenge without realm")
        params.setdefault("scope", f"repository:{name}:pull")
        req = urllib.request.Request(f"{realm}?{urllib.parse.urlencode(params)}")
        if (user_pw := self._credentials_for(base, host)) is not None:
            req.add_header("Authorization", _basic(user_pw))
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                doc = json.loads(resp.read())
        except urllib.error.HTTPError as e:
            raise ConfigError(f"{realm}: token request refused ({e.code})") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError, ValueError) as e:
            raise ProviderUnavailable(f"{realm}: {e}") from e
        token = doc.get("token") or doc.get("access_token")
        if not token:
            raise ProviderUnavailable(f"{realm}: no token in the answer")
        return token


def _basic(user_pw: tuple[str, SecretStr]) -> str:
    """The Basic Authorization header: the one place the password is unwrapped."""
    user, password = user_pw
    return "Basic " + base64.b64encode(f"{user}:{password.get_secret_value()}".encode()).decode()


def _lower(headers) -> dict[str, str]:
    """Response headers keyed by lower-cased name (HTTP names are case-insensitive)."""
    return {k.lower(): v for k, v in headers.items()}
