"""The docs name only what exists: every repository path, `lifeboat` subcommand and flag,
`make` target, `LIFEBOAT_*` variable and `lifeboat_dr.…` name in README.md and docs/*.md is real,
and the failover's step diagram in docs/DESIGN.md is the one `core/failover/graph.py` draws.
A rename that leaves a doc behind fails here, naming the doc and the line."""

from __future__ import annotations

import argparse
import ast
import re
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


def lines(doc: Path):
    """(line number, text, inside a fenced block) for each line of a doc."""
    fenced = False
    for number, text in enumerate(doc.read_text().splitlines(), 1):
        if FENCE.match(text.strip()):
            fenced = not fenced
            continue
        yield number, text, fenced


def mentions(kind):
    """Every (doc:line, mention) the docs make of one kind, for parametrizing."""
    found = []
    for doc in DOCS:
        for number, text, fenced in lines(doc):
            for mention in kind(text, fenced):
                found.append(pytest.param(mention, id=f"{doc.relative_to(ROOT)}:{number}: {mention}"))
    return found


def spans(text: str, fenced: bool) -> list[str]:
    return [text] if fenced else SPAN.findall(text)


def paths(text: str, fenced: bool):
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


def exists(token: str) -> bool:
    """Whether a named path is in the tree: from the root when its first folder is at the root
    (or a doc beside the others), else as the end of some path (`failover/graph.py`)."""
    regex = re.escape(token).replace(r"\*", "[^/]*")
    folder = "" if token.endswith("/") else "/?"
    first = token.split("/")[0]
    rooted = (ROOT / first).exists() or "*" in first
    here = [rf"{regex}{folder}", rf"docs/{regex}{folder}"] if rooted else [rf"(.*/)?{regex}{folder}"]
    return any(re.fullmatch(r, p) for r in here for p in tree())


@pytest.mark.parametrize("path", mentions(paths))
def test_every_path_a_doc_names_is_in_the_tree(path):
    assert exists(path), f"{path} is not in the repository"


def named_tests(text: str, fenced: bool):
    """(file or None, test name or its start) for each test a doc names: `file.py::test_x`,
    `test_x`, or either cut short with `…`."""
    for span in [] if fenced else SPAN.findall(text):
        if match := re.fullmatch(r"(?:([\w/]+\.py)::)?(test_\w+?)_?(…)?", span):
            yield match.group(1), match.group(2) + ("…" if match.group(3) else "")


@pytest.mark.parametrize("file_test", mentions(named_tests))
def test_every_test_a_doc_names_is_in_the_suite(file_test):
    file, name = file_test
    files = [p for p in (ROOT / "tests").rglob("*.py") if file is None or p.as_posix().endswith(file)]
    pattern = rf"^\s*(async )?def {re.escape(name.rstrip('…'))}{'' if name.endswith('…') else '[(]'}"
    assert any(re.search(pattern, p.read_text(), re.M) for p in files), (
        f"no test {name} in {file or 'tests/'}"
    )


def commands(text: str, fenced: bool):
    """(subcommand, what follows it up to a comment) for each `lifeboat …` a doc writes: in a
    code span, or as a command line of a code block (`$ ` and variables before it allowed)."""
    for span in spans(text, fenced):
        if not fenced or COMMAND_LINE.match(span):
            for match in re.finditer(r"(?:^|[\s(`])lifeboat ([a-z][\w-]*)([^#;|&]*)", span):
                yield match.group(1), match.group(2)


def subcommands(text: str, fenced: bool):
    yield from (name for name, _ in commands(text, fenced))


@pytest.mark.parametrize("command", mentions(subcommands))
def test_every_lifeboat_command_a_doc_names_is_a_subcommand(command):
    assert command in COMMANDS, f"`lifeboat {command}` is not one of {', '.join(COMMANDS)}"


def flags(text: str, fenced: bool):
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

    (commands,) = (a for a in build_parser(every=True)._actions if isinstance(a, argparse._SubParsersAction))
    return {name: walk(sub) for name, sub in commands.choices.items()}


@pytest.mark.parametrize("command_flag", mentions(flags))
def test_every_flag_a_doc_gives_a_lifeboat_command_is_one_it_takes(command_flag):
    command, flag = command_flag
    assert flag in accepted_flags()[command], f"`lifeboat {command}` takes no {flag}"


def make_targets(text: str, fenced: bool):
    for span in spans(text, fenced):
        yield from re.findall(r"(?:^|\s)make ([a-z][\w-]*)", span)


@pytest.mark.parametrize("target", mentions(make_targets))
def test_every_make_target_a_doc_names_is_in_the_makefile(target):
    assert re.search(rf"^{re.escape(target)}:", (ROOT / "Makefile").read_text(), re.M), target


@cache
def source_text() -> str:
    folders = ("kernel", "runbooks", "providers", "core", "standins", "flows", "shell", "demo", "testing")
    files = [p for f in (*folders, "tests", "benchmarks") for p in (ROOT / f).rglob("*.py")]
    return "\n".join(p.read_text() for p in [*files, ROOT / "Makefile"])


def variables(text: str, fenced: bool):
    yield from re.findall(r"\bLIFEBOAT_[A-Z0-9_]*[A-Z0-9]\b", text)


@pytest.mark.parametrize("variable", mentions(variables))
def test_every_lifeboat_variable_a_doc_names_is_read_by_the_code(variable):
    assert re.search(rf"\b{variable}\b", source_text()), f"no code reads {variable}"


def dotted_names(text: str, fenced: bool):
    for span in spans(text, fenced):
        yield from re.findall(r"\blifeboat_dr(?:\.\w+)+", span)


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


@pytest.mark.parametrize("dotted", mentions(dotted_names))
def test_every_lifeboat_dr_name_a_doc_gives_exists(dotted):
    parts = dotted.split(".")[1:]
    for cut in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:cut])
        module = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if module.is_file() or base.is_dir():
            rest = parts[cut:]
            assert not rest or module.is_file() and defined(module, rest[0]), f"{dotted}: no {rest[0]}"
            return
    pytest.fail(f"{dotted}: no such module")


def section_references(text: str, fenced: bool):
    yield from re.findall(r"DESIGN\.md`?,? *(?:§ *|section )(\d+a?)", text)


@cache
def design_sections() -> set[str]:
    return set(re.findall(r"^## (\d+a?)\. ", (ROOT / "docs" / "DESIGN.md").read_text(), re.M))


@pytest.mark.parametrize("section", mentions(section_references))
def test_every_design_section_a_doc_points_at_exists(section):
    assert section in design_sections(), f"docs/DESIGN.md has no section {section}"


def test_every_section_the_design_doc_points_at_inside_exists():
    text = (ROOT / "docs" / "DESIGN.md").read_text()
    assert set(re.findall(r"§ ?(\d+a?)\b", text)) <= design_sections()


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
