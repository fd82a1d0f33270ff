"""Run every benchmark (or those named on the command line) and print their results."""

import importlib
import os
import pkgutil
import sys
import time
from pathlib import Path


def main(names: list[str]) -> int:
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    if "--quick" in names:  # smaller shapes, fewer runs (benchmarks read LIFEBOAT_BENCH_QUICK)
        os.environ["LIFEBOAT_BENCH_QUICK"] = "1"
    names = [n for n in names if not n.startswith("--")]
    here = Path(__file__).parent
    found = sorted(m.name for m in pkgutil.iter_modules([str(here)]) if not m.name.startswith("_"))
    for name in names or found:
        if name not in found:
            print(f"no benchmark {name!r}; choose from {', '.join(found)}", file=sys.stderr)
            return 2
        print(f"\n=== {name} ===", flush=True)
        started = time.perf_counter()
        importlib.import_module(f"benchmarks.{name}").main()
        print(f"({name}: {time.perf_counter() - started:.1f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
