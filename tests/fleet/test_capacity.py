"""`lifeboat capacity`: before a region goes, does the secondary's quota hold its runbooks?"""

from __future__ import annotations

import json

import pytest

from lifeboat_dr.runbooks.loader import RunbookInvalid, load_runbook
from lifeboat_dr.shell.cli import main
from tests.fleet.fleet_runbooks import fleet_runbook

USC1 = "gcp/us-central1"
USE4 = "gcp/us-east4"


def capacity(capsys, *args) -> tuple[int, str]:
    code = main(["capacity", *map(str, args)])
    return code, capsys.readouterr().out


def test_a_region_loss_with_room_for_every_runbook_passes(tmp_path, capsys):
    a = fleet_runbook(tmp_path, "pretrain", gpus=128, quota=((USC1, "H100", 256),))
    b = fleet_runbook(tmp_path, "sft", gpus=64, quota=((USC1, "H100", 256),))
    code, out = capacity(capsys, a, b)
    assert code == 0, out
    assert (
        "pretrain: 128 GPUs; quota on its candidates 256 (largest gcp/us-central1 H100 256): 50% minimum ok, fits ok"
        in out
    )
    assert (
        "outage of aws/us-east-1: 2 runbook(s), 192 GPUs lost, 256 of quota where they may go: 50% minimum ok; 2 placed, 0 wait"
        in out
    )
    assert "  pretrain: 128 GPUs on gcp/us-central1 H100" in out


def test_quota_under_half_the_primary_fails_the_seeds_minimum(tmp_path, capsys):
    path = fleet_runbook(tmp_path, "pretrain", gpus=128, quota=((USC1, "H100", 48),))
    code, out = capacity(capsys, path)
    assert code == 1
    assert (
        "pretrain: 128 GPUs; quota on its candidates 48 (largest gcp/us-central1 H100 48): 50% minimum NOT MET, fits NOT MET"
        in out
    )


def test_half_the_gpus_split_over_two_regions_meets_the_minimum_but_fits_nowhere(tmp_path, capsys):
    path = fleet_runbook(
        tmp_path,
        "pretrain",
        gpus=128,
        candidates=((USC1, "H100:8"), (USE4, "H100:8")),
        quota=((USC1, "H100", 64), (USE4, "H100", 64)),
    )
    code, out = capacity(capsys, path)
    assert code == 1
    assert (
        "quota on its candidates 128 (largest gcp/us-central1 H100 64): 50% minimum ok, fits NOT MET" in out
    )


def test_two_runbooks_wanting_one_regions_gpus_the_cheaper_waits_for_the_recovery(tmp_path, capsys):
    a = fleet_runbook(tmp_path, "pretrain", gpus=128, price=3.8, quota=((USC1, "H100", 128),))
    b = fleet_runbook(tmp_path, "sft", gpus=128, price=2.0)
    code, out = capacity(capsys, a, b, "--recovery", "4h")
    assert code == 1
    assert "2 placed" not in out
    assert "  pretrain: 128 GPUs on gcp/us-central1 H100" in out
    assert "  sft: waits 4.0h, then the recovered primary ($256/h of lost compute)" in out


def test_priority_puts_the_cheaper_job_first(tmp_path, capsys):
    a = fleet_runbook(tmp_path, "pretrain", gpus=128, price=3.8, quota=((USC1, "H100", 128),))
    b = fleet_runbook(tmp_path, "sft", gpus=128, price=2.0, priority=1)
    _, out = capacity(capsys, a, b)
    assert "  sft: 128 GPUs on gcp/us-central1 H100" in out
    assert "  pretrain: waits an unknown time, then the recovered primary ($486/h of lost compute)" in out


def test_a_job_downgrades_to_its_a100_candidate_and_json_says_so(tmp_path, capsys):
    quota = ((USC1, "H100", 128), (USC1, "A100-80GB", 128))
    both = ((USC1, "H100:8"), (USC1, "A100-80GB:8"))
    a = fleet_runbook(tmp_path, "pretrain", gpus=128, price=3.8, candidates=both, quota=quota)
    b = fleet_runbook(tmp_path, "sft", gpus=128, price=2.0, candidates=both, quota=quota)
    code, out = capacity(capsys, a, b, "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"]
    [outage] = report["outages"]
    assert outage["placements"][1] == {
        "runbook": "sft",
        "gpus": 128,
        "place": "gcp/us-central1 A100-80GB",
        "downgraded": True,
        "wait_s": 0.0,
    }


