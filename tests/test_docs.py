"""The docs name only what exists: every repository path, test, `lifeboat` subcommand and
flag, `make` target, `LIFEBOAT_*` variable, `lifeboat_dr.…` name and DESIGN.md section that
README.md and docs/*.md mention is real, and the failover's step diagram they show is the one
`core/failover/graph.py` draws. A rename that leaves a doc behind fails here, and the failure
lists each `doc:line: mention` to fix."""

from __future__ import annotations

import argparse
import ast
import re
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import pytest

from lifeboat_dr.core.failover import graph
from lifeboat_dr.shell.cli import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
FENCE = re.compile(r"^(```|~~~)")
SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
COMMAND_LINE = re.compile(r"\s*(\$ )?([A-Z_]+=\S+\s+)*lifeboat ")
# A path is checked when it starts at a root entry (`core/…`, `Makefile`), names a Python file
# (`failover/graph.py`: the end of some path) or a doc (`certify.md`). Other paths the docs
# give are what Lifeboat writes at run time (in a store, under .lifeboat/, in a checkpoint),
# Prefect deployment names (`watch/<runbook>`), SkyPilot locations (`aws/us-east-1`), or
# files of other projects (`prefect/server/api/server.py`).
ELSEWHERE = ("_lifeboat/", ".lifeboat/", ".venv", ".git", "../", "/", "~", "$", "prefect/", "sky/")
PRODUCT = ("kernel", "runbooks", "providers", "core", "standins", "flows", "shell", "demo", "testing")


def lines(doc: Path) -> Iterator[tuple[int, str, bool]]:
    """(line number, text, inside a fenced block) for each line of a doc."""
    fenced = False
    for number, text in enumerate(doc.read_text().splitlines(), 1):
        if FENCE.match(text.strip()):
            fenced = not fenced
            continue
        yield number, text, fenced


def wrong(find: Callable[[str, bool], Iterator], ok: Callable) -> list[str]:
    """`doc:line: mention` for every mention `find` sees in the docs that `ok` refuses."""
    return [
        f"{doc.relative_to(ROOT)}:{number}: {mention}"
        for doc in DOCS
        for number, text, fenced in lines(doc)
        for mention in find(text, fenced)
        if not ok(mention)
    ]


def spans(text: str, fenced: bool) -> list[str]:
    """Where a doc writes code: its `spans`, or the whole line inside a fenced block."""
    return [text] if fenced else SPAN.findall(text)


# -- paths and tests ------------------------------------------------------------------------
def paths(text: str, fenced: bool) -> Iterator[str]:
    for span in [] if fenced else SPAN.findall(text):
        for token in re.sub(r"<[^>]*>|\{[^}]*\}", "*", span).split():
            token = token.strip(",;:()").removeprefix("lifeboat_dr/")
            if (
                not re.fullmatch(r"[\w.*/-]*[a-z][\w.*/-]*", token)
                or token.startswith(ELSEWHERE)
                or "://" in token
            ):
                continue
            if (ROOT / token.split("/")[0]).exists() or token.endswith((".py", ".md")):
                yield token
    yield from (link for link in LINK.findall(text) if not link.startswith(("http", "mailto:")))


@cache
def tree() -> tuple[str, ...]:
    """Every file and folder of the repository, as posix paths from the root."""
    skip = {".git", ".venv", "build", "dist", ".lifeboat", "__pycache__", "lifeboat_dr.egg-info"}
    found = []
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        if not skip & set(rel.parts):
            found.append(rel.as_posix() + ("/" if path.is_dir() else ""))
    return tuple(found)


def in_the_tree(token: str) -> bool:
    """From the root when its first folder is at the root (or a doc beside the others), else
    as the end of some path (`failover/graph.py`); `*` stands for one name."""
    first = token.split("/")[0]
    if (ROOT / first).exists() or "*" in first:
        wanted = [rf"{re.escape(token)}", rf"docs/{re.escape(token)}"]
    else:
        wanted = [rf"(.*/)?{re.escape(token)}"]
    folder = "" if token.endswith("/") else "/?"
    pattern = re.compile("|".join(f"(?:{w}{folder})" for w in wanted).replace(r"\*", "[^/]*"))
    return any(pattern.fullmatch(p) for p in tree())


