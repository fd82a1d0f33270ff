"""CRC32C (Castagnoli), the one checksum S3, GCS and our manifests agree on."""

from __future__ import annotations

import base64
from collections.abc import Iterable

import google_crc32c


def crc32c(data: bytes, value: int = 0) -> int:
    """Extend a running CRC32C with `data`."""
    return google_crc32c.extend(value, bytes(data))


def crc32c_of(chunks: Iterable[bytes]) -> int:
    value = 0
    for chunk in chunks:
        value = google_crc32c.extend(value, bytes(chunk))
    return value


def to_b64(value: int) -> str:
    """The big-endian base64 form S3 (`ChecksumCRC32C`) and GCS (`crcc32c`) use."""
    return base64.b64encode(value.to_bytes(4, "big")).decode()


def from_b64(text: str) -> int:
    return int.from_bytes(base64.b64decode(text), "big")
