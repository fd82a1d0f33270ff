"""Run the CLI with some modules as they were at an earlier commit: the "before" of a benchmark
that measures a change to them against the change, in the same run, on the same servers.

`python -m benchmarks._baseline DIR ARGS...` runs `lifeboat ARGS...`: DIR holds the old sources,
laid out as in the repository (`core/transfer.py` ...); each is loaded as its `lifeboat_dr`
module before the CLI imports it, the rest of the checkout as it is (DIR `-`: none, the
checkout as it is). `materialize(ref, paths, into)` writes DIR from git (`git show REF:PATH`).

`LIFEBOAT_BENCH_HWM=FILE`: the process's own peak RSS (VmHWM, KiB) is written there at exit.
The child's rusage is no measure of it on Linux: a child started by vfork (Python's
subprocess) inherits its parent's high-water mark at exec, so a benchmark holding an
in-process emulator's data reads that as the child's."""

from __future__ import annotations

import atexit
import importlib.util
import os
import runpy
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def materialize(ref: str, paths: tuple[str, ...], into: Path) -> None:
    for path in paths:
        target = into / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(subprocess.run(["git", "show", f"{ref}:{path}"], cwd=ROOT, check=True,
                                          capture_output=True).stdout)  # fmt: skip


def _write_peak(path: str) -> None:
    with open("/proc/self/status") as status:
        hwm = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    Path(path).write_text(hwm)


def _layer_first(source: Path) -> tuple[int, str]:
    """Lower layers first (setup.py's order), so that an old module's imports find the old
    modules below it (`providers/storage/base.py` before the `core/` that imports it)."""
    layers = ("kernel", "runbooks", "providers", "core", "standins", "flows", "shell", "demo", "testing")
    top = next((p for p in source.parts if p in layers), "")
    return (layers.index(top) if top else len(layers), str(source))


def main() -> None:
    old, sys.argv = sys.argv[1], ["lifeboat", *sys.argv[2:]]
    if os.environ.get("LIFEBOAT_BENCH_HWM"):
        atexit.register(_write_peak, os.environ["LIFEBOAT_BENCH_HWM"])
    for source in sorted(Path(old).rglob("*.py"), key=_layer_first) if old != "-" else ():
        name = "lifeboat_dr." + ".".join(source.relative_to(old).with_suffix("").parts)
        spec = importlib.util.spec_from_file_location(name, source)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # before it runs: its own imports find it
        spec.loader.exec_module(module)
    runpy.run_module("lifeboat_dr", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
