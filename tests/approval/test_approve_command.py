import pytest

from lifeboat_dr.shell.cli import main as lifeboat


def test_approve_refuses_something_that_is_not_a_run_id(capsys):
    assert lifeboat(["approve", "run-1", "--reason", "go"]) == 1
    assert capsys.readouterr().err.strip() == (
        "lifeboat approve: 'run-1' is not a flow run id (a UUID, as on the approval card)"
    )


def test_approve_needs_a_reason(capsys):
    with pytest.raises(SystemExit):
        lifeboat(["approve", "8d4c1a52-0000-4000-8000-000000000001"])
    assert "--reason" in capsys.readouterr().err


def test_approve_without_a_prefect_server_says_which_setting_is_missing(capsys):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        assert lifeboat(["approve", "8d4c1a52-0000-4000-8000-000000000001", "--reason", "go"]) == 1
    assert "PREFECT_API_URL is not set" in capsys.readouterr().err