def test_every_path_a_doc_names_is_in_the_tree():
    assert wrong(paths, in_the_tree) == []


def named_tests(text: str, fenced: bool) -> Iterator[tuple[str | None, str]]:
    """(file or None, test name) for `file.py::test_x` or `test_x`, either cut short with `…`."""
    for span in [] if fenced else SPAN.findall(text):
        if match := re.fullmatch(r"(?:([\w/]+\.py)::)?(test_\w+?)_?(…)?", span):
            yield match.group(1), match.group(2) + ("…" if match.group(3) else "")


def in_the_suite(file_test: tuple[str | None, str]) -> bool:
    file, name = file_test
    files = [p for p in (ROOT / "tests").rglob("*.py") if file is None or p.as_posix().endswith(file)]
    pattern = rf"^\s*(async )?def {re.escape(name.rstrip('…'))}{'' if name.endswith('…') else '[(]'}"
    return any(re.search(pattern, p.read_text(), re.M) for p in files)


def test_every_test_a_doc_names_is_in_the_suite():
    assert wrong(named_tests, in_the_suite) == []


# -- commands -------------------------------------------------------------------------------
def commands(text: str, fenced: bool) -> Iterator[tuple[str, str]]:
    """(subcommand, what follows it up to a comment) for each `lifeboat …` a doc writes: in a
    code span, or as a command line of a code block (`$ ` and variables before it allowed)."""
    for span in spans(text, fenced):
        if not fenced or COMMAND_LINE.match(span):
            for match in re.finditer(r"(?:^|[\s(`])lifeboat ([a-z][\w-]*)([^#;|&]*)", span):
                yield match.group(1), match.group(2)


def subcommands(text: str, fenced: bool) -> Iterator[str]:
    yield from (name for name, _ in commands(text, fenced))


def test_every_lifeboat_command_a_doc_names_is_a_subcommand():
    assert wrong(subcommands, COMMANDS.__contains__) == []


def flags(text: str, fenced: bool) -> Iterator[tuple[str, str]]:
    for name, rest in commands(text, fenced):
        if name in COMMANDS:
            yield from ((name, flag) for flag in re.findall(r"(?<![\w-])--[a-z][\w-]*", rest))


