"""Probes: training stalls, stale checkpoints, an unreachable control plane, sick GPUs."""

from __future__ import annotations

import json
from datetime import timedelta

from lifeboat_dr.core.detection.probes import (
    CheckpointFreshnessProbe,
    GpuHealthReadingProbe,
    Heartbeat,
    TrainingProgressProbe,
    file_heartbeat,
    store_heartbeat,
)
from lifeboat_dr.core.detection.provider import ProviderProbe
from lifeboat_dr.core.detection.signals import Status
from lifeboat_dr.providers.health.control_plane import FakeControlPlane
from lifeboat_dr.providers.health.fake import FakeGpu, FakeNvml
from lifeboat_dr.providers.health.nvml import NvmlHealth
from lifeboat_dr.providers.storage.local import LocalStore


def test_nccl_hang_heartbeat_thread_alive_but_step_stuck_is_a_stall(clock):
    beats = []
    probe = TrainingProgressProbe(lambda: beats[-1], timedelta(minutes=10), clock=clock)
    beats.append(Heartbeat(step=1200, at=clock()))
    first = probe.check()
    assert first.status is Status.ok
    previous = first
    for _ in range(11):  # the heartbeat thread keeps writing step 1200 every minute
        clock.advance(minutes=1)
        beats.append(Heartbeat(step=1200, at=clock()))
        previous = probe.check(previous)
    assert previous.status is Status.failing
    assert previous.summary == "no training progress at step 1200 for 11m"
    assert previous.evidence["last_progress_at"] == previous.evidence["since"] == "2026-03-01T12:00:00Z"


def test_a_moving_step_is_progress_even_when_slow(clock):
    beats = [Heartbeat(step=10, at=clock())]
    probe = TrainingProgressProbe(lambda: beats[-1], timedelta(minutes=10), clock=clock)
    previous = probe.check()
    for step in range(11, 20):
        clock.advance(minutes=3)
        beats.append(Heartbeat(step=step, at=clock()))
        previous = probe.check(previous)
        assert previous.status is Status.ok


def test_no_heartbeat_yet_does_not_vote(clock):
    reading = TrainingProgressProbe(lambda: None, timedelta(minutes=10), clock=clock).check()
    assert reading.status is Status.unknown


def test_heartbeat_file_with_step_and_time(tmp_path, clock):
    path = tmp_path / "heartbeat.json"
    path.write_text(json.dumps({"step": 42, "time": "2026-03-01T11:40:00Z"}))
    reading = TrainingProgressProbe(file_heartbeat(path), timedelta(minutes=10), clock=clock).check()
    assert reading.failing and reading.evidence["step"] == 42 and reading.evidence["quiet_for"] == "20m"


def test_heartbeat_object_in_a_store_uses_its_write_time_when_it_says_nothing(tmp_path):
    store = LocalStore(str(tmp_path))
    store.put("job/heartbeat", b"not json")
    hb = store_heartbeat(store, "job/heartbeat")()
    assert hb.step is None and hb.at == store.head("job/heartbeat").updated
    assert store_heartbeat(store, "job/missing")() is None


def test_checkpoint_older_than_cadence_times_factor_is_stale(clock):
    newest = clock() - timedelta(minutes=31)
    reading = CheckpointFreshnessProbe(lambda: newest, timedelta(minutes=10), 3.0, clock=clock).check()
    assert reading.failing
    assert reading.summary == "newest checkpoint is 31m old (limit 30m)"
    assert reading.evidence["since"] == "2026-03-01T11:59:00Z"


def test_recent_checkpoint_is_fresh_and_no_checkpoint_yet_is_unknown(clock):
    fresh = CheckpointFreshnessProbe(
        lambda: clock() - timedelta(minutes=5), timedelta(minutes=10), 3.0, clock=clock
    )
    none = CheckpointFreshnessProbe(lambda: None, timedelta(minutes=10), 3.0, clock=clock)
    assert (fresh.check().status, none.check().status) == (Status.ok, Status.unknown)


def test_one_failed_control_plane_call_is_weather_not_an_outage(clock):
    plane = FakeControlPlane(script=["down"])
    assert ProviderProbe(plane, clock=clock).check().status is Status.ok


def test_control_plane_mostly_unreachable_fails(clock):
    reading = ProviderProbe(FakeControlPlane(mode="down"), clock=clock).check()
    assert reading.failing and reading.summary == "fake/region-1 unreachable: 3/3 calls failed"
    assert reading.evidence["error_samples"] == ["connect timeout"]


def test_region_out_of_capacity_fails_as_no_capacity(clock):
    reading = ProviderProbe(FakeControlPlane(mode="no_capacity"), clock=clock).check()
    assert reading.failing and reading.evidence["capacity_errors"] == 3
    assert "no capacity" in reading.summary


def test_gpu_reading_no_driver_does_not_vote_and_xid_48_fails(clock):
    missing = FakeNvml([FakeGpu()])
    missing.fail("nvmlInit", 12)
    assert GpuHealthReadingProbe(NvmlHealth(nvml=missing), clock=clock).check().status is Status.unknown
    sick = FakeNvml([FakeGpu()])
    sick.inject_xid(0, 48)
    reading = GpuHealthReadingProbe(NvmlHealth(nvml=sick, host="gpu-017"), clock=clock).check()
    assert reading.failing and reading.source == "nvml@gpu-017" and reading.evidence["xids"] == [[0, 48]]
