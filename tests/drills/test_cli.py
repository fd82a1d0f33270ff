"""`lifeboat drill` prints every check and exits 0 only when all pass."""

import pytest

from lifeboat_dr.shell.cli import main
from tests.drills.conftest import DEMO


@pytest.mark.integration
def test_lifeboat_drill_prints_each_check_and_exits_0(prefect_server, workdir, capsys):
    assert main(["drill", str(DEMO), "--kind", "stale-primary"]) == 0

    out = capsys.readouterr().out
    assert "drill stale-primary: passed" in out
    assert "[PASS] stale commit refused on the secondary store" in out
    assert "[PASS] no cluster left behind" in out
    (artifact,) = _artifacts("drill-demo-stale-primary")[:1]
    assert "passed" in artifact.description and "stale commit refused" in artifact.data


def _artifacts(key):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    with get_client(sync_client=True) as client:
        return client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])), sort=ArtifactSort.CREATED_DESC
        )


def test_lifeboat_drill_refuses_a_kind_the_torch_job_does_not_drill(capsys):
    assert main(["drill", str(DEMO), "--kind", "gpu-fault", "--trainer", "torch"]) == 1
    err = capsys.readouterr().err.strip()
    assert (
        err
        == "lifeboat drill: the torch trainer drills process-kill, nccl-hang, cuda-error only, not gpu-fault"
    )


def test_lifeboat_drill_refuses_an_unknown_kind(capsys):
    with pytest.raises(SystemExit) as e:
        main(["drill", str(DEMO), "--kind", "meteor-strike"])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err


@pytest.mark.integration
def test_lifeboat_audit_exits_0_when_the_sample_reproduces_its_curve(prefect_server, workdir, capsys):
    import yaml

    from lifeboat_dr.flows.sandbox import sandboxed
    from lifeboat_dr.runbooks.loader import load_runbook

    rb = sandboxed(load_runbook(str(DEMO)), "audit")
    rb.path.write_text(yaml.safe_dump(rb.model_dump(mode="json")))

    assert main(["audit", str(rb.path), "--sample", "2", "--seed", "7"]) == 0
    assert "audit passed: checkpoints" in capsys.readouterr().out


def test_lifeboat_drill_kind_partition_not_as_root_says_so_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr("os.geteuid", lambda: 1000)

    assert main(["drill", str(DEMO), "--kind", "partition"]) == 1

    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("lifeboat drill: the partition drill needs root"), line


def test_lifeboat_drill_kind_partition_without_ip_says_so_in_one_line(monkeypatch, capsys):
    import shutil

    which = shutil.which
    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setattr(
        "shutil.which", lambda name, *a, **kw: None if name == "ip" else which(name, *a, **kw)
    )

    assert main(["drill", str(DEMO), "--kind", "partition"]) == 1

    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("lifeboat drill: the partition drill needs iproute2's `ip`"), line


def test_lifeboat_drill_kind_partition_without_moto_server_says_so_in_one_line(monkeypatch, capsys, tmp_path):
    """An installed Lifeboat runs the partition drill from its package (no checkout); its primary
    store is moto's server, found beside the interpreter."""
    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setattr("shutil.which", lambda name, *a, **kw: f"/usr/sbin/{name}")
    monkeypatch.setattr("sys.executable", str(tmp_path / "bin" / "python"))

    assert main(["drill", str(DEMO), "--kind", "partition"]) == 1

    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("lifeboat drill: the partition drill's primary store is moto's S3 server"), line
