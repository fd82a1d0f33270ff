"""The import graph points one way (A ← B: B imports A):

    kernel ← runbooks ← providers ← core ← flows ← shell

kernel = lifeboat.errors, lifeboat.durations, lifeboat.crc32c; core = the rest of lifeboat/.
Every import counts, the ones inside functions too. Prefect is imported only by flows/, the
shell and the Prefect API adapter (providers/orchestrator/prefect_api.py).
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KERNEL = {"lifeboat.errors", "lifeboat.durations", "lifeboat.crc32c"}
LAYERS = ("kernel", "runbooks", "providers", "core", "flows", "shell")
PREFECT_ADAPTER = "providers.orchestrator.prefect_api"


def layer(module: str) -> str | None:
    top = module.split(".")[0]
    if module in KERNEL or any(module.startswith(k + ".") for k in KERNEL):
        return "kernel"
    if top == "lifeboat":
        return "core" if module != "lifeboat" else "kernel"  # the package itself holds nothing
    return top if top in LAYERS else None


def modules():
    for folder in ("lifeboat", "runbooks", "providers", "flows", "shell"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            yield ".".join(p for p in parts if p != "__init__"), path


def imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from ((a.name, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, node.lineno


def violations():
    for module, path in modules():
        mine = layer(module)
        for target, line in imports(path):
            theirs = layer(target)
            where = f"{path.relative_to(ROOT)}:{line}: {module} ({mine}) imports {target}"
            if theirs is not None and LAYERS.index(theirs) > LAYERS.index(mine):
                yield f"{where} ({theirs}): an arrow back up"
            if (
                target.split(".")[0] == "prefect"
                and mine not in ("flows", "shell")
                and module != PREFECT_ADAPTER
            ):
                yield f"{where}: Prefect outside flows/, the shell and {PREFECT_ADAPTER}"


def test_the_import_graph_points_one_way():
    assert list(violations()) == []


@pytest.mark.parametrize(
    "module, expected",
    [
        ("lifeboat.errors", "kernel"),
        ("lifeboat.certify", "core"),
        ("lifeboat.failover.walk", "core"),
        ("runbooks.model", "runbooks"),
        ("providers.storage.s3", "providers"),
        ("flows.failover", "flows"),
        ("shell.cli", "shell"),
    ],
)
def test_every_package_has_its_layer(module, expected):
    assert layer(module) == expected


def test_the_check_catches_an_arrow_back_up(tmp_path, monkeypatch):
    bad = tmp_path / "lifeboat" / "bad.py"
    bad.parent.mkdir()
    bad.write_text("def f():\n    from flows.failover import failover\n    import prefect\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    found = list(violations())
    assert any("an arrow back up" in v for v in found) and any("Prefect outside" in v for v in found)