def test_runbooks_declaring_one_place_differently_are_planned_on_the_smaller(tmp_path, capsys):
    a = fleet_runbook(tmp_path, "pretrain", gpus=128, quota=((USC1, "H100", 256),))
    b = fleet_runbook(tmp_path, "sft", gpus=64, quota=((USC1, "H100", 128),))
    code, out = capacity(capsys, a, b)
    assert "quota: gcp/us-central1 H100: declared as 256 (pretrain), 128 (sft); planning on 128" in out
    assert "1 placed, 1 wait" in out and code == 1


def test_a_candidate_in_the_failed_region_counts_for_nothing(tmp_path, capsys):
    same = fleet_runbook(
        tmp_path,
        "pretrain",
        gpus=64,
        primary=USC1,
        candidates=((USC1, "H100:8"), (USE4, "H100:8")),
        quota=((USC1, "H100", 512), (USE4, "H100", 64)),
    )
    code, out = capacity(capsys, same)
    assert code == 0, out
    assert "quota on its candidates 64 (largest gcp/us-east4 H100 64)" in out
    assert "  pretrain: 64 GPUs on gcp/us-east4 H100" in out


def test_a_whole_cloud_lost_takes_every_runbook_whose_primary_is_in_it(tmp_path, capsys):
    a = fleet_runbook(tmp_path, "east", gpus=64, primary="aws/us-east-1", quota=((USC1, "H100", 64),))
    b = fleet_runbook(tmp_path, "west", gpus=64, primary="aws/us-west-2")
    c = fleet_runbook(tmp_path, "gcp-job", gpus=8, primary=USE4)
    _, out = capacity(capsys, a, b, c, "--fail", "aws")
    assert (
        "outage of aws: 2 runbook(s), 128 GPUs lost, 64 of quota where they may go: 50% minimum ok; 1 placed, 1 wait"
        in out
    )
    assert "gcp-job:" not in out.split("outage of aws")[1]


def test_no_declared_quota_is_said_and_fails(tmp_path, capsys):
    code, out = capacity(capsys, fleet_runbook(tmp_path, "pretrain", gpus=8))
    assert code == 1
    assert out.startswith("no runbook declares fleet.quota")


def test_a_runbook_of_unknown_size_is_listed_not_planned(capsys):
    code, out = capacity(capsys, "demo")
    assert code == 1
    assert "demo: not planned: candidate local names no accelerators, nor does the task" in out


def test_validate_warns_when_no_candidate_can_hold_the_jobs_gpus(tmp_path, capsys):
    path = fleet_runbook(tmp_path, "pretrain", gpus=128, quota=((USC1, "H100", 96),))
    assert main(["validate", str(path)]) == 0
    err = capsys.readouterr().err
    assert (
        f"{path}: warning: fleet.quota: no candidate can hold the job's 128 GPUs "
        "(declared quota: gcp/us-central1 H100 96); raise the service limit or add a candidate with room"
    ) in err


def test_validate_is_quiet_when_a_candidate_holds_the_job(tmp_path, capsys):
    path = fleet_runbook(tmp_path, "pretrain", gpus=128, quota=((USC1, "H100", 128),))
    assert main(["validate", str(path)]) == 0
    assert "fleet.quota" not in capsys.readouterr().err


def test_a_place_declared_twice_is_one_line_naming_the_field(tmp_path):
    path = fleet_runbook(tmp_path, "pretrain", gpus=8, quota=((USC1, "H100", 8), (USC1, "h100", 16)))
    with pytest.raises(RunbookInvalid) as e:
        load_runbook(path)
    [problem] = e.value.problems
    assert str(problem).endswith(
        "fleet.quota: gcp/us-central1 h100 is listed twice; give each place and GPU type once"
    )
    assert problem.line is not None


def test_a_quota_with_a_count_in_the_gpu_type_names_the_field(tmp_path):
    path = fleet_runbook(tmp_path, "pretrain", gpus=8, quota=((USC1, "H100:8", 8),))
    with pytest.raises(RunbookInvalid) as e:
        load_runbook(path)
    [problem] = e.value.problems
    assert problem.field == "fleet.quota.0.accelerator"
    assert problem.message == "the GPU type alone, e.g. H100; the count goes in gpus"
