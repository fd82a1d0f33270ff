"""LocalCompute specifics: a restart leaves no process of the old job behind."""

from __future__ import annotations

import json

from lifeboat_dr.providers.compute.base import JobSpec, JobState, wait_for
from lifeboat_dr.providers.compute.local import LocalCompute, group_alive


def test_run_kills_the_old_job_whole_process_group_before_starting_the_new_one(tmp_path, local_option):
    compute = LocalCompute(tmp_path / "clusters")
    try:
        # A trainer with a child (a data loader): both must die with the restart.
        compute.launch(
            "rb", local_option, JobSpec(name="rb", command="sleep 30 & sleep 30; wait", workdir=tmp_path)
        )
        old_pid = json.loads((tmp_path / "clusters" / "rb" / "state.json").read_text())["pid"]
        assert group_alive(old_pid)
        st = compute.run("rb", JobSpec(name="rb", command="sleep 30", workdir=tmp_path))
        assert not group_alive(old_pid)
        assert st.job is JobState.RUNNING and st.detail != f"pid {old_pid}"
    finally:
        new_pid = json.loads((tmp_path / "clusters" / "rb" / "state.json").read_text())["pid"]
        compute.teardown("rb")
    assert not group_alive(new_pid) and compute.clusters() == []
    assert not (tmp_path / "clusters" / "rb").exists()


def test_a_held_cluster_is_its_state_dir_alone_and_other_processes_see_it(tmp_path, local_option):
    LocalCompute(tmp_path / "clusters").launch("rb", local_option)
    state = json.loads((tmp_path / "clusters" / "rb" / "state.json").read_text())
    assert state["pid"] is None
    other = LocalCompute(tmp_path / "clusters")  # a CLI or re-run flow in another process
    assert other.clusters() == ["rb"] and other.status("rb").job is JobState.IDLE
    other.preempt("rb")  # nothing to kill: not an error
    other.run("rb", JobSpec(name="rb", command="echo hi", workdir=tmp_path))
    assert wait_for(other, "rb", lambda s: s.job.finished, timeout=20).job is JobState.SUCCEEDED
    other.teardown("rb")
    assert other.clusters() == []
