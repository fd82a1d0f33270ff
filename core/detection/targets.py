"""What each of a runbook's probes reaches, read from its `detection` section and sites (nothing is opened).

The quorum counts a target that does not answer once, however many signals read it
(`lifeboat_dr.core.detection.quorum`). A runbook whose heartbeat, checkpoint listing and provider ping
all go to the primary's one store can therefore never confirm a region outage from probes
alone: the store going dark is one vote. `detection_warnings` says so, for `lifeboat validate`,
and names the fix (`detection.provider_endpoint`: the region's API, a target of its own).
`probe_targets` follows `lifeboat_dr.flows.wiring.build_probes`; a test holds the two together.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from urllib.parse import urlparse

from lifeboat_dr.providers.storage.base import uri_target
from lifeboat_dr.runbooks.model import Detection, Site, store_uri_under

STORE_SCHEMES = ("s3", "gs", "file")


def _store_target(primary: Site, secondary: Site, base_dir: Path, uri: str) -> str:
    """The target of a store URI, with the endpoint of the site whose bucket it is in."""
    uri = store_uri_under(base_dir, uri)
    bucket = urlparse(uri)[:2]
    for site in (secondary, primary):
        if urlparse(store_uri_under(base_dir, site.store))[:2] == bucket and uri.startswith("s3://"):
            return uri_target(uri, site.endpoint_url)
    return uri_target(uri)


def probe_targets(d: Detection, primary: Site, secondary: Site, *, base_dir: Path) -> dict[str, str | None]:
    """signal -> the endpoint its probe reaches (None: a local reading, never unreachable),
    for the signals `build_probes` makes a probe for: from the runbook's `detection` section
    and its sites, relative `file://` URIs resolved against `base_dir` (the runbook's folder)."""

    def store_target(uri: str) -> str:
        return _store_target(primary, secondary, base_dir, uri)

    signals = {str(getattr(s, "value", s)) for s in d.signals}
    out: dict[str, str | None] = {}
    if "gpu_health" in signals:
        out["gpu_health"] = None
    if "training_progress" in signals and d.heartbeat:
        scheme = urlparse(d.heartbeat).scheme
        out["training_progress"] = (
            store_target(d.heartbeat.rstrip("/").rpartition("/")[0]) if scheme in STORE_SCHEMES else None
        )
    if "checkpoint_freshness" in signals:
        out["checkpoint_freshness"] = store_target(primary.store)
    if "provider" in signals:
        endpoint = d.provider_endpoint
        out["provider"] = (
            (urlparse(endpoint).netloc or endpoint).lower() if endpoint else store_target(primary.store)
        )
    return out


def detection_warnings(d: Detection, primary: Site, secondary: Site, *, base_dir: Path) -> list[str]:
    """One line when the probes' distinct targets are fewer than the quorum while several
    probes share one: a primary that stops answering could not be confirmed by them."""
    by_target: dict[str, list[str]] = defaultdict(list)
    for signal, target in probe_targets(d, primary, secondary, base_dir=base_dir).items():
        if target and not target.startswith("file://"):  # a local folder does not go dark alone
            by_target[target].append(signal)
    shared = {t: sorted(s) for t, s in by_target.items() if len(s) > 1}
    if not shared or len(by_target) >= d.quorum:
        return []
    target, signals = sorted(shared.items())[0]
    fix = "" if d.provider_endpoint else "; set detection.provider_endpoint to the primary region's API"
    return [
        f"detection: {', '.join(signals)} all reach the primary through {target}: if it stops answering "
        f"that is 1 vote, and the probes reach {len(by_target)} target(s) for a quorum of "
        f"{d.quorum} (alerts may still confirm){fix}"
    ]
