"""A runbook becomes providers and settings in one place, `flows/wiring.py` (the composition
root), and travels no further: no function in core/ or providers/ takes the whole `Runbook`.
They take the values they need, typed: plain values, a small frozen dataclass (`JobSpec`,
`PrestagePlan`, `RunbookFigures`), or the runbook's own sub-model for one section (`Site`,
`Detection`, `Approval`). Read from the source (AST), so a function no test calls is held
to it too: a parameter named `rb`, or annotated with `Runbook`, and a field annotated with
it (a dataclass carrying the runbook along), are each a finding.
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HELD = ("core", "providers")
WHOLE = re.compile(r"\bRunbook\b")  # `RunbookFigures`, `RunbookInvalid` are other names


def _names_runbook(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return False
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name) and node.id == "Runbook":
            return True
        if isinstance(node, ast.Attribute) and node.attr == "Runbook":
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and WHOLE.search(node.value):
            return True
    return False


def _parameters(args: ast.arguments) -> list[ast.arg]:
    extra = [a for a in (args.vararg, args.kwarg) if a is not None]
    return [*args.posonlyargs, *args.args, *args.kwonlyargs, *extra]


def whole_runbook_takers(source: str) -> dict[str, str]:
    """Dotted name of each function (or class, for a field) taking the whole runbook -> how."""
    found: dict[str, str] = {}

    def visit(node: ast.AST, scope: tuple[str, ...]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                name = "<lambda>" if isinstance(child, ast.Lambda) else child.name
                here = (*scope, name)
                for arg in _parameters(child.args):
                    if arg.arg == "rb" or _names_runbook(arg.annotation):
                        found.setdefault(".".join(here), f"line {arg.lineno}: parameter {arg.arg!r}")
                visit(child, here)
            elif isinstance(child, ast.ClassDef):
                here = (*scope, child.name)
                for item in child.body:
                    if isinstance(item, ast.AnnAssign) and _names_runbook(item.annotation):
                        found.setdefault(
                            ".".join(here), f"line {item.lineno}: field {ast.unparse(item.target)}"
                        )
                visit(child, here)
            else:
                visit(child, scope)

    visit(ast.parse(source), ())
    return found


def findings() -> dict[str, dict[str, str]]:
    out = {}
    for folder in HELD:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if takers := whole_runbook_takers(path.read_text()):
                out[rel] = takers
    return out


def test_no_function_in_core_or_providers_takes_the_whole_runbook():
    found = [
        f"{path}:{how}: {name} takes the whole runbook; pass what it needs (flows/wiring.py reads it)"
        for path, takers in findings().items()
        for name, how in takers.items()
    ]
    assert found == []


def test_the_check_sees_each_way_of_taking_it():
    source = """
from lifeboat_dr.runbooks.model import Runbook, Site
from lifeboat_dr.runbooks import model

def by_name(rb, run_id: str): ...
def annotated(runbook: Runbook | None): ...
def quoted(*, source: "Runbook"): ...
def dotted(view: model.Runbook): ...
def typed(primary: Site, figures: "RunbookFigures", base: str = "rb"): ...

class Ledger:
    @classmethod
    def build(cls, rb, run_id): ...
    def nested(self):
        def inner(rb): ...
        return lambda rb: rb

@dataclass(frozen=True)
class Carries:
    runbook: Runbook
    name: str
"""
    assert set(whole_runbook_takers(source)) == {
        "by_name",
        "annotated",
        "quoted",
        "dotted",
        "Ledger.build",
        "Ledger.nested.inner",
        "Ledger.nested.<lambda>",
        "Carries",
    }
