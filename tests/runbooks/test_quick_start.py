"""`validate` and `render` run with pydantic's plugin scan and the cyclic GC off, and leave
the process as they found it (tests, `lifeboat serve` and flows call them in-process)."""

import gc
import os
from pathlib import Path

import pytest

from lifeboat_dr.shell.cli import main, quick_start

DEMO = str(Path(__file__).resolve().parents[2] / "runbooks" / "demo.yaml")


def test_validate_and_render_leave_gc_and_the_environment_as_they_were(monkeypatch, capsys):
    monkeypatch.delenv("PYDANTIC_DISABLE_PLUGINS", raising=False)
    assert main(["validate", DEMO]) == 0
    assert main(["render", DEMO]) == 0
    assert gc.isenabled() and "PYDANTIC_DISABLE_PLUGINS" not in os.environ
    assert "# Runbook: demo" in capsys.readouterr().out


def test_an_error_inside_still_restores_them_and_an_explicit_setting_wins(monkeypatch):
    monkeypatch.setenv("PYDANTIC_DISABLE_PLUGINS", "logfire")
    with pytest.raises(KeyError), quick_start():
        assert not gc.isenabled() and os.environ["PYDANTIC_DISABLE_PLUGINS"] == "logfire"
        raise KeyError("boom")
    assert gc.isenabled() and os.environ["PYDANTIC_DISABLE_PLUGINS"] == "logfire"


def test_a_caller_that_had_gc_off_keeps_it_off():
    gc.disable()
    try:
        with quick_start():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
