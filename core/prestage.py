"""Prestage the secondary before it is needed, and say how ready it is.

Two things a cold secondary waits on after GPUs are up: pulling the container image and
copying weights/tokenizers. Prestaging moves both ahead of the incident: the image must be
present, with the digest the runbook pins, where the secondary pulls from; the weights must
be in the secondary store. `check_readiness` never moves bytes (registry HEADs, store
listings) so the failover's approval card can show it in seconds; `stage_weights` copies.

Weights land under `<secondary store>/prestage/<source bucket>/<source path>/`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import urlparse

from lifeboat_dr.kernel.errors import ConfigError, LifeboatError, ProviderUnavailable
from lifeboat_dr.providers.image_registry import Registry
from lifeboat_dr.providers.storage.base import Store

PRESTAGE_PREFIX = "prestage"

OpenStore = Callable[[str], Store]  # a store URI -> the Store rooted there


@dataclass(frozen=True)
class ImageCheck:
    image: str
    expected: str | None  # the digest the runbook pins, if any
    found: str | None  # what the registry serves; None: absent
    ok: bool
    detail: str


@dataclass(frozen=True)
class WeightsCheck:
    source: str
    destination: str
    objects: int  # objects under the source
    missing: tuple[str, ...]  # relative keys absent or different on the destination (first few)
    missing_count: int
    ok: bool
    detail: str


@dataclass(frozen=True)
class PrestageReadiness:
    """What the approval card shows: ready or not, and one line per image and weight set."""

    ready: bool
    images: tuple[ImageCheck, ...]
    weights: tuple[WeightsCheck, ...]
    checked_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def items(self) -> tuple[str, ...]:
        return tuple(c.detail for c in self.images) + tuple(c.detail for c in self.weights)

    def summary(self) -> str:
        bad = sum(not c.ok for c in (*self.images, *self.weights))
        total = len(self.images) + len(self.weights)
        return (
            "prestaged: nothing to stage"
            if not total
            else (f"prestaged: {total - bad}/{total} ready" + ("" if self.ready else " — NOT READY"))
        )


def destination_for(secondary_store: str, source: str) -> str:
    """Where a weights URI is staged in the secondary store."""
    parsed = urlparse(source)
    path = f"{parsed.netloc}/{parsed.path.strip('/')}".strip("/")
    return f"{secondary_store.rstrip('/')}/{PRESTAGE_PREFIX}/{path}"


def check_image(registry: Registry, image: str, expected: str | None, *, pull: bool = False) -> ImageCheck:
    """Digest and readiness of one image where the secondary pulls from; with `pull`, every
    blob fetched through there (a warmed mirror), not only the manifest digest read."""
    pulled = None
    try:
        if pull:
            pulled = registry.pull(image)
            found = pulled.digest if pulled else None
        else:
            found = registry.digest(image)
    except (ProviderUnavailable, ConfigError) as e:
        what = "registry unreachable" if isinstance(e, ProviderUnavailable) else "registry refused"
        return ImageCheck(image, expected, None, False, f"image {image}: {what} ({e})")
    if found is None:
        return ImageCheck(
            image, expected, None, False, f"image {image}: absent where the secondary pulls from"
        )
    if expected and found != expected:
        return ImageCheck(
            image,
            expected,
            found,
            False,
            f"image {image}: digest {_short(found)} differs from pinned {_short(expected)}",
        )
    pinned = "pinned digest" if expected else "digest (unpinned)"
    how = (
        f"pulled {pulled.blobs} blobs ({pulled.bytes / 2**20:,.1f} MiB) via {pulled.where}"
        if pulled
        else "present"
    )
    return ImageCheck(image, expected, found, True, f"image {image}: {how}, {pinned} {_short(found)}")


def _short(digest: str) -> str:
    return digest[:19] + "…" if len(digest) > 20 else digest


def _split(uri: str, open_store: OpenStore) -> tuple[Store, str]:
    """The store at the URI's bucket root, and the prefix inside it."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return open_store(uri), ""
    return open_store(f"{parsed.scheme}://{parsed.netloc}"), parsed.path.strip("/")


