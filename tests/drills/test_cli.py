"""`lifeboat drill` prints every check and exits 0 only when all pass."""

import pytest

from lifeboat.cli import main
from tests.drills.conftest import DEMO


def test_lifeboat_drill_prints_each_check_and_exits_0(prefect_server, workdir, capsys):
    assert main(["drill", str(DEMO), "--kind", "stale-primary"]) == 0

    out = capsys.readouterr().out
    assert "drill stale-primary: passed" in out
    assert "[PASS] stale commit refused on the secondary store" in out
    assert "[PASS] no cluster left behind" in out


def test_lifeboat_drill_refuses_an_unknown_kind(capsys):
    with pytest.raises(SystemExit) as e:
        main(["drill", str(DEMO), "--kind", "meteor-strike"])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err
