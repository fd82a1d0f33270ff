"""Text from outside — an approver, a reason, an alert label, a state message — made safe to
keep: one line, capped (`one_line`), and, where it lands in Markdown (artifacts, the card),
inert (`markdown_text`: every ASCII punctuation character backslash-escaped, which CommonMark
guarantees renders as itself, so no heading, link, image, table cell or HTML comes of it)."""

from __future__ import annotations

import string
import unicodedata

ELLIPSIS = "…"
_PUNCTUATION = frozenset(string.punctuation)


def one_line(text: object, cap: int = 300) -> str:
    """`text` as one line of at most `cap` characters: control and format characters (newlines,
    escapes, bidi overrides) become spaces, runs of spaces one, and a cut ends in `…`."""
    s = "".join(" " if unicodedata.category(c)[0] in "CZ" else c for c in str(text))
    s = " ".join(s.split())
    return s if len(s) <= cap else s[: max(cap - 1, 0)] + ELLIPSIS


def markdown_text(text: object, cap: int = 300) -> str:
    """`one_line(text, cap)` escaped for Markdown: it renders as exactly those characters."""
    return "".join("\\" + c if c in _PUNCTUATION else c for c in one_line(text, cap))
