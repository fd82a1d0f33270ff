"""CRC32C (Castagnoli), the one checksum S3, GCS and our manifests agree on."""

from __future__ import annotations

import base64
from collections.abc import Iterable

import google_crc32c

_POLY = 0x82F63B78  # reflected Castagnoli polynomial


def crc32c(data: bytes, value: int = 0) -> int:
    """Extend a running CRC32C with `data`."""
    return google_crc32c.extend(value, _readonly(data))


def crc32c_of(chunks: Iterable[bytes]) -> int:
    value = 0
    for chunk in chunks:
        value = google_crc32c.extend(value, _readonly(chunk))
    return value


def _readonly(data) -> bytes:
    """google-crc32c takes bytes only: a view over a whole bytes object is passed as that
    object (no copy); anything else is copied once."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, memoryview) and isinstance(data.obj, bytes) and data.nbytes == len(data.obj):
        return data.obj
    return bytes(data)


def crc32c_combine(first: int, second: int, second_len: int) -> int:
    """CRC32C of A+B from CRC32C(A), CRC32C(B) and len(B), without reading a byte (zlib's
    crc32_combine: multiply CRC(A) by x^(8·len B) modulo the polynomial). Lets parts be
    hashed once each and the full-object checksum follow."""
    return _multmodp(_x8nmodp(second_len), first) ^ second


def _multmodp(a: int, b: int) -> int:
    """a·b modulo the polynomial, both in reflected bit order."""
    m, p = 1 << 31, 0
    while a:
        if a & m:
            p ^= b
            a ^= m
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return p


def _x2n_table() -> list[int]:
    table, p = [], 1 << 30  # x^1
    for _ in range(32):
        table.append(p)
        p = _multmodp(p, p)
    return table


_X2N = _x2n_table()  # x^(2^k) modulo the polynomial


def _x8nmodp(n: int) -> int:
    """x^(8·n) modulo the polynomial: the shift of a CRC past n bytes."""
    p, k = 1 << 31, 3  # x^0; bytes are 2^3 bits
    while n:
        if n & 1:
            p = _multmodp(_X2N[k & 31], p)
        n >>= 1
        k += 1
    return p


def to_b64(value: int) -> str:
    """The big-endian base64 form S3 (`ChecksumCRC32C`) and GCS (`crcc32c`) use."""
    return base64.b64encode(value.to_bytes(4, "big")).decode()


def from_b64(text: str) -> int:
    return int.from_bytes(base64.b64decode(text), "big")
