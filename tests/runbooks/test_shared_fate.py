"""`lifeboat validate` warns when the control plane would go down with the primary."""

from __future__ import annotations

from pathlib import Path

from lifeboat_dr.core import shared_fate
from lifeboat_dr.runbooks.loader import load_runbook
from lifeboat_dr.shell.cli import main as lifeboat

ROOT = Path(__file__).resolve().parents[2]
LLAMA = ROOT / "runbooks" / "llama-70b-pretrain.yaml"
SAFE = {"LIFEBOAT_LEDGER_CHAIN": "sites", "LIFEBOAT_STATE_DIR": "s3://dr-state/lifeboat/detect"}


def _rb():
    return load_runbook(LLAMA)


def shared_fate_warnings(rb, env):
    return shared_fate.shared_fate_warnings(rb.primary, env, base_dir=rb.base_dir)


def test_a_control_plane_apart_from_the_primary_draws_no_warning():
    env = {**SAFE, "PREFECT_API_URL": "https://prefect.dr.example.com/api"}
    assert shared_fate_warnings(_rb(), env) == []


def test_the_prefect_api_in_the_primary_region_is_named():
    rb = _rb()
    region = rb.primary.infra.split("/")[1]
    warnings = shared_fate_warnings(
        rb, {**SAFE, "PREFECT_API_URL": f"http://prefect.{region}.internal:4200/api"}
    )
    assert len(warnings) == 1 and f"primary's region {region}" in warnings[0]


def test_signal_state_and_ledger_in_the_primary_bucket_are_named():
    rb = _rb()
    bucket = rb.primary.store.split("/")[2]
    env = {"LIFEBOAT_LEDGER_CHAIN": f"s3://{bucket}/ledger", "LIFEBOAT_STATE_DIR": f"s3://{bucket}/detect"}
    warnings = shared_fate_warnings(rb, env)
    assert [w.split(":")[0] for w in warnings] == ["ledger", "signal state"]
    assert "only in the primary's bucket" in warnings[0] and "in the primary's bucket" in warnings[1]


def test_host_local_ledger_and_state_are_named():
    warnings = shared_fate_warnings(_rb(), {})
    assert [w.split(":")[0] for w in warnings] == ["ledger", "signal state"]


def test_a_local_primary_folder_holding_the_state_is_named(tmp_path):
    rb = load_runbook(ROOT / "runbooks" / "demo.yaml")
    primary = rb.store_uri(rb.primary.store)
    warnings = shared_fate_warnings(rb, {**SAFE, "LIFEBOAT_STATE_DIR": f"{primary}/detect"})
    assert len(warnings) == 1 and "primary's bucket" in warnings[0]


def test_validate_prints_the_warnings_and_still_exits_zero(monkeypatch, capsys):
    for var in ("LIFEBOAT_LEDGER_CHAIN", "LIFEBOAT_STATE_DIR", "PREFECT_API_URL"):
        monkeypatch.delenv(var, raising=False)
    assert lifeboat(["validate", str(LLAMA)]) == 0
    err = capsys.readouterr().err
    assert f"{LLAMA}: warning: ledger:" in err and f"{LLAMA}: warning: signal state:" in err
