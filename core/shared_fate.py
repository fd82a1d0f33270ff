"""Does Lifeboat's own control plane share fate with the primary it protects?

A failover is run by the Prefect API (and its workers), recorded in the ledger and decided
from the signal state; any of them inside the primary's infrastructure goes down with it.
`shared_fate_warnings(primary, env, base_dir=...)` reads where they are from the environment
`lifeboat validate` runs in (the control plane's) and says, one line each, what sits in the
primary's region, bucket or host, or is local to one machine. Plain data in, plain lines out.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlparse

from lifeboat_dr.runbooks.model import Site, store_uri_under

STORE_SCHEMES = ("s3", "gs", "file")


def _bucket(uri: str) -> tuple[str, str]:
    p = urlparse(uri)
    return p.scheme, p.netloc if p.scheme != "file" else p.path


def _in_primary_bucket(primary: Site, base_dir: Path, uri: str) -> bool:
    scheme, where = _bucket(store_uri_under(base_dir, uri))
    p_scheme, p_where = _bucket(store_uri_under(base_dir, primary.store))
    if scheme != p_scheme:
        return False
    if scheme == "file":  # a folder inside the primary's folder (or the primary's own)
        return where.rstrip("/").startswith(p_where.rstrip("/"))
    return where == p_where


def _primary_hosts(primary: Site) -> set[str]:
    hosts = set()
    if primary.endpoint_url:
        hosts.add((urlparse(primary.endpoint_url).hostname or "").lower())
    return hosts - {""}


def _primary_region(primary: Site) -> str | None:
    cloud, _, region = primary.infra.partition("/")
    return region.lower() if cloud != "local" and region else None


def _api_warning(primary: Site, api_url: str) -> str | None:
    host = (urlparse(api_url).hostname or "").lower()
    if not host:
        return None
    if host in _primary_hosts(primary):
        return f"control plane: the Prefect API ({host}) is the primary store's host; run it at the secondary or a third site"
    region = _primary_region(primary)
    if region and region in host:
        return (
            f"control plane: the Prefect API ({host}) looks like it runs in the primary's region "
            f"{region}; a region outage would take the failover down with it"
        )
    return None


def shared_fate_warnings(primary: Site, env: Mapping[str, str], *, base_dir: Path) -> list[str]:
    """Lines naming each part of the control plane that would go down with the runbook's
    `primary` site; relative `file://` URIs resolve against `base_dir` (the runbook's folder)."""
    out = []
    api = env.get("PREFECT_API_URL", "")
    warning = _api_warning(primary, api) if api else None
    if warning:
        out.append(warning)
    chain = env.get("LIFEBOAT_LEDGER_CHAIN", "").strip()
    if not chain:
        out.append(
            "ledger: a local file on each worker (LIFEBOAT_LEDGER); set LIFEBOAT_LEDGER_CHAIN=sites "
            "to keep it, hash-chained, in both sites' stores"
        )
    elif chain != "sites":
        uris = [u.strip() for u in chain.split(",") if u.strip()]
        if all(_in_primary_bucket(primary, base_dir, u) for u in uris):
            out.append("ledger: LIFEBOAT_LEDGER_CHAIN is only in the primary's bucket; add the secondary's")
    state = env.get("LIFEBOAT_STATE_DIR", "").strip()
    if urlparse(state).scheme not in STORE_SCHEMES:
        out.append(
            "signal state: a folder on one host (LIFEBOAT_STATE_DIR); watch and every `lifeboat serve` "
            "must share it: set a store URI in the secondary's bucket (s3://…) to run them apart"
        )
    elif _in_primary_bucket(primary, base_dir, state):
        out.append(
            f"signal state: LIFEBOAT_STATE_DIR ({state}) is in the primary's bucket; "
            "detection would lose its memory in the outage it detects"
        )
    return out