def check_weights(source: str, destination: str, open_store: OpenStore) -> WeightsCheck:
    """Compare listings: every source object present on the destination with the same size
    and, where both stores report one, the same CRC32C. No bytes are read."""
    try:
        src, src_prefix = _split(source, open_store)
        dst, dst_prefix = _split(destination, open_store)
        base_s = f"{src_prefix}/" if src_prefix else ""
        base_d = f"{dst_prefix}/" if dst_prefix else ""
        have = {i.key[len(base_d) :]: i for i in dst.list(base_d)}
        objects, missing = 0, []
        for info in src.list(base_s):
            objects += 1
            rel = info.key[len(base_s) :]
            other = have.get(rel)
            if (
                other is None
                or other.size != info.size
                or (info.crc32c is not None and other.crc32c is not None and info.crc32c != other.crc32c)
            ):
                missing.append(rel)
    except (ProviderUnavailable, LifeboatError) as e:
        return WeightsCheck(source, destination, 0, (), 0, False, f"weights {source}: cannot check ({e})")
    if objects == 0:
        return WeightsCheck(source, destination, 0, (), 0, False, f"weights {source}: the source is empty")
    ok = not missing
    detail = (
        f"weights {source}: {objects}/{objects} objects staged in {destination}"
        if ok
        else f"weights {source}: {objects - len(missing)}/{objects} objects staged in {destination}"
    )
    return WeightsCheck(source, destination, objects, tuple(missing[:5]), len(missing), ok, detail)


def check_readiness(
    images: Sequence[tuple[str, str | None]],
    weights: Sequence[str],
    secondary_store: str,
    registry: Registry,
    open_store: OpenStore,
    *,
    pull: bool = False,
) -> PrestageReadiness:
    """Registry HEADs (or, with `pull`, whole-image pulls through the mirror) and store
    listings."""
    image_checks = tuple(check_image(registry, image, digest, pull=pull) for image, digest in images)
    weight_checks = tuple(check_weights(w, destination_for(secondary_store, w), open_store) for w in weights)
    ready = all(c.ok for c in (*image_checks, *weight_checks))
    return PrestageReadiness(ready, image_checks, weight_checks)


def stage_weights(source: str, destination: str, open_store: OpenStore):
    """Copy `source` to `destination` through the storage interface (verified, resumable).

    Uses `lifeboat_dr.core.transfer.copy_prefix` when present. Otherwise a MINIMAL STAND-IN over
    the Store primitives (server-side copy, else a streamed put; skips objects already
    present with the same size and CRC32C); it returns the keys it copied."""
    src, src_prefix = _split(source, open_store)
    dst, dst_prefix = _split(destination, open_store)
    try:
        from lifeboat_dr.core.transfer import copy_prefix
    except ImportError:
        return _copy_minimal(src, dst, src_prefix, dst_prefix)
    return copy_prefix(src, dst, src_prefix, dst_prefix)


def _copy_minimal(src: Store, dst: Store, src_prefix: str, dst_prefix: str) -> list[str]:
    """Stand-in until `lifeboat_dr.core.transfer` lands in main: see `stage_weights`."""
    base_s = f"{src_prefix}/" if src_prefix else ""
    base_d = f"{dst_prefix}/" if dst_prefix else ""
    have = {i.key: i for i in dst.list(base_d)}
    copied = []
    for info in src.list(base_s):
        rel = info.key[len(base_s) :]
        key = base_d + rel
        other = have.get(key)
        if (
            other is not None
            and other.size == info.size
            and (info.crc32c is None or other.crc32c is None or other.crc32c == info.crc32c)
        ):
            continue
        if dst.server_copy(src, info.key, key) is None:
            dst.put(key, src.read(info.key))
        copied.append(rel)
    return copied


@dataclass(frozen=True)
class PrestagePlan:
    """A runbook's prestage section, its URIs resolved (`lifeboat_dr.flows.wiring.prestage_plan`)."""

    images: tuple[tuple[str, str | None], ...]  # (image reference, pinned digest or None)
    weights: tuple[str, ...]  # weights URIs to stage in the secondary store
    secondary_store: str  # the secondary's checkpoint store URI
    pull: bool = False  # check by pulling every image through the mirror, not only its digest


def plan_readiness(plan: PrestagePlan, registry: Registry, open_store: OpenStore) -> PrestageReadiness:
    """`check_readiness` for a prestage plan."""
    return check_readiness(
        plan.images, plan.weights, plan.secondary_store, registry, open_store, pull=plan.pull
    )


def stage_plan_weights(plan: PrestagePlan, open_store: OpenStore) -> dict[str, object]:
    """Stage every weights URI of a plan; source URI -> the copy's report."""
    return {w: stage_weights(w, destination_for(plan.secondary_store, w), open_store) for w in plan.weights}


def readiness_markdown(runbook: str, readiness: PrestageReadiness) -> str:
    """The readiness as a Prefect artifact / chat message."""
    lines = [
        f"### Prestage — {runbook}",
        "",
        f"**{readiness.summary()}** (checked {readiness.checked_at:%Y-%m-%d %H:%M:%S}Z)",
        "",
    ]
    for check in (*readiness.images, *readiness.weights):
        lines.append(f"- {'✅' if check.ok else '❌'} {check.detail}")
    return "\n".join(lines) + "\n"
