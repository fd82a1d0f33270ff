"""GPU health through NVML: the real no-driver path, and the fake driving the real adapter."""

from __future__ import annotations

import pynvml
import pytest

from lifeboat_dr.providers.health.base import NO_DRIVER
from lifeboat_dr.providers.health.fake import FakeGpu, FakeNvml
from lifeboat_dr.providers.health.nvml import NvmlHealth


def check(nv: FakeNvml, **kw):
    health = NvmlHealth(nvml=nv, host="gpu-017", **kw).check()
    assert nv.init_count == 0, "every nvmlInit is paired with nvmlShutdown"
    return health


def test_host_without_nvidia_driver_reports_it_instead_of_crashing():
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:  # pragma: no cover - only on a GPU host
        pynvml.nvmlShutdown()
        pytest.skip("this host has an NVIDIA driver")
    health = NvmlHealth().check()
    assert (health.state, health.message) == ("no_driver", NO_DRIVER)
    assert health.gpus == ()


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED])
def test_missing_library_or_unloaded_driver_both_mean_no_driver(code):
    nv = FakeNvml([FakeGpu()])
    nv.fail("nvmlInit", code)
    assert check(nv).message == NO_DRIVER


def test_driver_library_version_mismatch_is_unavailable_not_no_driver():
    nv = FakeNvml([FakeGpu()])
    nv.fail("nvmlInit", pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH)
    health = check(nv)
    assert health.state == "unavailable"
    assert "NVML error 18" in health.message


def test_eight_healthy_h100s_pass_with_their_driver_version():
    health = check(FakeNvml([FakeGpu() for _ in range(8)], driver="550.54.15"))
    assert (health.state, health.driver_version, len(health.gpus)) == ("ok", "550.54.15", 8)
    assert health.gpus[3].nvlinks_active == tuple(range(18)) and health.problems == ()


def test_xid_79_gpu_fallen_off_the_bus_while_listening_degrades_the_host():
    nv = FakeNvml([FakeGpu(), FakeGpu()])
    nv.inject_xid(1, 79)
    health = check(nv)
    assert health.state == "degraded"
    assert health.problems == ("GPU 1: XID 79 (GPU has fallen off the bus)",)
    assert nv.calls.count("nvmlEventSetFree") == 1


def test_application_xid_13_is_recorded_but_not_a_problem():
    nv = FakeNvml([FakeGpu()])
    nv.inject_xid(0, 13)
    health = check(nv)
    assert health.state == "ok"
    assert [(x.xid, x.critical) for x in health.xid_events] == [(13, False)]


def test_xid_listening_can_be_skipped():
    nv = FakeNvml([FakeGpu()])
    nv.inject_xid(0, 48)
    assert check(nv, xid_wait_ms=None).state == "ok"
    assert "nvmlEventSetCreate" not in nv.calls


def test_uncorrectable_ecc_and_pending_row_remap_are_problems():
    nv = FakeNvml([FakeGpu(ecc_uncorrectable=3, remapped_rows=(2, 1, 1, 0)), FakeGpu()])
    health = check(nv)
    assert health.problems == (
        "GPU 0: 3 uncorrectable ECC error(s)",
        "GPU 0: row remap pending (needs reset)",
    )


def test_failed_row_remap_and_pending_page_retirement_are_problems():
    health = check(FakeNvml([FakeGpu(remapped_rows=(0, 4, 0, 1), retire_pending=True, retired_pages=[7, 9])]))
    assert health.gpus[0].retired_pages == 2
    assert health.problems == (
        "GPU 0: row remapping failed",
        "GPU 0: page retirement pending (needs reboot)",
    )


def test_gpu_lost_reports_that_gpu_and_keeps_checking_the_others():
    nv = FakeNvml([FakeGpu(), FakeGpu(lost=True), FakeGpu(ecc_uncorrectable=1)])
    health = check(nv)
    assert health.gpus[1].lost and health.gpus[2].ecc_uncorrectable == 1
    assert "GPU 1: lost (fallen off the bus)" in health.problems


def test_gpu_lost_in_the_middle_of_the_queries_stops_asking_it():
    nv = FakeNvml([FakeGpu()])
    nv.fail("nvmlDeviceGetTotalEccErrors", pynvml.NVML_ERROR_GPU_IS_LOST, gpu=0)
    health = check(nv)
    assert health.gpus[0].lost
    assert "nvmlDeviceGetNvLinkState" not in nv.calls


def test_queries_an_older_gpu_does_not_support_are_unknown_not_problems():
    nv = FakeNvml([FakeGpu(nvlinks=[])])
    nv.fail("nvmlDeviceGetRemappedRows", pynvml.NVML_ERROR_NOT_SUPPORTED)
    nv.fail("nvmlDeviceRegisterEvents", pynvml.NVML_ERROR_NOT_SUPPORTED)
    health = check(nv)
    assert health.state == "ok"
    assert health.gpus[0].remap_pending is None and health.gpus[0].notes == ()


def test_missing_permission_is_kept_as_evidence():
    nv = FakeNvml([FakeGpu()])
    nv.fail("nvmlDeviceGetRetiredPages_v2", pynvml.NVML_ERROR_NO_PERMISSION, gpu=0)
    notes = check(nv).gpus[0].notes
    assert notes == ("nvmlDeviceGetRetiredPages_v2: Insufficient Permissions (NVML error 4)",)


def test_nvlinks_down_beside_active_ones_are_a_problem():
    health = check(FakeNvml([FakeGpu(nvlinks=[True] * 16 + [False, False])]))
    assert health.problems == ("GPU 0: NVLink(s) 16, 17 down",)


def test_fewer_gpus_than_the_node_should_have_is_a_problem():
    health = check(FakeNvml([FakeGpu() for _ in range(7)]), expected_gpus=8)
    assert health.problems == ("7 GPU(s) visible, 8 expected",)


def test_device_count_failing_after_init_is_unavailable_and_still_shuts_down():
    nv = FakeNvml([FakeGpu()])
    nv.fail("nvmlDeviceGetCount", pynvml.NVML_ERROR_UNKNOWN)
    health = check(nv)
    assert health.state == "unavailable" and "NVML error 999" in health.message


def test_fake_refuses_calls_before_init_like_the_real_library():
    nv = FakeNvml([FakeGpu()])
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        nv.nvmlDeviceGetCount()


def test_fake_raises_the_real_error_subclasses():
    nv = FakeNvml([FakeGpu()])
    nv.nvmlInit()
    nv.fail("nvmlDeviceGetUUID", pynvml.NVML_ERROR_GPU_IS_LOST)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(0))
    es = nv.nvmlEventSetCreate()
    with pytest.raises(pynvml.NVMLError_Timeout):
        nv.nvmlEventSetWait_v2(es, 0)
