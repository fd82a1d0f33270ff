"""Load runbook YAML with errors that point at the line: `file:line: field.path: message`.

The YAML is composed into nodes first so every key and list item keeps its line, within
the bounds of yaml_source.py (size, depth, aliases, numbers, control characters); pydantic's
error locations are then mapped back onto those lines. Unknown keys get a "did you mean".
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from pathlib import Path

from pydantic import BaseModel, ValidationError

from lifeboat_dr.runbooks.examples import runbook_file
from lifeboat_dr.runbooks.model import Runbook
from lifeboat_dr.runbooks.problems import Problem, RunbookInvalid
from lifeboat_dr.runbooks.yaml_source import Loc, parse, read_text

__all__ = ["Problem", "RunbookInvalid", "load_runbook"]


def load_runbook(path: str | Path) -> Runbook:
    """Parse and validate one runbook file (or a shipped example, by name: `examples.py`).
    Raises `RunbookInvalid` listing every problem."""
    path = runbook_file(path)
    shown = str(path)
    data, lines = parse(read_text(path, shown), shown)
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
        if not rel:
            continue
        try:
            path = runbook.resolve(rel)
            missing = not path.exists()
        except (OSError, ValueError) as e:  # a name too long for the OS
            missing, why = True, f"{rel[:80]!r} cannot be a path: {getattr(e, 'strerror', None) or e}"
        else:
            why = f"{rel} does not exist (relative to {shown})"
            if (
                loc == ("job", "task")
                and not missing
                and not path.is_relative_to(home := repository_of(runbook))
            ):
                missing, why = True, f"{rel} is outside the runbook's repository ({home}); not read"
        if missing:
            problems.append(Problem(shown, _line_of(loc, lines), ".".join(loc), why))
    return problems


def repository_of(runbook: Runbook) -> Path:
    """Where the runbook's own files live: the nearest folder above it holding `.git` (a
    checkout, a worktree), else its own folder. Its task file must lie inside (after links
    are followed), so a runbook cannot have Lifeboat read, print or send any file it likes."""
    folder = runbook.base_dir.resolve()
    return next((d for d in (folder, *folder.parents) if (d / ".git").exists()), folder)
