"""The runbook's `recovery:` ladder: validated with the line an on-call would read; absent, the
failover alone (every runbook written before the ladder keeps today's behaviour)."""

import pytest

from lifeboat_dr.runbooks.loader import load_runbook
from tests.runbooks.test_broken_runbooks import GOOD as BARE
from tests.runbooks.test_broken_runbooks import problems, write

GOOD = BARE.replace("  store: s3://prim/ckpt\n", "  store: s3://prim/ckpt\n  cluster: job-a\n")

LADDER = """\
recovery:
  rungs:
    - rung: restart
      rto: 5m
    - rung: relaunch-without-node
      approval: wait
    - rung: other-zone
      zones: [aws/us-east-1/us-east-1b, aws/us-east-1/us-east-1c]
    - rung: failover
"""


def test_a_runbook_without_a_ladder_recovers_by_the_failover_alone(tmp_path):
    assert load_runbook(write(tmp_path, GOOD)).recovery.names == ("failover",)


def test_a_full_ladder_loads_with_each_rungs_approval_rto_and_zones(tmp_path):
    recovery = load_runbook(write(tmp_path, GOOD + LADDER)).recovery
    assert recovery.names == ("restart", "relaunch-without-node", "other-zone", "failover")
    assert recovery.rung("restart").rto.total_seconds() == 300
    assert recovery.rung("relaunch-without-node").approval == "wait"
    assert recovery.rung("restart").approval is None  # auto by default
    assert recovery.rung("other-zone").zones == ["aws/us-east-1/us-east-1b", "aws/us-east-1/us-east-1c"]


BROKEN = [
    (
        "unknown rung",
        ("    - rung: restart\n", "    - rung: reboot\n"),
        "22: recovery.rungs.0.rung: Input should be 'restart', 'relaunch-without-node', 'other-zone' or 'failover'",
    ),
    (
        "a rung twice",
        ("    - rung: failover\n", "    - rung: restart\n    - rung: failover\n"),
        "21: recovery.rungs: restart listed twice: each rung is tried at most once",
    ),
    (
        "failover not last",
        ("    - rung: failover\n", ""),
        None,  # built below: failover moved first
    ),
    (
        "approval on the failover rung",
        ("    - rung: failover\n", "    - rung: failover\n      approval: auto\n"),
        "29: recovery.rungs.3.approval: the failover rung is approved by the runbook's approval section",
    ),
    (
        "other-zone without zones",
        ("      zones: [aws/us-east-1/us-east-1b, aws/us-east-1/us-east-1c]\n", ""),
        "26: recovery.rungs.2.zones: other-zone needs the zones to relaunch in (aws/us-east-1/us-east-1b)",
    ),
    (
        "a zone that is a region",
        ("aws/us-east-1/us-east-1b,", "aws/us-east-1,"),
        "27: recovery.rungs.2.zones: 'aws/us-east-1' is not cloud/region/zone",
    ),
    (
        "a bad approval word",
        ("      approval: wait\n", "      approval: ask\n"),
        "25: recovery.rungs.1.approval: Input should be 'auto' or 'wait'",
    ),
]


@pytest.mark.parametrize("case, edit, expected", BROKEN, ids=[b[0] for b in BROKEN])
def test_a_broken_ladder_is_one_line_naming_file_line_and_field(tmp_path, case, edit, expected):
    text = (GOOD + LADDER).replace(*edit)
    if case == "failover not last":
        text = text.replace("  rungs:\n", "  rungs:\n    - rung: failover\n")
        expected = "21: recovery.rungs: failover must be the last rung: nothing is smaller after it"
    assert problems(write(tmp_path, text)) == [expected]


def test_an_empty_ladder_is_refused(tmp_path):
    assert problems(write(tmp_path, GOOD + "recovery:\n  rungs: []\n")) == [
        "21: recovery.rungs: the ladder is empty: name at least one rung (failover, alone, is today's)"
    ]


def test_a_ladder_that_acts_on_the_cluster_needs_the_primarys_cluster_named(tmp_path):
    assert problems(write(tmp_path, BARE + LADDER)) == [
        "3: primary.cluster: the recovery ladder's rungs act on the job's cluster: name it"
    ]
    assert load_runbook(write(tmp_path, BARE + "recovery:\n  rungs:\n    - rung: failover\n")).recovery
