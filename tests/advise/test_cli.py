"""`lifeboat advise` as people and CI call it."""

import json

import pytest
import yaml

from lifeboat_dr.core.advise import INPUTS, advice_markdown
from lifeboat_dr.flows.wiring import advice_figures

FLAGS = (
    "--gpus", "1024", "--gpu-hour-usd", "3.80", "--mtbf", "7.9h", "--checkpoint-write", "5m",
    "--restart", "10m", "--interval", "4h",
)  # fmt: skip


def test_help_explains_every_input_with_its_unit(lifeboat, capsys):
    with pytest.raises(SystemExit):
        lifeboat("advise", "--help")
    text = " ".join(capsys.readouterr().out.split())
    for flag, what in INPUTS.values():
        assert flag in text
        assert " ".join(what.split()) in text
    for unit in ("(count)", "(US dollars)", "(duration", "(GB", "per GB-month"):
        assert unit in text


def test_flags_alone_give_the_advised_interval_and_the_current_cadence(lifeboat):
    rc, out, _ = lifeboat("advise", *FLAGS)
    assert rc == 0
    assert "Young sqrt(2CM) 1h9m; Daly 1h6m (advised)" in out
    assert "advised (Daly)" in out and "current cadence" in out
    assert "wastes 11.1 points less" in out


def test_json_carries_inputs_and_results_in_seconds_and_dollars(lifeboat):
    rc, out, _ = lifeboat("advise", *FLAGS, "--json")
    data = json.loads(out)
    assert rc == 0
    assert data["inputs"]["mtbf_s"] == pytest.approx(7.9 * 3600)
    assert data["daly_interval_s"] < data["young_interval_s"]
    assert data["current"]["interval_s"] == 4 * 3600
    assert data["advised"]["waste_fraction"] < data["current"]["waste_fraction"]
    assert data["budget"]["gpu_spend_usd_per_month"] == pytest.approx(1024 * 3.80 * 730)


def test_missing_inputs_are_one_line_and_exit_1(lifeboat):
    rc, out, err = lifeboat("advise", "--gpus", "8")
    assert rc == 1 and out == ""
    assert err.startswith("lifeboat advise: missing --gpu-hour-usd")
    assert err.count("\n") == 1


def test_a_duration_without_a_unit_word_is_refused_by_argparse(lifeboat, capsys):
    with pytest.raises(SystemExit) as e:
        lifeboat("advise", *FLAGS[:-2], "--interval", "four hours")
    assert e.value.code == 2
    assert "not a duration" in capsys.readouterr().err


def test_runbook_file_plus_an_overriding_flag(lifeboat, runbook_data, tmp_path):
    path = tmp_path / "llm.yaml"
    path.write_text(yaml.safe_dump(runbook_data))
    rc, out, _ = lifeboat("advise", str(path), "--gpus", "2048", "--json")
    data = json.loads(out)
    assert rc == 0
    assert data["inputs"]["name"] == "llm-pretrain"
    assert data["inputs"]["gpus"] == 2048
    assert data["budget"]["rto_floor_s"] == 18 * 60  # provision 8m + restart 10m


def test_render_section_is_absent_without_cluster_numbers(runbook_data, make_runbook):
    del runbook_data["cluster"]
    assert advice_markdown(advice_figures(make_runbook(runbook_data))) is None


def test_render_section_states_interval_rpo_and_budget(runbook_data, make_runbook):
    md = advice_markdown(advice_figures(make_runbook(runbook_data)))
    assert md.startswith("## Checkpoint interval and DR budget\n")
    assert "| advised (Daly) | 1h6m |" in md
    assert "| current cadence | 4h |" in md
    assert "- RPO target 2h: advised (Daly) worst 1h11m meets it; current cadence worst 4h5m MISSES it." in md
    assert "| standby (warm) | $284,057.60 | 10.0% |" in md