@cache
def accepted_flags() -> dict[str, set[str]]:
    """Every option of every subcommand, nested ones (`keys generate`) included."""

    def walk(parser: argparse.ArgumentParser) -> set[str]:
        found = set()
        for action in parser._actions:
            found |= set(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                found = found.union(*map(walk, action.choices.values()))
        return found

    (subparsers,) = (
        a for a in build_parser(every=True)._actions if isinstance(a, argparse._SubParsersAction)
    )
    return {name: walk(sub) for name, sub in subparsers.choices.items()}


def taken(command_flag: tuple[str, str]) -> bool:
    command, flag = command_flag
    return flag in accepted_flags()[command]


def test_every_flag_a_doc_gives_a_lifeboat_command_is_one_it_takes():
    assert wrong(flags, taken) == []


def make_targets(text: str, fenced: bool) -> Iterator[str]:
    for span in spans(text, fenced):
        yield from re.findall(r"(?:^|\s)make ([a-z][\w-]*)", span)


def in_the_makefile(target: str) -> bool:
    return re.search(rf"^{re.escape(target)}:", (ROOT / "Makefile").read_text(), re.M) is not None


def test_every_make_target_a_doc_names_is_in_the_makefile():
    assert wrong(make_targets, in_the_makefile) == []


# -- names ----------------------------------------------------------------------------------
@cache
def variables_in_the_code() -> set[str]:
    files = [p for f in (*PRODUCT, "tests", "benchmarks") for p in (ROOT / f).rglob("*.py")]
    return {v for p in [*files, ROOT / "Makefile"] for v in re.findall(r"\bLIFEBOAT_\w+", p.read_text())}


def variables(text: str, fenced: bool) -> list[str]:
    return re.findall(r"\bLIFEBOAT_[A-Z0-9_]*[A-Z0-9]\b", text)


def test_every_lifeboat_variable_a_doc_names_is_read_by_the_code():
    assert wrong(variables, variables_in_the_code().__contains__) == []


def defined(path: Path, name: str) -> bool:
    """Whether a module defines `name` at its top level (a def, class, assignment or import)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name:
            return True
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
        imported = node.names if isinstance(node, ast.Import | ast.ImportFrom) else []
        if any((a.asname or a.name).split(".")[0] == name for a in imported):
            return True
    return False


def in_the_package(dotted: str) -> bool:
    """`lifeboat_dr.a.b.c`: the longest module it starts with exists, and defines what follows."""
    parts = dotted.split(".")[1:]
    for cut in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:cut])
        module = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if module.is_file() or base.is_dir():
            rest = parts[cut:]
            return not rest or module.is_file() and defined(module, rest[0])
    return False


def dotted_names(text: str, fenced: bool) -> Iterator[str]:
    for span in spans(text, fenced):
        yield from re.findall(r"\blifeboat_dr(?:\.\w+)+", span)


def test_every_lifeboat_dr_name_a_doc_gives_exists():
    assert wrong(dotted_names, in_the_package) == []


@cache
def design_sections() -> set[str]:
    return set(re.findall(r"^## (\d+a?)\. ", (ROOT / "docs" / "DESIGN.md").read_text(), re.M))


def section_pointers(text: str, fenced: bool) -> list[str]:
    return re.findall(r"DESIGN\.md`?,? *(?:§ *|section )(\d+a?)", text)


def test_every_design_section_a_doc_points_at_exists():
    assert wrong(section_pointers, design_sections().__contains__) == []
    inside = (ROOT / "docs" / "DESIGN.md").read_text()
    assert set(re.findall(r"§ ?(\d+a?)\b", inside)) <= design_sections()


# -- the step diagram -----------------------------------------------------------------------
def blocks(doc: Path) -> list[str]:
    """The fenced code blocks of a doc, each as its text."""
    found, block = [], None
    for text in doc.read_text().splitlines():
        if FENCE.match(text.strip()):
            found, block = (found + ["\n".join(block)], None) if block is not None else (found, [])
        elif block is not None:
            block.append(text)
    return found


@pytest.mark.parametrize("doc", ["README.md", "docs/DESIGN.md"])
def test_the_step_diagram_a_doc_shows_is_the_one_graph_draws(doc):
    drawn = [b for b in blocks(ROOT / doc) if b.startswith("detect ─► confirm ─┬")]
    assert drawn == [graph.diagram()], f"{doc}: paste `python -m lifeboat_dr.core.failover.graph`"


def test_the_graph_module_shows_the_diagram_it_draws():
    assert "\n".join("    " + line for line in graph.diagram().splitlines()) in graph.__doc__


def test_the_step_diagram_draws_every_step_once_right_of_what_it_waits_for():
    *picture, early = graph.diagram().splitlines()
    at = {}
    for row, line in enumerate(picture):
        for match in re.finditer(r"[a-z]+", line):
            assert match.group() not in at, f"{match.group()} drawn twice"
            at[match.group()] = (row, match.start())
    assert set(at) == {s.name for s in graph.STEPS}
    for step, waits_for in graph.step_graph().items():
        assert all(at[d][1] < at[step][1] for d in waits_for), f"{step} drawn before what it waits for"
    assert early.removeprefix("provision_before_approval: ") == "; ".join(
        f"{s.name} ◄ {', '.join(s.early_after)}" for s in graph.STEPS if s.early_after
    )
