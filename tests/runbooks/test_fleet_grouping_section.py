"""The runbook's `fleet.lock_store` / `fleet.group_window`: each mistake named by file, line
and field, and `validate`'s warning for a realtime-inference runbook that groups."""

import pytest

from lifeboat_dr.flows.fleet_inputs import fit_warnings
from lifeboat_dr.runbooks.loader import load_runbook
from tests.runbooks.test_broken_runbooks import GOOD, problems, write

FLEET = "fleet:\n  lock_store: s3://dr/fleet\n  group_window: 2m\n"


def test_a_grouping_runbook_loads_with_its_window_and_lock_store(tmp_path):
    rb = load_runbook(write(tmp_path, GOOD + FLEET))
    assert (rb.fleet.lock_store, rb.fleet.group_window.total_seconds()) == ("s3://dr/fleet", 120.0)
    assert fit_warnings(rb) == []


@pytest.mark.parametrize(
    ("fleet", "said"),
    [
        (
            "fleet:\n  lock_store: s3://dr/fleet\n  group_window: 2h\n",
            "21: fleet.group_window: 2h is not well inside the runbook's RTO 30m (at most a quarter: 7m30s)",
        ),
        (
            "fleet:\n  group_window: 2m\n",
            "19: fleet.lock_store: group_window is set, so name the store the region's runbooks group in",
        ),
        (
            "fleet:\n  lock_store: s3://dr/fleet\n  group_window: 0s\n",
            "21: fleet.group_window: must be more than 0",
        ),
    ],
)
def test_a_bad_grouping_section_is_named_by_line_and_field(tmp_path, fleet, said):
    path = write(tmp_path, GOOD + fleet)
    found = problems(path)
    assert found == [said]


def test_validate_warns_when_a_realtime_inference_runbook_groups(tmp_path):
    from lifeboat_dr.runbooks.model import Workload

    rb = load_runbook(write(tmp_path, GOOD + FLEET))
    realtime = rb.model_copy(update={"workload": Workload.realtime_inference})
    assert fit_warnings(realtime)[0].startswith(
        "fleet.group_window: a realtime-inference runbook waits 2m to group before it fails over"
    )


def test_validate_says_a_serving_runbooks_window_is_ignored():
    from pathlib import Path

    from lifeboat_dr.flows.grouping import grouping_key

    rb = load_runbook(Path(__file__).resolve().parents[2] / "runbooks" / "chat-serving.yaml")
    window = rb.fleet.model_copy(update={"lock_store": "s3://dr/fleet", "group_window": rb.rto_target / 8})
    serving = rb.model_copy(update={"fleet": window})
    assert fit_warnings(serving)[0].startswith("fleet.group_window: ignored: a serving runbook moves traffic")
    assert grouping_key(serving) is None  # it fails over alone
