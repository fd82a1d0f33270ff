"""Each GPU XID the watch reads is a `lifeboat.training.fault` event (kind `xid`), named as the
training guard names the faults it sees from inside the job; stored once however often it is sent."""

from __future__ import annotations

import anyio
import pytest

from lifeboat_dr.core.detection.events import xid_fault_events
from lifeboat_dr.core.detection.probes import GpuHealthReadingProbe
from lifeboat_dr.core.detection.signals import Reading, Status
from lifeboat_dr.providers.health.fake import FakeGpu, FakeNvml
from lifeboat_dr.providers.health.nvml import NvmlHealth
from tests.detect.test_automation import stored_events, wait_for


def _reading(clock, *xids):
    nv = FakeNvml([FakeGpu(), FakeGpu()])
    for gpu, xid in xids:
        nv.inject_xid(gpu, xid)
    return GpuHealthReadingProbe(NvmlHealth(nvml=nv, host="gpu-017"), clock=clock).check()


def test_every_xid_is_one_fault_event_naming_the_xid_the_gpu_and_the_host(clock):
    reading = _reading(clock, (1, 79), (0, 13))
    specs = xid_fault_events([reading], "guarded", "runbooks/guarded.yaml")

    assert [s.event for s in specs] == ["lifeboat.training.fault"] * 2
    app, fell = sorted((s.payload for s in specs), key=lambda p: p["xid"])
    assert (fell["kind"], fell["xid"], fell["gpu"], fell["host"], fell["critical"]) == (
        "xid",
        79,
        1,
        "gpu-017",
        True,
    )
    assert fell["detail"] == "XID 79 on GPU 1 of gpu-017: GPU has fallen off the bus"
    assert (app["xid"], app["critical"]) == (13, False)  # recorded, flagged as the application's own
    assert specs[0].resource["lifeboat.runbook.path"] == "runbooks/guarded.yaml"
    assert specs[0].resource["lifeboat.runbook"] == "guarded"  # what the recover automation matches
    assert {(s.resource["lifeboat.xid"], s.resource["lifeboat.critical"]) for s in specs} == {
        ("79", "true"),
        ("13", "false"),
    }


def test_a_reading_sent_twice_has_one_id_and_a_later_xid_another(clock):
    first = _reading(clock, (1, 79))
    (a,) = xid_fault_events([first], "guarded", None)
    (again,) = xid_fault_events([first], "guarded", None)
    clock.advance(minutes=1)
    (later,) = xid_fault_events([_reading(clock, (1, 79))], "guarded", None)
    assert a.id == again.id != later.id


def test_readings_without_xids_and_other_signals_make_no_fault_event(clock):
    healthy = _reading(clock)
    stalled = Reading(
        "training_progress", "heartbeat", Status.failing, clock(), "no step for 20m", {"xids": [[0, 79]]}
    )
    assert healthy.status is Status.ok and xid_fault_events([healthy, stalled], "guarded", None) == []


@pytest.mark.integration
def test_the_watch_emits_the_xid_it_read_to_prefect_once(prefect_server, guarded_path, tmp_path, monkeypatch):
    import lifeboat_dr.providers.health.nvml as nvml
    from lifeboat_dr.flows.watch import watch

    nv = FakeNvml([FakeGpu(), FakeGpu()])  # the fake driver under the real adapter, as the watch builds it
    monkeypatch.setattr(nvml, "NvmlHealth", lambda **kw: NvmlHealth(nvml=nv, host="gpu-017", **kw))
    monkeypatch.setenv("LIFEBOAT_STATE_DIR", str(tmp_path / "state"))
    nv.inject_xid(1, 79)
    watch(str(guarded_path))
    watch(str(guarded_path))  # the next tick: NVML has no new XID, nothing more is sent

    events = anyio.run(lambda: wait_for(lambda: stored_events("lifeboat.training.fault")))
    mine = [e for e in events if e.resource.get("lifeboat.host") == "gpu-017"]
    assert len(mine) == 1 and mine[0].payload["xid"] == 79 and mine[0].payload["kind"] == "xid"
