"""The demo trainers as jobs, without starting one (no torch needed)."""

import dataclasses

import pytest

from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.standins.trainer.jobs import TRAINERS, trainer_job


def test_the_newest_committed_dcp_checkpoint_is_the_newest_with_the_guarded_commits_marker(tmp_path):
    # step 10: killed between DCP's .metadata and the marker (certification after the fence
    # refuses it: no marker); step 15: killed mid-save
    saves = (
        (5, [".metadata", "__0_0.distcp", "lifeboat-commit.json"]),
        (10, [".metadata", "__0_0.distcp", "__1_0.distcp"]),
        (15, ["__0_0.distcp", "__1_0.distcp"]),
    )
    for step, files in saves:
        folder = tmp_path / f"step-{step:08d}"
        folder.mkdir()
        for name in files:
            (folder / name).write_bytes(b"x")
    assert TRAINERS["torch"].newest_committed(tmp_path) == tmp_path / "step-00000005"
    assert TRAINERS["numpy"].newest_committed(tmp_path) is None  # no Lifeboat manifest anywhere


def test_the_torch_job_is_torchrun_with_two_ranks_and_the_numpy_one_is_not():
    torch, numpy = trainer_job("torch"), trainer_job("numpy")
    line = torch.command(steps=9, every=3, ckpt_dir="c d", loss_log="l", python="py")
    assert line == (
        "py -m lifeboat_dr.standins.trainer.torchrun --standalone --nproc-per-node 2 -m lifeboat_dr.standins.trainer.dcp "
        "--steps 9 --every 3 --ckpt-dir 'c d' --loss-log l"
    )
    assert numpy.argv(steps=9, every=3, ckpt_dir="c", loss_log="l", resume="file:///x", python="py") == (
        ["py", "-m", "lifeboat_dr.standins.trainer", "--steps", "9", "--every", "3"]
        + ["--ckpt-dir", "c", "--loss-log", "l", "--resume", "file:///x"]
    )
    assert (torch.layout, numpy.layout) == ("dcp", "manifest")


def test_a_missing_framework_and_an_unknown_trainer_are_one_line_errors():
    absent = dataclasses.replace(TRAINERS["torch"], needs="lifeboat_no_such_framework")
    assert absent.missing() == "the torch trainer needs lifeboat_no_such_framework: pip install -e '.[torch]'"
    assert TRAINERS["numpy"].missing() is None
    with pytest.raises(ConfigError, match=r"^unknown trainer 'jax'; use one of numpy, torch$"):
        trainer_job("jax")


@pytest.mark.processes
def test_a_failed_run_raises_with_the_tail_of_its_output(tmp_path):
    with pytest.raises(RuntimeError, match="the numpy trainer exited 1: .*no committed checkpoint"):
        TRAINERS["numpy"].run(
            steps=3, every=1, ckpt_dir=tmp_path, loss_log=tmp_path / "l", resume=str(tmp_path)
        )
