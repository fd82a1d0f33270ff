"""The import graph points one way (A ← B: B imports A), and the folders show it:

    kernel ← runbooks ← providers ← core ← standins ← flows ← shell ← demo

Each layer is a folder at the repository root, mapped into the one package `lifeboat_dr`
(`setup.py`). `testing/` (doubles and peer launchers) may import any layer; no layer imports
it. `benchmarks/` and `tests/` sit on top. Every import counts, the ones inside functions too,
and there is no cycle between modules anywhere, benchmarks included. Prefect is imported only
by flows/, the shell, the demo and the Prefect API adapter.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "lifeboat_dr"
LAYERS = ("kernel", "runbooks", "providers", "core", "standins", "flows", "shell", "demo")
BESIDE = ("testing",)  # may import every layer; nothing in a layer imports it
ON_TOP = ("benchmarks",)
PREFECT_LAYERS = ("flows", "shell", "demo")
PREFECT_ADAPTER = f"{PACKAGE}.providers.orchestrator.prefect_api"


def layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == PACKAGE:
        return parts[1] if len(parts) > 1 else None
    return parts[0] if parts[0] in ON_TOP else None


def modules():
    for folder in LAYERS + BESIDE + ON_TOP:
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            dotted = ".".join(p for p in parts if p != "__init__")
            yield (dotted if folder in ON_TOP else f"{PACKAGE}.{dotted}"), path


def imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from ((a.name, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, node.lineno
            yield from ((f"{node.module}.{a.name}", node.lineno) for a in node.names)


def rank(name: str) -> int:
    if name in LAYERS:
        return LAYERS.index(name)
    return len(LAYERS) + (name in ON_TOP)  # testing above every layer, benchmarks above it


def violations():
    for module, path in modules():
        mine = layer(module)
        for target, line in imports(path):
            theirs = layer(target)
            where = f"{path.relative_to(ROOT)}:{line}: {module} ({mine}) imports {target}"
            if theirs is not None and rank(theirs) > rank(mine):
                yield f"{where} ({theirs}): an arrow back up"
            prefect_here = mine in PREFECT_LAYERS + ON_TOP + BESIDE or module == PREFECT_ADAPTER
            if target.split(".")[0] == "prefect" and not prefect_here:
                yield f"{where}: Prefect outside {', '.join(PREFECT_LAYERS)} and {PREFECT_ADAPTER}"


def module_graph() -> dict[str, set[str]]:
    known = dict(modules())
    graph: dict[str, set[str]] = {m: set() for m in known}
    for module, path in known.items():
        for target, _ in imports(path):
            while target and target not in known:  # `from a.b import c` names a.b.c or a member of a.b
                target = target.rpartition(".")[0]
            if target and target != module and not module.startswith(target + "."):
                graph[module].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_points_one_way():
    assert list(violations()) == []


def test_no_module_imports_itself_through_others():
    assert cycles(module_graph()) == []


def test_every_layer_is_a_folder_mapped_into_the_package():
    for folder in LAYERS + BESIDE:
        assert (ROOT / folder / "__init__.py").is_file(), folder
    assert set(p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()) == {
        *LAYERS,
        *BESIDE,
        *ON_TOP,
        PACKAGE,
    }


@pytest.mark.parametrize(
    "module, expected",
    [
        ("lifeboat_dr.kernel.errors", "kernel"),
        ("lifeboat_dr.core.certify", "core"),
        ("lifeboat_dr.core.failover.walk", "core"),
        ("lifeboat_dr.runbooks.model", "runbooks"),
        ("lifeboat_dr.providers.storage.s3", "providers"),
        ("lifeboat_dr.standins.trainer", "standins"),
        ("lifeboat_dr.flows.failover", "flows"),
        ("lifeboat_dr.shell.cli", "shell"),
        ("lifeboat_dr.testing.memory_store", "testing"),
        ("benchmarks.replicate", "benchmarks"),
    ],
)
def test_every_package_has_its_layer(module, expected):
    assert layer(module) == expected


def test_the_check_catches_an_arrow_back_up_and_a_cycle(tmp_path, monkeypatch):
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "bad.py").write_text(
        "def f():\n    from lifeboat_dr.flows.failover import failover\n    import prefect\n"
    )
    (tmp_path / "core" / "ping.py").write_text("from lifeboat_dr.core import pong\n")
    (tmp_path / "core" / "pong.py").write_text("from lifeboat_dr.core.ping import x\n")
    (tmp_path / "testing").mkdir()
    (tmp_path / "testing" / "double.py").write_text("")
    (tmp_path / "kernel").mkdir()
    (tmp_path / "kernel" / "uses_double.py").write_text("import lifeboat_dr.testing.double\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    found = list(violations())
    assert any("an arrow back up" in v and "core/bad.py" in v for v in found)
    assert any("Prefect outside" in v for v in found)
    assert any("kernel/uses_double.py" in v for v in found)
    assert cycles(module_graph()) == [["lifeboat_dr.core.ping", "lifeboat_dr.core.pong"]]
