"""The example runbooks shipped inside the package, reachable by name.

`lifeboat failover llama-70b-pretrain --dry-run` or `lifeboat deploy demo`, from any folder
with the package installed and no checkout, reads the shipped `llama-70b-pretrain.yaml` (its
SkyPilot task beside it, under `jobs/`). The rule, `runbook_file`, used by `load_runbook` so
every command and flow agrees: a file that exists always wins; else a name of `examples()`
is that example (even where a folder of that name exists); else a bare name is one line,
`no such file, nor a shipped example runbook (…)`, listing the names.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from lifeboat_dr.runbooks.problems import Problem, RunbookInvalid


def examples() -> dict[str, Path]:
    """Name (file stem, which is also the runbook's `name`) → shipped runbook file, by name."""
    folder = Path(str(resources.files(__package__)))  # a real folder: runbooks read their tasks beside them
    return {p.stem: p for p in sorted(folder.glob("*.yaml"), key=lambda p: p.stem)}


def example_named(given: str | Path) -> Path | None:
    """The shipped example `given` stands for: one of `examples()` by name, where no file of
    that name exists (a folder of that name does not count: `demo/` in a checkout)."""
    path = Path(given)
    if path.exists() and not path.is_dir():  # a real file always wins
        return None
    return examples().get(str(given))


def runbook_file(given: str | Path) -> Path:
    """The file `given` names: itself when it is a file, else the shipped example of that name.
    Raises `RunbookInvalid` (one problem, one line listing the examples) for a bare name that
    is neither; any other path comes back as given, for the reader to say what is wrong."""
    if shipped := example_named(given):
        return shipped
    path = Path(given)
    if path.exists() or path.name != str(given) or path.suffix in (".yaml", ".yml"):
        return path
    listed = ", ".join(examples())
    raise RunbookInvalid(
        [Problem(str(given), None, "", f"no such file, nor a shipped example runbook ({listed})")]
    )
