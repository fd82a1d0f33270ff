"""`lifeboat plan`: the example runbooks priced by SkyPilot's optimizer over the shipped catalog."""

from __future__ import annotations

import json
from pathlib import Path

from lifeboat_dr.shell.cli import main

RUNBOOKS = Path(__file__).resolve().parents[2] / "runbooks"


def test_plan_blocks_the_failed_primary_and_prices_the_candidates_per_cluster(capsys):
    assert main(["plan", str(RUNBOOKS / "llama-70b-pretrain.yaml"), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["blocked"] == ["aws/us-east-1"] and plan["num_nodes"] == 16
    feasible = [o for o in plan["options"] if o["feasible"]]
    assert [o["infra"] for o in feasible] == ["gcp/us-central1", "gcp/us-east4", "aws/us-west-2"]
    spot = feasible[2]
    assert spot["use_spot"] and spot["instance_type"] == "p5.48xlarge"
    assert plan["cheapest_rank"] == spot["rank"]  # 16 spot p5s undercut 16 on-demand a3s
    assert all(o["hourly_usd"] > 16 * 30 for o in feasible)  # priced per 16-node cluster


def test_plan_with_a_whole_cloud_blocked_keeps_only_the_other_cloud(capsys):
    assert main(["plan", str(RUNBOOKS / "llama-70b-pretrain.yaml"), "--block", "gcp"]) == 0
    out = capsys.readouterr().out
    assert "blocked: aws/us-east-1, gcp" in out
    priced = [line for line in out.splitlines() if line[:1].isdigit()]
    assert len(priced) == 1 and "aws/us-west-2" in priced[0] and "p5.48xlarge" in priced[0]
    assert "gcp/us-central1 is blocked" in out


def test_plan_with_every_candidate_blocked_exits_1(capsys):
    assert main(["plan", str(RUNBOOKS / "chat-serving.yaml"), "--block", "gcp/us-central1"]) == 1
    assert "no feasible candidate" in capsys.readouterr().err


def test_candidate_the_catalog_does_not_offer_is_shown_with_the_optimizer_reason(capsys):
    assert main(["plan", str(RUNBOOKS / "mistral-7b-sft.yaml")]) == 0
    out = capsys.readouterr().out
    unpriced = next(line for line in out.splitlines() if "aws/us-west-2" in line)
    assert unpriced.startswith("-") and "does not contain" in unpriced
