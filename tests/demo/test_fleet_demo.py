"""`make demo DEMO_ARGS=--fleet`: six runbooks lose aws/us-east-1 at once; the secondary holds 256
of their 336 GPUs. Alone they book 80 H100s it does not have; the fleet plan puts the chat
model first, downgrades the big pretraining run to A100s, and says who waits, how long, at what cost."""

import re

from lifeboat_dr.demo import training as demo


def test_fleet_demo_arbitrates_a_secondary_too_small_for_the_region(monkeypatch, capsys):
    monkeypatch.chdir(demo.ROOT)

    assert demo.main(["--fleet", "--plan-only"]) == 0

    out = capsys.readouterr().out
    assert "gcp/us-central1 H100: 176 GPUs booked of 96 (over)" in out
    assert "80 GPUs booked past the quota" in out
    plan = re.findall(r"^\[lifeboat fleet demo\]   (\d\. .*)$", out, re.M)
    assert plan == [
        "1. chat-serving: 16 GPUs on gcp/us-central1 H100",
        "2. llama-70b-pretrain: 128 GPUs on gcp/us-central1 A100-80GB (downgraded)",
        "3. llama-8b-pretrain: 64 GPUs on gcp/us-central1 H100",
        "4. mistral-7b-dpo: waits 4.0h, then the recovered primary ($160/h of lost compute)",
        "5. mistral-7b-sft: 32 GPUs on gcp/us-central1 A100-80GB (downgraded)",
        "6. batch-embed: waits 30m, then gcp/us-central1 A100-80GB ($48/h of lost compute)",
    ]
    assert "in use now: gcp/us-central1 A100-80GB 160 of 160, gcp/us-central1 H100 80 of 96" in out
    assert "demo passed" in out
