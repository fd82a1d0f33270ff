"""Container registries: is an image present, with which digest, where the secondary pulls from?

One primitive over the OCI distribution API: `HEAD /v2/<name>/manifests/<tag>` answers 200
with `Docker-Content-Digest` (present), 404 (absent) or 401 with a Bearer challenge, which
we answer with the registry's anonymous (or basic-auth) token endpoint and retry once. No
image bytes move. `OciRegistry` speaks HTTP with the standard library (no SDK);
`FakeRegistry` holds a dict and raises the same errors.

`mirror` maps an image's registry host to where the secondary actually pulls from (a
regional pull-through cache, Artifact Registry, ECR), e.g.
`{"nvcr.io": "https://us-central1-docker.pkg.dev/acme/nvcr"}`.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from lifeboat.errors import ConfigError, ProviderUnavailable

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


@runtime_checkable
class Registry(Protocol):
    def digest(self, image: str) -> str | None:
        """The manifest digest (`sha256:...`) the registry serves for `image`, or None when
        it does not have it. Raises `ProviderUnavailable` when the registry cannot answer."""
        ...


class FakeRegistry:
    """A dict of `image -> digest`; `down=True` makes every call fail like an outage."""

    def __init__(self, images: dict[str, str] | None = None, *, down: bool = False):
        self.images = dict(images or {})
        self.down = down
        self.calls: list[str] = []

    def digest(self, image: str) -> str | None:
        self.calls.append(image)
        ImageRef.parse(image)
        if self.down:
            raise ProviderUnavailable(f"registry for {image} unavailable (fake outage)")
        return self.images.get(image)


class OciRegistry:
    """The OCI distribution API over HTTPS (or HTTP for a local mirror)."""

    def __init__(
        self,
        *,
        mirror: dict[str, str] | None = None,
        credentials: dict[str, tuple[str, str]] | None = None,
        timeout: float = 10.0,
    ):
        self.mirror = {k: v.rstrip("/") for k, v in (mirror or {}).items()}
        self.credentials = credentials or {}  # host -> (user, password); unwrap SecretStr at the call site
        self.timeout = timeout
        self._tokens: dict[tuple[str, str], str] = {}

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
        status, headers = self._head(url, self._tokens.get((base, name)))
        if status == 401:
            token = self._token(base, name, headers.get("WWW-Authenticate", ""), ref.host)
            self._tokens[(base, name)] = token
            status, headers = self._head(url, token)
        if status == 200:
            digest = headers.get("Docker-Content-Digest")
            if not digest:
                raise ProviderUnavailable(f"{url}: 200 without Docker-Content-Digest")
            return digest
        if status == 404:
            return None
        if status in (401, 403):
            raise ConfigError(f"{url}: registry refused us ({status}); check the pull credentials")
        raise ProviderUnavailable(f"{url}: registry answered {status}")

    def _head(self, url: str, token: str | None) -> tuple[int, dict[str, str]]:
        req = urllib.request.Request(url, method="HEAD", headers={"Accept": MANIFEST_TYPES})
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.status, dict(resp.headers)
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers or {})
        except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
            raise ProviderUnavailable(f"{url}: {getattr(e, 'reason', e)}") from e

    def _token(self, base: str, name: str, challenge: str, host: str) -> str:
        if not challenge.lower().startswith("bearer "):
            raise ConfigError(f"{base}: registry wants {challenge.split(' ')[0] or 'auth'} we cannot do")
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = params.pop("realm", None)
        if not realm:
            raise ProviderUnavailable(f"{base}: Bearer challenge without realm")
        params.setdefault("scope", f"repository:{name}:pull")
        req = urllib.request.Request(f"{realm}?{urllib.parse.urlencode(params)}")
        if host in self.credentials:
            user, password = self.credentials[host]
            req.add_header(
                "Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
            )
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
