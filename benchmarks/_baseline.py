"""Run the CLI with some modules as they were at an earlier commit: the "before" of a benchmark
that measures a change to them against the change, in the same run, on the same servers.

`python -m benchmarks._baseline DIR ARGS...` runs `lifeboat ARGS...`: DIR holds the old sources,
laid out as in the repository (`core/transfer.py` ...); each is loaded as its `lifeboat_dr`
module wherever it is imported (`_OldSources`), the rest of the checkout as it is (DIR `-`: none, the
checkout as it is). `materialize(ref, paths, into)` writes DIR from git (`git show REF:PATH`).

`LIFEBOAT_BENCH_HWM=FILE`: the process's own peak RSS (VmHWM, KiB) is written there at exit.
The child's rusage is no measure of it on Linux: a child started by vfork (Python's
subprocess) inherits its parent's high-water mark at exec, so a benchmark holding an
in-process emulator's data reads that as the child's."""

from __future__ import annotations

import atexit
import importlib.abc
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


class _OldSources(importlib.abc.MetaPathFinder):
    """Finds the old source of each module in DIR whenever it is imported, by whichever
    module first: loading them up front in some order let an old module import a new one
    that was not replaced yet (old `core/replication/copying.py` bound the new
    `core/transfer.py`)."""

    def __init__(self, sources: dict[str, Path]):
        self.sources = sources

    def find_spec(self, name, path=None, target=None):
        source = self.sources.get(name)
        return importlib.util.spec_from_file_location(name, source) if source else None


def main() -> None:
    old, sys.argv = sys.argv[1], ["lifeboat", *sys.argv[2:]]
    if os.environ.get("LIFEBOAT_BENCH_HWM"):
        atexit.register(_write_peak, os.environ["LIFEBOAT_BENCH_HWM"])
    if old != "-":
        sources = {
            "lifeboat_dr." + ".".join(source.relative_to(old).with_suffix("").parts): source
            for source in Path(old).rglob("*.py")
        }
        sys.meta_path.insert(0, _OldSources(sources))
    runpy.run_module("lifeboat_dr", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
