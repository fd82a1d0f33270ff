"""`make bench` ends with every goal of the run, PASS or FAIL, and fails when one does (#31)."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

import benchmarks.__main__ as bench_main
from benchmarks._goals import LINE, goal, goal_line

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _fake(monkeypatch, **mains) -> None:
    """Benchmarks named by `mains`, each a module whose main() is the given function."""
    for name, fn in mains.items():
        module = types.ModuleType(f"benchmarks.{name}")
        module.main = fn
        monkeypatch.setitem(sys.modules, f"benchmarks.{name}", module)
    monkeypatch.setattr(bench_main, "_found", lambda: sorted(mains))


def _copy_rpo():
    print("copy: 1.30 s, s5cmd 1.00 s")
    goal("copy wall", False, "1.30x", "s5cmd's", "<= 1.2x")


def _certify():
    goal("certify 1k refused", True, "1.04x wall (CPU 0.97x)", "certify with the primary up", "<= 1.2x")


def _crashes():
    raise RuntimeError("moto did not start\nsecond line")


def test_a_failed_goal_and_a_benchmark_that_raised_fail_the_run_and_the_table_names_them(monkeypatch, capsys):
    _fake(
        monkeypatch, certify=_certify, copy=_copy_rpo, crashes=_crashes, quiet=lambda: print("figures only")
    )

    assert bench_main.main([]) == 1

    out = capsys.readouterr().out
    table = out[out.index("=== goals:") :]
    assert "=== goals: 1 PASS, 1 FAIL, a benchmark raised" in table
    assert "PASS  certify 1k refused: 1.04x wall (CPU 0.97x) vs certify with the primary up" in table
    assert "FAIL  copy wall: 1.30x vs s5cmd's (<= 1.2x)" in table
    assert re.search(r"crashes: raised RuntimeError: moto did not start$", table, re.M)
    assert "quiet: (no goal)" in table
    assert "copy: 1.30 s, s5cmd 1.00 s" in out  # the benchmark's own output still shows


def test_a_run_whose_goals_all_pass_exits_0(monkeypatch, capsys):
    _fake(monkeypatch, certify=_certify)
    assert bench_main.main(["certify"]) == 0
    assert "=== goals: 1 PASS, 0 FAIL" in capsys.readouterr().out


def test_an_unknown_benchmark_is_named_and_runs_nothing(monkeypatch, capsys):
    _fake(monkeypatch, certify=_certify)
    assert bench_main.main(["certfy"]) == 2
    assert "no benchmark 'certfy'; choose from certify" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args",
    [
        ("replicate 8 x 256 MiB wall", True, "1.07x", "s5cmd's", "<= 1.2x"),
        (
            "failover RTO, approve then provision",
            False,
            "12.30 s (1.062x)",
            "the critical path 11.58 s",
            "<= 1.05x",
        ),
    ],
)
def test_the_line_reads_back_as_it_was_written(args):
    m = LINE.match(goal_line(*args))
    assert (m["name"], m["verdict"] == "PASS", m["figure"], m["baseline"], m["goal"]) == args


def test_every_benchmark_that_judges_a_figure_prints_it_as_a_goal_line():
    """A benchmark's own PASS/FAIL wording would not reach the run's table."""
    judges = re.compile(r"""["'](PASS|meets)["'] if""")
    goal_lines = re.compile(r"""\bgoal(_line)?\(|f?["']GOAL """)
    own = [
        p.name
        for p in sorted(BENCHMARKS.glob("*.py"))
        if p.name != "_goals.py" and judges.search(p.read_text()) and not goal_lines.search(p.read_text())
    ]
    assert own == []
