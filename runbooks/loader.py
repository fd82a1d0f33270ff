"""Load runbook YAML with errors that point at the line: `file:line: field.path: message`.

The YAML is composed into nodes first so every key and list item keeps its line; pydantic's
error locations are then mapped back onto those lines. Unknown keys get a "did you mean".
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from lifeboat.errors import ConfigError
from runbooks.model import Runbook

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a runbook file."""

    file: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class RunbookInvalid(ConfigError):
    """A runbook file failed to load; `problems` holds one entry per mistake."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


def load_runbook(path: str | Path) -> Runbook:
    """Parse and validate one runbook file. Raises `RunbookInvalid` listing every problem."""
    path = Path(path)
    shown = str(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise RunbookInvalid([Problem(shown, None, "", "no such file")]) from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as e:
        raise RunbookInvalid([Problem(shown, None, "", f"cannot read: {e}")]) from None
    data, lines = parse_yaml_with_lines(text, shown)
    if not isinstance(data, dict):
        raise RunbookInvalid([Problem(shown, 1, "", "a runbook is a YAML mapping (key: value lines)")])
    try:
        runbook = Runbook.model_validate(data)
    except ValidationError as e:
        problems = sorted((_problem(shown, err, lines) for err in e.errors()), key=lambda p: p.line or 0)
        raise RunbookInvalid(problems) from None
    runbook._path = path.resolve()
    problems = _missing_paths(runbook, shown, lines)
    if problems:
        raise RunbookInvalid(problems)
    return runbook


def parse_yaml_with_lines(text: str, shown: str) -> tuple[object, dict[Loc, int]]:
    """YAML text as plain data plus the line of every key and item (`RunbookInvalid` on a
    syntax error or a duplicate key, naming `shown`). Used for task YAMLs too."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise RunbookInvalid([Problem(shown, 1, "", "the file is empty")])
        lines: dict[Loc, int] = {}
        return _construct(node, (), lines, loader, shown), lines
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{mark.line + 1}" if mark else None
        col = f"column {mark.column + 1}: " if mark else ""
        raise RunbookInvalid(
            [Problem(shown, int(where) if where else None, "", f"YAML syntax error at {col}{e.problem}")]
        ) from None
    finally:
        loader.dispose()


def _construct(node: yaml.Node, loc: Loc, lines: dict[Loc, int], loader, shown: str):
    lines.setdefault(loc, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if key in out:
                raise RunbookInvalid(
                    [
                        Problem(
                            shown,
                            key_node.start_mark.line + 1,
                            ".".join(map(str, (*loc, key))),
                            "duplicate key",
                        )
                    ]
                )
            lines[(*loc, key)] = key_node.start_mark.line + 1
            out[key] = _construct(value_node, (*loc, key), lines, loader, shown)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_construct(item, (*loc, i), lines, loader, shown) for i, item in enumerate(node.value)]
    return loader.construct_object(node, deep=True)


_FIELD_FIRST = re.compile(r"^([a-z_]+(?:\.[a-z_]+)*): (.*)$", re.S)


def _problem(shown: str, err: dict, lines: dict[Loc, int]) -> Problem:
    loc: Loc = tuple(err["loc"])
    message = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        message = f"unknown key {loc[-1]!r}" + _did_you_mean(str(loc[-1]), _fields_at(loc[:-1]))
    elif err["type"] == "missing":
        message = "required, but missing"
    elif m := _FIELD_FIRST.match(message):
        loc, message = (*loc, *m.group(1).split(".")), m.group(2)
    return Problem(shown, _line_of(loc, lines), ".".join(map(str, loc)), message)


def _line_of(loc: Loc, lines: dict[Loc, int]) -> int | None:
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def _did_you_mean(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; expected one of: {', '.join(options)}" if options else ""


def _fields_at(loc: Loc) -> list[str]:
    """The field names of the model found at `loc` inside a Runbook."""
    model: type[BaseModel] | None = Runbook
    for step in loc:
        if model is None:
            return []
        if isinstance(step, int):
            continue
        field = model.model_fields.get(step)
        model = _model_in(field.annotation) if field else None
    return sorted(model.model_fields) if model else []


def _model_in(annotation) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) in (typing.Union, list):
        for arg in typing.get_args(annotation):
            if found := _model_in(arg):
                return found
    return None


def _missing_paths(runbook: Runbook, shown: str, lines: dict[Loc, int]) -> list[Problem]:
    problems = []
    for loc, rel in ((("job", "task"), runbook.job.task), (("job", "workdir"), runbook.job.workdir)):
        if rel and not runbook.resolve(rel).exists():
            problems.append(
                Problem(
                    shown, _line_of(loc, lines), ".".join(loc), f"{rel} does not exist (relative to {shown})"
                )
            )
    return problems
