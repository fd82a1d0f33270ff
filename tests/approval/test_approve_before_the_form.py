"""`lifeboat approve` sent the moment a run pauses: Prefect pauses the run first and saves
the approval form's schema just after, and a resume in between is refused ("Run input schema
not found"). The command waits a short while for the form, then says plainly it is missing.
Real Prefect server (the test harness); the run is paused by hand, as the gate pauses it."""

from __future__ import annotations

import json
import threading
import time
from uuid import UUID

import pytest

from lifeboat_dr.shell.cli import main as lifeboat

pytestmark = pytest.mark.integration
SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}, "reason": {"type": "string"}}}


def _paused_without_its_form(client) -> tuple[UUID, dict[str, str]]:
    from prefect.client.schemas.objects import StateType
    from prefect.input.run_input import keyset_from_base_key
    from prefect.states import Paused, Running

    flow_id = client.create_flow_from_name("failover")
    run_id = UUID(client.request("POST", "/flow_runs/", json={"flow_id": str(flow_id)}).json()["id"])
    keyset = keyset_from_base_key("paused-1")
    client.set_flow_run_state(run_id, Running(), force=True)
    paused = Paused(timeout_seconds=600, pause_key="paused-1")
    paused.state_details.run_input_keyset = keyset  # as prefect's pause_flow_run sets it
    client.set_flow_run_state(run_id, paused, force=True)
    assert client.read_flow_run(run_id).state.type == StateType.PAUSED
    return run_id, keyset


def test_an_approve_sent_before_prefect_saves_the_form_lands_once_it_is_saved(prefect_server, capsys):
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        run_id, keyset = _paused_without_its_form(client)

        def save_the_form_later():
            time.sleep(1.5)
            with get_client(sync_client=True) as late:
                late.create_flow_run_input(run_id, keyset["schema"], json.dumps(SCHEMA))

        saver = threading.Thread(target=save_the_form_later)
        saver.start()
        rc = lifeboat(["approve", str(run_id), "--reason", "region down", "--wait", "1"])
        saver.join()
        err = capsys.readouterr().err.strip()
        # Prefect took the decision (straight to Prefect here, so no verdict is signed: the line
        # that says so is the command's next step, reached only once the resume was accepted).
        assert err == (
            f"lifeboat approve: run {run_id} was resumed, but not through the identity proxy: nothing "
            "signed who you are, so the run refuses the decision (point PREFECT_API_URL at the proxy's /api)"
        ), err
        assert rc == 1
        assert not client.read_flow_run(run_id).state.is_paused()


def test_an_approve_for_a_form_that_never_appears_says_so_in_one_line(prefect_server, capsys, monkeypatch):
    from prefect.client.orchestration import get_client

    from lifeboat_dr.shell.commands import approve

    monkeypatch.setattr(approve, "FORM_WAIT_S", 1.0)
    with get_client(sync_client=True) as client:
        run_id, _ = _paused_without_its_form(client)
        started = time.monotonic()
        assert lifeboat(["approve", str(run_id), "--reason", "region down"]) == 1
        waited = time.monotonic() - started
        assert client.read_flow_run(run_id).state.is_paused()
    err = capsys.readouterr().err
    assert err == (
        f"lifeboat approve: run {run_id} is paused, but Prefect has no approval form for it after 1s "
        "(Run input schema not found): is it paused at a Lifeboat gate? See the run's page\n"
    ), err
    assert 1.0 <= waited < 10
