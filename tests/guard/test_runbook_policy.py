"""The runbook sets the watchdog's bound of the job Lifeboat starts."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from lifeboat_dr.flows.wiring import job_spec, runbook_env
from lifeboat_dr.runbooks.loader import load_runbook
from lifeboat_dr.runbooks.model import Runbook

DEMO = Path(__file__).resolve().parents[2] / "runbooks" / "demo.yaml"


def _with_guard(guard: dict) -> Runbook:
    doc = load_runbook(DEMO).model_dump(mode="json")
    doc["job"]["guard"] = guard
    return Runbook.model_validate(doc)


def test_the_runbooks_hang_multiple_and_floor_reach_the_resumed_jobs_environment():
    spec = job_spec(_with_guard({"hang_multiple": 6, "hang_floor": "30s"}), "file:///ckpt/step-00000040")
    assert spec.env == {"LIFEBOAT_HANG_MULTIPLE": "6", "LIFEBOAT_HANG_FLOOR_S": "30"}
    assert spec.resume_envs()["LIFEBOAT_HANG_MULTIPLE"] == "6"


def test_without_a_guard_section_the_job_keeps_the_guards_defaults():
    assert job_spec(load_runbook(DEMO)).env == {}  # a rehearsal's or the secondary's job names no runbook


def test_the_primarys_job_names_its_runbook_to_the_guard():
    # the guard's fault event carries them: the recover automation picks the runbook by name
    assert runbook_env(load_runbook(DEMO)) == {"LIFEBOAT_RUNBOOK": str(DEMO), "LIFEBOAT_RUNBOOK_NAME": "demo"}
    assert runbook_env(_with_guard({})) == {"LIFEBOAT_RUNBOOK_NAME": "demo"}  # no file: the name alone


def test_a_multiple_that_calls_every_step_a_hang_is_refused():
    with pytest.raises(ValidationError, match="hang_multiple"):
        _with_guard({"hang_multiple": 1})
