"""Read a runbook's YAML within bounds, keeping the line of every key and list item.

A runbook is a few kilobytes written by a person; anything far from that is refused with
a `file:line: field: message` problem before it can cost time or memory:

- the file: a regular file (a FIFO is refused, never waited on), at most `MAX_BYTES`, read
  with a cap (a 50 MB file is refused after `MAX_BYTES` + 1 bytes), strict UTF-8, no
  control characters;
- the structure: nesting at most `MAX_DEPTH` (checked while composing, so 20,000 levels
  never reach Python's recursion limit; flow brackets are counted before parsing), at most `MAX_VALUES` values after YAML aliases
  are expanded (a "billion laughs" alias bomb stops there; a self-referencing alias hits
  the depth limit), keys are plain scalars (a list used as a key is refused);
- the values: integers of at most `MAX_INT_DIGITS` digits, dates and tagged scalars that
  cannot be built, and strings with control characters (terminal escapes in a name that
  reaches Slack and logs) are problems, never exceptions.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import yaml

from lifeboat_dr.runbooks.problems import Problem, RunbookInvalid

Loc = tuple[str | int, ...]

MAX_BYTES = 256 * 1024
MAX_DEPTH = 64
MAX_VALUES = 5_000
MAX_OPEN_BRACKETS = 128  # flow [ { open at once; PyYAML's scanner slows quadratically past it
MAX_INT_DIGITS = 18
_INT_TAG = "tag:yaml.org,2002:int"
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")  # Unicode Cc, less tab/newline/CR


def read_text(path: Path, shown: str, field: str = "") -> str:
    """The file's text, or `RunbookInvalid` naming `field` (missing, unreadable, not a regular
    file, too large, not UTF-8). Its content is never part of the problem."""
    try:
        # non-blocking: opening a FIFO with no writer returns at once instead of waiting
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise RunbookInvalid([Problem(shown, None, field, "no such file")]) from None
    except OSError as e:  # no permission, a name the OS refuses
        raise RunbookInvalid([Problem(shown, None, field, f"cannot read: {e.strerror or e}")]) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO, a device, a directory (fdopen refuses one)
        os.close(fd)
        raise RunbookInvalid([Problem(shown, None, field, "not a regular file")])
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(MAX_BYTES + 1)
        except OSError as e:
            raise RunbookInvalid([Problem(shown, None, field, f"cannot read: {e.strerror or e}")]) from None
    if len(data) > MAX_BYTES:
        raise RunbookInvalid(
            [
                Problem(
                    shown,
                    None,
                    field,
                    f"file is larger than {MAX_BYTES:,} bytes; a runbook is a few KB",
                )
            ]
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise RunbookInvalid([Problem(shown, line, field, f"not UTF-8 text (byte {e.start})")]) from None


class _Limit(Exception):
    def __init__(self, message: str, mark):
        super().__init__(message)
        self.message, self.mark = message, mark


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader whose composer refuses nesting deeper than `MAX_DEPTH` and documents of
    more than `MAX_VALUES` nodes (before aliases; `_Builder` counts after)."""

    def __init__(self, text: str):
        super().__init__(text)
        self._depth = self._nodes = 0

    def compose_node(self, parent, index):
        self._depth += 1
        self._nodes += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Limit(f"nested more than {MAX_DEPTH} levels deep", self.peek_event().start_mark)
            if self._nodes > MAX_VALUES:
                raise _Limit(
                    f"more than {MAX_VALUES:,} values; a runbook has a few hundred",
                    self.peek_event().start_mark,
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def parse(text: str, shown: str) -> tuple[object, dict[Loc, int]]:
    """The document as plain data, and the line of every location in it."""
    _check_brackets(text, shown)
    try:
        loader = _BoundedLoader(text)
    except yaml.reader.ReaderError as e:  # raised while the whole text is checked up front
        line = text[: e.position].count("\n") + 1
        raise RunbookInvalid(
            [
                Problem(
                    shown,
                    line,
                    "",
                    f"control character U+{e.character:04X} in the file; a runbook is plain text",
                )
            ]
        ) from None
    try:
        node = loader.get_single_node()
        if node is None:
            raise RunbookInvalid([Problem(shown, 1, "", "the file is empty")])
        return _Builder(loader, shown).build(node)
    except _Limit as e:
        raise RunbookInvalid([Problem(shown, e.mark.line + 1, "", e.message)]) from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        col = f"column {mark.column + 1}: " if mark else ""
        line = mark.line + 1 if mark else None
        raise RunbookInvalid([Problem(shown, line, "", f"YAML syntax error at {col}{e.problem}")]) from None
    except yaml.YAMLError as e:
        raise RunbookInvalid([Problem(shown, None, "", f"YAML error: {str(e).splitlines()[0]}")]) from None
    finally:
        loader.dispose()


_BRACKET = re.compile(r"[\[\]{}]")


def _check_brackets(text: str, shown: str) -> None:
    """Refuse deep flow nesting before the scanner sees it (quotes are not skipped: so many
    brackets open at once is nothing a person writes, in a string or not)."""
    depth = 0
    for m in _BRACKET.finditer(text):
        depth = depth + 1 if m.group() in "[{" else max(depth - 1, 0)
        if depth > MAX_OPEN_BRACKETS:
            line = text.count("\n", 0, m.start()) + 1
            message = f"more than {MAX_OPEN_BRACKETS} brackets open at once: nested too deeply"
            raise RunbookInvalid([Problem(shown, line, "", message)])


class _Builder:
    """Nodes to plain data, counting values (aliases expand) and depth as it goes."""

    def __init__(self, loader: yaml.SafeLoader, shown: str):
        self.loader, self.shown = loader, shown
        self.lines: dict[Loc, int] = {}
        self.values = 0

    def build(self, node: yaml.Node) -> tuple[object, dict[Loc, int]]:
        return self._value(node, ()), self.lines

    def _fail(self, node: yaml.Node, loc: Loc, message: str):
        field = ".".join(map(str, loc[:6])) + ("..." if len(loc) > 6 else "")
        raise RunbookInvalid([Problem(self.shown, node.start_mark.line + 1, field, message)])

    def _value(self, node: yaml.Node, loc: Loc):
        self.values += 1
        if self.values > MAX_VALUES:  # name the top-level key whose aliases blew up
            line = self.lines.get(loc[:1], node.start_mark.line + 1)
            field = ".".join(map(str, loc[:1]))
            message = f"expands to more than {MAX_VALUES:,} values (YAML aliases inside aliases?)"
            raise RunbookInvalid([Problem(self.shown, line, field, message)])
        if len(loc) >= MAX_DEPTH:
            self._fail(
                node, loc, f"nested more than {MAX_DEPTH} levels deep (an alias that contains itself?)"
            )
        self.lines.setdefault(loc, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            out: dict = {}
            for key_node, value_node in node.value:
                key = self._key(key_node, loc)
                if key in out:
                    self._fail(key_node, (*loc, key), "duplicate key")
                self.lines[(*loc, key)] = key_node.start_mark.line + 1
                out[key] = self._value(value_node, (*loc, key))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self._value(item, (*loc, i)) for i, item in enumerate(node.value)]
        return self._scalar(node, loc)

    def _key(self, node: yaml.Node, loc: Loc):
        if not isinstance(node, yaml.ScalarNode):
            kind = "list" if isinstance(node, yaml.SequenceNode) else "mapping"
            self._fail(node, loc, f"a {kind} cannot be a key; keys are plain words like `name`")
        key = self._scalar(node, loc)
        if not isinstance(key, str):
            self._fail(node, loc, f"{node.value[:40]!r} cannot be a key; keys are plain words like `name`")
        return key

    def _scalar(self, node: yaml.ScalarNode, loc: Loc):
        if node.tag == _INT_TAG and sum(c.isdigit() for c in node.value) > MAX_INT_DIGITS:
            self._fail(node, loc, f"number has more than {MAX_INT_DIGITS} digits")
        try:
            value = self.loader.construct_object(node, deep=True)
        except (ValueError, OverflowError, TypeError) as e:  # 2026-02-30, !!float abc
            self._fail(node, loc, f"{node.value[:40]!r} cannot be read: {e}")
        if isinstance(value, str) and (bad := _CONTROL.search(value)):
            self._fail(node, loc, f"control character U+{ord(bad.group()):04X} in the text; write plain text")
        return value
