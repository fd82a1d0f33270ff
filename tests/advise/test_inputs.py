"""Where advise's inputs come from: the runbook's cluster: section, overridden by flags."""

import pytest
from pydantic import ValidationError

from lifeboat_dr.core.advise import resolve_inputs
from lifeboat_dr.flows.wiring import advice_figures
from lifeboat_dr.kernel.errors import ConfigError

H = 3600.0


def test_runbook_supplies_cluster_numbers_cadence_and_retention(runbook_data, make_runbook):
    inp = resolve_inputs(advice_figures(make_runbook(runbook_data)))
    assert (inp.gpus, inp.gpu_hour_usd, inp.mtbf_s) == (1024, 3.80, 7.9 * H)
    assert (inp.checkpoint_write_s, inp.restart_s, inp.current_interval_s) == (300, 600, 4 * H)
    assert inp.retained_checkpoints == 2
    assert (inp.standby_tier, inp.standby_fraction) == ("warm", 0.10)
    assert (inp.rpo_target_s, inp.rto_target_s) == (2 * H, 30 * 60)  # pretraining defaults


def test_flags_override_the_runbook(runbook_data, make_runbook):
    inp = resolve_inputs(
        advice_figures(make_runbook(runbook_data)), {"gpus": 2048, "interval": 3600.0, "restart": None}
    )
    assert (inp.gpus, inp.current_interval_s, inp.restart_s) == (2048, 3600.0, 600)


def test_a_per_gpu_mtbf_flag_replaces_the_runbooks_cluster_mtbf(runbook_data, make_runbook):
    inp = resolve_inputs(advice_figures(make_runbook(runbook_data)), {"gpu_mtbf": 50_000 * H})
    assert inp.mtbf_s == pytest.approx(50_000 * H / 1024)
    assert inp.gpu_mtbf_s == 50_000 * H


def test_without_a_runbook_missing_inputs_are_named_with_their_flags_and_units():
    with pytest.raises(ConfigError) as e:
        resolve_inputs(None, {"gpus": 8})
    message = str(e.value)
    assert "--gpu-hour-usd (price of one GPU-hour (US dollars))" in message
    assert "--checkpoint-write" in message and "--mtbf" in message
    assert "--gpus " not in message  # given, so not asked for


@pytest.mark.parametrize(
    ("flags", "complaint"),
    [
        ({"gpus": 0}, "--gpus"),
        ({"checkpoint_write": 0.0}, "--checkpoint-write"),
        ({"mtbf": 0.0}, "MTBF"),
        ({"standby_fraction": -0.5}, "--standby-fraction"),
        ({"mtbf": 3600.0, "gpu_mtbf": 3600.0}, "not both"),
    ],
)
def test_impossible_values_are_refused_in_one_line(flags, complaint):
    base = {"gpus": 8, "gpu_hour_usd": 2.0, "mtbf": 36_000.0, "checkpoint_write": 60.0}
    with pytest.raises(ConfigError, match=complaint):
        resolve_inputs(None, base | flags)


def test_runbook_cluster_section_needs_exactly_one_failure_rate(runbook_data, make_runbook):
    runbook_data["cluster"]["gpu_mtbf"] = "50000h"
    with pytest.raises(ValidationError, match="mtbf: give exactly one"):
        make_runbook(runbook_data)
    del runbook_data["cluster"]["gpu_mtbf"], runbook_data["cluster"]["mtbf"]
    with pytest.raises(ValidationError, match="mtbf: give exactly one"):
        make_runbook(runbook_data)


def test_runbook_cluster_section_rejects_unknown_keys(runbook_data, make_runbook):
    runbook_data["cluster"]["gpu_count"] = 8
    with pytest.raises(ValidationError, match="gpu_count"):
        make_runbook(runbook_data)


def test_runbook_without_cluster_section_still_loads(runbook_data, make_runbook):
    del runbook_data["cluster"]
    assert make_runbook(runbook_data).cluster is None
