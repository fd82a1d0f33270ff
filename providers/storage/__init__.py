"""Checkpoint stores: `open_store(uri)` picks the backend by scheme."""

from __future__ import annotations

from urllib.parse import urlparse

from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.providers.storage.base import Capabilities, ObjectInfo, Store

_BACKENDS = {
    "file": "lifeboat_dr.providers.storage.local:LocalStore",
    "s3": "lifeboat_dr.providers.storage.s3:S3Store",
    "gs": "lifeboat_dr.providers.storage.gcs:GcsStore",
}


def open_store(uri: str, *, endpoint_url: str | None = None, deadline_s: float | None = None) -> Store:
    """Build the store for `s3://bucket/prefix`, `gs://bucket/prefix` or `file:///path`.
    `deadline_s` bounds how long a remote store's call may take when its endpoint does not
    answer (see base.py); a local store has none. A URI or endpoint with credentials in it
    (`user:password@`) is refused without repeating them: they belong to the SDK's setup."""
    if "@" in _authority(uri) or (endpoint_url and "@" in _authority(endpoint_url)):
        raise ConfigError(
            "a store URI or endpoint_url with credentials in it (user:password@) is refused; "
            "give them to the SDK's own configuration"
        )
    parsed = urlparse(uri)
    if parsed.scheme not in _BACKENDS:
        raise ConfigError(
            f"{uri!r}: unknown store scheme {parsed.scheme!r}; use one of {', '.join(sorted(_BACKENDS))}"
        )
    if parsed.scheme == "file":
        from lifeboat_dr.providers.storage.local import LocalStore

        return LocalStore(parsed.netloc + parsed.path)
    module, _, cls = _BACKENDS[parsed.scheme].partition(":")
    import importlib

    backend = getattr(importlib.import_module(module), cls)
    return backend(parsed.netloc, parsed.path.lstrip("/"), endpoint_url=endpoint_url, deadline_s=deadline_s)


def _authority(uri: str) -> str:
    try:
        return urlparse(uri).netloc
    except ValueError:  # a malformed authority: judge the text as it is
        return uri


__all__ = ["Capabilities", "ObjectInfo", "Store", "open_store"]
