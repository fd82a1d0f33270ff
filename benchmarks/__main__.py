"""Run every benchmark (or those named on the command line), then table every goal they printed.

Exit status: 0 when every `GOAL ...` line of the run says PASS, 1 when one says FAIL or a
benchmark raised, 2 for an unknown name. The line's format is benchmarks/_goals.py's."""

import importlib
import os
import pkgutil
import sys
import time
import traceback
from pathlib import Path

from benchmarks._goals import LINE, table


class _Goals:
    """sys.stdout for one benchmark: passes everything through and keeps its GOAL lines."""

    def __init__(self, out):
        self.out, self.lines, self._partial = out, [], ""

    def write(self, text: str) -> int:
        *done, self._partial = (self._partial + text).split("\n")
        self.lines += [line for line in done if LINE.match(line)]
        return self.out.write(text)

    def __getattr__(self, name):  # flush, fileno, isatty...: the real stream's
        return getattr(self.out, name)


def _found() -> list[str]:
    here = Path(__file__).parent
    return sorted(m.name for m in pkgutil.iter_modules([str(here)]) if not m.name.startswith("_"))


def main(names: list[str]) -> int:
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    if "--quick" in names:  # smaller shapes, fewer runs (benchmarks read LIFEBOAT_BENCH_QUICK)
        os.environ["LIFEBOAT_BENCH_QUICK"] = "1"
    names = [n for n in names if not n.startswith("--")]
    found = _found()
    for name in names:
        if name not in found:
            print(f"no benchmark {name!r}; choose from {', '.join(found)}", file=sys.stderr)
            return 2
    rows: list[tuple[str, str]] = []
    raised = False
    for name in names or found:
        print(f"\n=== {name} ===", flush=True)
        started = time.perf_counter()
        goals = _Goals(sys.stdout)
        sys.stdout = goals
        try:
            importlib.import_module(f"benchmarks.{name}").main()
        except Exception as e:  # the others still run; the run fails
            traceback.print_exc()
            goals.lines.append(f"raised {type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}")
            raised = True
        finally:
            sys.stdout = goals.out
        print(f"({name}: {time.perf_counter() - started:.1f}s)")
        rows += [(name, line) for line in goals.lines] or [(name, "(no goal)")]
    verdicts = [m["verdict"] for _, line in rows if (m := LINE.match(line))]
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"\n=== goals: {verdicts.count('PASS')} PASS, {verdicts.count('FAIL')} FAIL"
        f"{', a benchmark raised' if raised else ''} (load average {load}) ==="
    )
    print(table(rows))
    return 1 if raised or "FAIL" in verdicts else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
