"""Drill `fleet`: three copies of a runbook lose their region at once, the secondary holds two;
the fleet failover rehearses it in the sandbox, one decision, each placed copy its own failover."""

from pathlib import Path

import pytest

from lifeboat_dr.flows.drills import kinds_for
from lifeboat_dr.flows.drills.fleet import fleet_copies
from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.runbooks.loader import load_runbook

ROOT = Path(__file__).resolve().parents[2]


def test_a_runbook_with_no_candidate_outside_its_primary_cannot_be_drilled_as_a_fleet(tmp_path):
    with pytest.raises(ConfigError, match="drill 'fleet'"):
        fleet_copies(load_runbook(ROOT / "runbooks" / "demo.yaml"), tmp_path)


def test_the_fleet_drill_is_for_training_runbooks_and_never_in_all():
    with pytest.raises(ConfigError, match="serves traffic"):
        kinds_for("fleet", load_runbook(ROOT / "runbooks" / "chat-serving.yaml"))
    llama = load_runbook(ROOT / "runbooks" / "llama-70b-pretrain.yaml")
    assert kinds_for("fleet", llama) == ("fleet",) and "fleet" not in kinds_for("all", llama)


def test_the_copies_declare_room_for_two_of_three(tmp_path):
    copies = [
        load_runbook(p)
        for p in fleet_copies(load_runbook(ROOT / "runbooks" / "llama-70b-pretrain.yaml"), tmp_path)
    ]
    assert [c.name for c in copies] == [f"llama-70b-pretrain-fleet-{i}" for i in (1, 2, 3)]
    gpus = {c.cluster.gpus for c in copies}
    (quota,) = {(q.infra, q.accelerator, q.gpus) for c in copies for q in c.fleet.quota}
    assert len(gpus) == 1 and quota[2] == 2 * gpus.pop()


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_the_fleet_drill_passes_on_the_shipped_pretraining_runbook(prefect_server, tmp_path, monkeypatch):
    from lifeboat_dr.flows.drill import drill

    monkeypatch.setenv("LIFEBOAT_LEDGER", str(tmp_path / "ledger.jsonl"))
    monkeypatch.chdir(tmp_path)
    (result,) = drill(str(ROOT / "runbooks" / "llama-70b-pretrain.yaml"), kind="fleet")
    assert result["kind"] == "fleet" and result["passed"], result
    assert len(result["checks"]) == 5
