"""Durations as people write them in runbooks: `90s`, `15m`, `2h`, `1d`, `1h30m`."""

import math
import re
from datetime import timedelta

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
MAX_SECONDS = 1000 * 365 * 86400  # a thousand years: far beyond any runbook, far below timedelta.max


def parse_duration(text: str | int | float | timedelta) -> timedelta:
    """Parse `90s`, `15m`, `2h`, `1h30m`, `0`; a bare number means seconds."""
    if isinstance(text, timedelta):
        return text
    if isinstance(text, bool):
        raise ValueError("expected a duration like 90s, 15m or 2h")
    if isinstance(text, int | float):
        if not math.isfinite(text):
            raise ValueError(f"{text!r} is not a duration; write it like 90s, 15m, 2h or 1h30m")
        if text < 0:
            raise ValueError("a duration cannot be negative")
        return _bounded(text, text)
    s = str(text).strip().lower()
    if s == "0":
        return timedelta(0)
    pos, seconds = 0, 0.0
    for m in _PART.finditer(s):
        if m.start() != pos:
            break
        seconds += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s) or not s:
        raise ValueError(f"{text!r} is not a duration; write it like 90s, 15m, 2h or 1h30m")
    return _bounded(seconds, text)


def _bounded(seconds: float, text) -> timedelta:
    if seconds > MAX_SECONDS:
        raise ValueError(f"{str(text)[:40]!r} is too long for a duration (at most {MAX_SECONDS // 86400}d)")
    return timedelta(seconds=seconds)


def format_duration(td: timedelta) -> str:
    """The shortest exact spelling: 2h, 15m, 90s -> 1m30s, 0.25s -> 250ms."""
    total = td.total_seconds()
    if total == 0:
        return "0s"
    sign = "-" if total < 0 else ""
    total = abs(total)
    if total < 1:
        return f"{sign}{round(total * 1000)}ms"
    out, rest = [], round(total, 3)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        n, rest = divmod(rest, size)
        if n:
            out.append(f"{int(n)}{unit}")
    if rest:
        out.append(f"{rest:g}s")
    return sign + "".join(out)
