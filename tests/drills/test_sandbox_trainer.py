"""The sandbox's job is a choice: the numpy trainer (manifest layout) or the torch one (DCP)."""

import pytest

from lifeboat_dr.flows.drills import kinds_for
from lifeboat_dr.flows.sandbox import sandboxed
from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.runbooks.loader import load_runbook
from tests.drills.conftest import DEMO


def test_a_torch_sandbox_runs_torchrun_and_certifies_the_dcp_layout(tmp_path):
    rb = sandboxed(load_runbook(DEMO), "t", root=tmp_path, trainer="torch", history=False)

    assert rb.checkpoint.layout.value == "dcp"
    assert (
        "-m lifeboat_dr.standins.trainer.torchrun --standalone --nproc-per-node 2 -m lifeboat_dr.standins.trainer.dcp"
        in rb.job.command
    )
    assert "--ckpt-dir" not in rb.job.command  # the resume step's $LIFEBOAT_STORE: the site it runs on
    assert not (tmp_path / "t" / "primary").exists()  # no history played


def test_the_numpy_sandbox_keeps_the_manifest_layout(tmp_path):
    rb = sandboxed(load_runbook(DEMO), "n", root=tmp_path)

    assert rb.checkpoint.layout.value == "manifest"
    assert "-m lifeboat_dr.standins.trainer --steps 50 --every 5" in rb.job.command
    assert sorted(p.name for p in (tmp_path / "n" / "secondary").glob("step-*")) == [
        f"step-{s:08d}" for s in (5, 10, 15, 20, 25, 30, 35, 40)
    ]


def test_the_torch_job_drills_process_kill_and_its_guards_faults_only():
    assert kinds_for("all", trainer="torch") == ("process-kill", "nccl-hang", "cuda-error")
    assert kinds_for("process-kill", trainer="torch") == ("process-kill",)
    with pytest.raises(
        ConfigError,
        match="the torch trainer drills process-kill, nccl-hang, cuda-error only, not region-outage",
    ):
        kinds_for("region-outage", trainer="torch")
    with pytest.raises(ConfigError, match="the numpy trainer drills .* only, not nccl-hang"):
        kinds_for("nccl-hang")  # the guard is the torch job's
    with pytest.raises(ConfigError, match="unknown trainer 'jax'; use one of numpy, torch"):
        kinds_for("all", trainer="jax")
