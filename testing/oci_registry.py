"""A real OCI registry on loopback, and a real client to push into it.

`distribution_registry(user, password)` runs Debian's `docker-registry` (the CNCF
Distribution registry) on 127.0.0.1 with basic auth (an htpasswd file, bcrypt, as the
registry requires) over filesystem storage in a temporary folder. `push_image` writes an OCI
image layout (gzip'd tar layers, an image config, a manifest; with `platforms`, an index over
one manifest per platform) and copies it in with Debian's `skopeo`, as a team's CI pushes.
Nothing runs at import; `PeerMissing` says which Debian package is absent.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import secrets
import shutil
import subprocess
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from lifeboat_dr.testing.emulators import dead_port, stop

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"


class PeerMissing(RuntimeError):
    """A peer's Debian package is not installed; the message names it."""


def _binary(name: str) -> str:
    found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
    if found is None:
        raise PeerMissing(f"no {name} here (apt-get install {name})")
    return found


@contextmanager
def distribution_registry(user: str, password: str) -> Iterator[str]:
    """The Distribution registry with `user:password` as its only account; yields its URL."""
    import bcrypt

    binary = _binary("docker-registry")
    url = dead_port()
    with tempfile.TemporaryDirectory(prefix="lifeboat-registry-") as tmp:
        root = Path(tmp)
        hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()  # cheap: a test account
        (root / "htpasswd").write_text(f"{user}:{hashed}\n")
        config = {
            "version": 0.1,
            "log": {"level": "error", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(root / "data")}},
            "http": {"addr": url.removeprefix("http://"), "secret": secrets.token_hex(16)},
            "auth": {"htpasswd": {"realm": "lifeboat-test", "path": str(root / "htpasswd")}},
        }
        (root / "config.yml").write_text(json.dumps(config))  # YAML reads JSON
        proc = subprocess.Popen(
            [binary, "serve", str(root / "config.yml")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            _wait_until_it_answers(f"{url}/v2/", proc)
            yield url
        finally:
            stop(proc)


def _wait_until_it_answers(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return  # 401: it is up, and wants credentials
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"docker-registry did not start on {url}") from None
            time.sleep(0.05)


def _layer(files: dict[str, bytes]) -> tuple[bytes, str]:
    """A gzip'd tar of `files` and its diff ID (the uncompressed tar's digest)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    raw = buf.getvalue()
    return gzip.compress(raw, mtime=0), "sha256:" + hashlib.sha256(raw).hexdigest()


def write_oci_layout(
    folder: Path, tag: str, layers: Sequence[bytes], platforms: Sequence[str] = ()
) -> tuple[str, int]:
    """An OCI image layout in `folder` tagged `tag`: one manifest whose layers hold `layers`
    (one file each), or with `platforms` (`"linux/amd64"`, ...) an index over one such image
    per platform. Returns the tagged manifest's (or index's) digest and the amd64 (or only)
    image's config + layer bytes."""
    blobs = folder / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)

    def blob(data: bytes, media_type: str) -> dict:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}

    def image(os_name: str, arch: str) -> tuple[dict, int]:
        made = [_layer({f"layer-{i}.bin": data + arch.encode()}) for i, data in enumerate(layers)]
        config = json.dumps(
            {
                "architecture": arch,
                "os": os_name,
                "rootfs": {"type": "layers", "diff_ids": [diff for _, diff in made]},
                "config": {},
            }
        ).encode()
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": blob(config, "application/vnd.oci.image.config.v1+json"),
            "layers": [blob(gz, "application/vnd.oci.image.layer.v1.tar+gzip") for gz, _ in made],
        }
        size = len(config) + sum(len(gz) for gz, _ in made)
        return blob(json.dumps(manifest).encode(), OCI_MANIFEST), size

    if platforms:
        entries, pulled = [], 0
        for platform in platforms:
            os_name, arch = platform.split("/")
            entry, size = image(os_name, arch)
            entries.append({**entry, "platform": {"os": os_name, "architecture": arch}})
            pulled = size if arch == "amd64" else pulled
        top = blob(
            json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}).encode(), OCI_INDEX
        )
    else:
        top, pulled = image("linux", "amd64")
    tagged = {**top, "annotations": {"org.opencontainers.image.ref.name": tag}}
    (folder / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [tagged]}))
    (folder / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    return top["digest"], pulled


def push_image(
    registry_url: str,
    repository: str,
    tag: str,
    credentials: tuple[str, str],
    layers: Sequence[bytes],
    *,
    platforms: Sequence[str] = (),
) -> tuple[str, int]:
    """Write an OCI layout (`write_oci_layout`) and `skopeo copy` it to
    `registry_url/repository:tag` with `credentials`; returns the digest the registry now
    serves for the tag (skopeo's own `--digestfile`) and the amd64 image's blob bytes."""
    skopeo = _binary("skopeo")
    with tempfile.TemporaryDirectory(prefix="lifeboat-oci-layout-") as tmp:
        layout = Path(tmp) / "layout"
        written, size = write_oci_layout(layout, tag, layers, platforms)
        digest_file = Path(tmp) / "digest"
        host = registry_url.removeprefix("http://")
        cmd = [
            skopeo,
            "--insecure-policy",
            "copy",
            "--dest-tls-verify=false",
            "--digestfile",
            str(digest_file),
        ]
        cmd += ["--dest-creds", ":".join(credentials), *(["--all"] if platforms else [])]
        cmd += [f"oci:{layout}:{tag}", f"docker://{host}/{repository}:{tag}"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"skopeo copy failed: {done.stderr.strip()}")
        pushed = digest_file.read_text().strip()
    if pushed != written:  # skopeo pushed our manifest as written, not a conversion of it
        raise RuntimeError(f"skopeo pushed {pushed}, the layout holds {written}")
    return pushed, size
