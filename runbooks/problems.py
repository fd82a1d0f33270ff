"""What is wrong with a runbook file, as `file:line: field.path: message` lines."""

from __future__ import annotations

from dataclasses import dataclass

from lifeboat_dr.kernel.errors import ConfigError


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
