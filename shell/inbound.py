"""Untrusted request bodies: read at most N bytes, decode strictly, refuse deep nesting.

Both webhook endpoints (`/alerts/alertmanager`, `/slack/actions`) read bodies that anyone
on the network can send. Every function here either returns plain data or raises
`BadRequest` with the HTTP status to answer (413 or 400) and a one-line reason, so an
endpoint answers a hostile body with a 4xx, never a 5xx or a traceback. The size cap is
applied to the declared `Content-Length` before a byte is read, and to chunked bodies as
they stream in (reading stops at the cap). Stdlib only: no web framework is imported.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable
from urllib.parse import parse_qs

MAX_JSON_DEPTH = 32  # Alertmanager's webhook nests 4 deep, a Slack click about 12


class BadRequest(Exception):
    """The request is refused: answer `status` with `reason` (safe to show the sender)."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


def check_declared_length(content_length: str | None, limit: int) -> None:
    """Refuse (413) a body whose declared length is over `limit`, before reading it."""
    if content_length is None:
        return
    if not content_length.strip().isdigit():
        raise BadRequest(400, "Content-Length is not a number")
    if int(content_length) > limit:
        raise BadRequest(413, f"body over {limit} bytes")


async def read_capped(chunks: AsyncIterable[bytes], content_length: str | None, limit: int) -> bytes:
    """The body, read chunk by chunk; 413 as soon as it passes `limit` (declared or streamed)."""
    check_declared_length(content_length, limit)
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > limit:
            raise BadRequest(413, f"body over {limit} bytes")
    return bytes(body)


def decode_utf8(body: bytes, what: str = "body") -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadRequest(400, f"{what} is not valid UTF-8 (byte {e.start})") from None


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def parse_json(data: bytes | str, what: str = "body", max_depth: int = MAX_JSON_DEPTH) -> object:
    """Strict JSON: UTF-8, no NaN/Infinity, no lone surrogates, nesting at most `max_depth`."""
    text = decode_utf8(data, what) if isinstance(data, bytes) else data
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise BadRequest(400, f"{what} is nested too deeply (more than {max_depth} levels)") from None
    except ValueError as e:  # JSONDecodeError, an integer of more than 4,300 digits, NaN
        raise BadRequest(400, f"{what} is not JSON: {_first_line(e)}") from None
    _check_tree(value, what, max_depth)
    return value


def _check_tree(value: object, what: str, max_depth: int) -> None:
    """Depth and string checks without recursion (the tree may be as deep as Python allows)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            _check_text(node, what)
            continue
        if not isinstance(node, dict | list):
            continue
        if depth > max_depth:
            raise BadRequest(400, f"{what} is nested too deeply (more than {max_depth} levels)")
        if isinstance(node, dict):
            for key, item in node.items():
                _check_text(key, what)
                stack.append((item, depth + 1))
        else:
            stack.extend((item, depth + 1) for item in node)


def _check_text(s: str, what: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:  # "\ud800": valid JSON, but no UTF-8 encoder downstream takes it
        raise BadRequest(400, f"{what} has a lone surrogate escape in a string") from None


def parse_form(body: bytes, max_fields: int = 16) -> dict[str, str]:
    """An `application/x-www-form-urlencoded` body: strict UTF-8, each field given once."""
    text = decode_utf8(body)
    try:
        fields = parse_qs(text, strict_parsing=True, max_num_fields=max_fields, errors="strict")
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(400, f"body is not a form: {_first_line(e)}") from None
    if any(len(values) != 1 for values in fields.values()):
        raise BadRequest(400, "body is not a form: a field is given twice")
    return {name: values[0] for name, values in fields.items()}


def _first_line(e: Exception) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:200]
