"""docs/advise.md cannot go stale: its `pycon` blocks run as doctests and its `console`
blocks are run through the CLI and compared with what the page shows."""

import doctest
import json
import re
import shlex
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "advise.md"
TEXT = DOC.read_text()
PYCON = [
    (TEXT[: m.start()].count("\n") + 2, m.group(1)) for m in re.finditer(r"```pycon\n(.*?)```", TEXT, re.S)
]
CONSOLE = re.findall(r"```console\n\$ (.*?)\n(.*?)```", TEXT, re.S)


def test_the_page_has_the_worked_examples():
    assert len(PYCON) >= 4 and len(CONSOLE) >= 3
    assert "$7,782.40" in TEXT and "about 2 hours lost per failure" in TEXT


@pytest.mark.parametrize(("line", "block"), PYCON, ids=[f"line-{n}" for n, _ in PYCON])
def test_python_example_in_the_doc_still_holds(line, block):
    test = doctest.DocTestParser().get_doctest(block, {}, f"advise.md:{line}", str(DOC), line)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0, (
        f"a pycon example at {DOC.name}:{line} no longer holds"
    )


@pytest.mark.parametrize(("command", "shown"), CONSOLE, ids=[f"console-{i}" for i in range(len(CONSOLE))])
def test_console_example_in_the_doc_matches_the_cli(lifeboat, command, shown):
    argv = shlex.split(command)
    assert argv[0] == "lifeboat"
    rc, out, err = lifeboat(*argv[1:])
    assert rc == 0, err
    assert out == shown, f"docs/advise.md is stale: rerun `{command}` and paste its output"


def test_the_mtbf_5_days_example_loses_about_two_hours_per_failure(lifeboat):
    command = next(c for c, _ in CONSOLE if "--mtbf 5d" in c and "--interval 4h" in c)
    _, out, _ = lifeboat(*shlex.split(command)[1:], "--json")

    current = json.loads(out)["current"]
    assert current["rework_s"] == pytest.approx(2 * 3600, abs=120)  # (4h + 2m) / 2
    assert current["loss_per_failure_s"] == current["rework_s"] + 600
