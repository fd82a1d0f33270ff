"""When Daly's interval misses the RPO target, advise the least-waste interval that meets it,
beside Daly's, with what meeting it costs."""

from pathlib import Path

import pytest

from lifeboat_dr.core.advise import interval as iv
from lifeboat_dr.core.advise.advice import advise
from lifeboat_dr.core.advise.inputs import AdviceInputs
from lifeboat_dr.core.advise.report import format_text
from lifeboat_dr.shell.cli import main

ROOT = Path(__file__).resolve().parents[2]
BASE = dict(gpus=128, gpu_hour_usd=3.8, mtbf_s=390.6 * 3600, checkpoint_write_s=120, restart_s=600)


def test_daly_missing_the_target_advises_the_longest_interval_that_meets_it():
    a = advise(AdviceInputs(**BASE, rpo_target_s=2 * 3600))
    assert a.advised.worst_rpo_s > 2 * 3600 and a.advised.label == "Daly (misses RPO)"
    assert a.meets_rpo.interval_s == 2 * 3600 - 120 and a.meets_rpo.worst_rpo_s == 2 * 3600
    assert a.recommended is a.meets_rpo
    # least waste among intervals that meet it: any shorter one wastes more
    shorter = iv.expected_waste_fraction(a.meets_rpo.interval_s - 60, 120, 600, BASE["mtbf_s"])
    assert a.advised.waste_fraction < a.meets_rpo.waste_fraction < shorter


def test_daly_meeting_the_target_is_advised_alone():
    a = advise(AdviceInputs(**BASE, rpo_target_s=8 * 3600))
    assert a.meets_rpo is None and a.recommended is a.advised and a.advised.label == "advised (Daly)"


def test_a_target_below_write_plus_replication_is_unreachable_and_says_so():
    a = advise(AdviceInputs(**BASE, replication_s=600, rpo_target_s=600))
    assert a.meets_rpo is None and a.rpo_unreachable
    assert "no interval meets it (checkpoint write + replication alone exceed it)" in format_text(a)


@pytest.mark.parametrize("json_flag", [False, True])
def test_the_pretraining_example_shows_both_intervals_and_the_cost(capsys, json_flag):
    assert (
        main(["advise", str(ROOT / "runbooks/llama-70b-pretrain.yaml"), *(["--json"] if json_flag else [])])
        == 0
    )
    out = capsys.readouterr().out
    if json_flag:
        assert '"meets_rpo"' in out and '"interval_s": 7080.0' in out
        return
    assert "Daly 5h5m misses the RPO target: advised 1h58m, the least waste that meets it" in out
    assert "  Daly (misses RPO)        5h5m   1.3%" in out
    assert "  advised (meets RPO)     1h58m   2.0%" in out
    assert "meeting it (every 1h58m) costs 0.6 points more waste than Daly: $2,191.54/month" in out
