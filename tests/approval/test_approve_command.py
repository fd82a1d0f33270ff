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


def test_keys_generate_writes_a_private_file_and_prints_the_public_key(tmp_path, capsys):
    path = tmp_path / "signing.pem"
    assert lifeboat(["keys", "generate", str(path)]) == 0
    out = capsys.readouterr().out
    public = next(line for line in out.splitlines() if line.startswith("LIFEBOAT_APPROVAL_PUBLIC_KEYS="))
    assert oct(path.stat().st_mode & 0o777) == "0o600" and "-----BEGIN PRIVATE KEY-----" not in out
    assert lifeboat(["keys", "public", str(path)]) == 0
    assert capsys.readouterr().out.strip() == public
    assert lifeboat(["keys", "generate", str(path)]) == 1
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("exists: a signing key is never overwritten (remove it first)")
    )


def test_approve_refuses_per_job_and_reject_together(capsys):
    argv = ["approve", "8d4c1a52-0000-4000-8000-000000000001", "--reject", "--job", "a", "--reason", "no"]
    assert lifeboat(argv) == 1
    assert "--reject rejects the whole plan: give one" in capsys.readouterr().err
