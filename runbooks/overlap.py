"""Runbooks whose stores overlap: two runbooks on one prefix delete each other's certified
replicas (retention) and fence each other's jobs (the site state is per prefix).

Two stores overlap when they are on the same service (scheme, and for S3 the endpoint),
in the same bucket, and one prefix is the other or inside it (by whole path segments:
`s3://b/dr` and `s3://b/dr-2` do not overlap). `lifeboat validate A.yaml B.yaml` refuses
them; at run time the site state names its runbook (core/sitestate.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlparse

from lifeboat_dr.runbooks.model import Runbook


def _stores(rb: Runbook) -> list[tuple[str, str, str | None]]:
    """(role, URI, endpoint) of every store that holds this runbook's checkpoints or site state."""
    sites = [("primary", rb.primary), ("secondary", rb.secondary)]
    if rb.witness is not None:
        sites.append(("witness", rb.witness))
    return [(role, rb.store_uri(site.store), site.endpoint_url) for role, site in sites]


def _key(uri: str, endpoint: str | None) -> tuple[tuple[str, str, str], tuple[str, ...]]:
    parsed = urlparse(uri)
    service = (parsed.scheme, (endpoint or "").rstrip("/").lower(), parsed.netloc)
    return service, tuple(p for p in parsed.path.split("/") if p)


def stores_overlap(a: tuple[str, str | None], b: tuple[str, str | None]) -> bool:
    """Whether two (URI, endpoint) stores share a prefix (one inside the other, or equal)."""
    (sa, pa), (sb, pb) = _key(*a), _key(*b)
    shorter = min(len(pa), len(pb))
    return sa == sb and pa[:shorter] == pb[:shorter]


def overlapping_runbooks(runbooks: Iterable[tuple[str, Runbook]]) -> list[str]:
    """One line per pair of runbooks (given as (file, runbook)) whose stores overlap."""
    named = list(runbooks)
    lines = []
    for i, (file_a, a) in enumerate(named):
        for file_b, b in named[i + 1 :]:
            clash = next(
                (
                    (ra, ua, rb_, ub)
                    for ra, ua, ea in _stores(a)
                    for rb_, ub, eb in _stores(b)
                    if stores_overlap((ua, ea), (ub, eb))
                ),
                None,
            )
            if clash:
                ra, ua, rb_, ub = clash
                lines.append(
                    f"{file_a} and {file_b}: stores overlap: {a.name}'s {ra} {ua} and {b.name}'s {rb_} {ub} "
                    "(same bucket, one prefix inside the other); each runbook needs a prefix of its own"
                )
    return lines
