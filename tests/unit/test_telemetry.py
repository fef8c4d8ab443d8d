"""Unit tests for pytest_gpuperf.measure.telemetry (NVML replaced by a fake ``pynvml`` module) and for
pytest_gpuperf.verdict.compare.downgrade_throttled.

No GPU or NVIDIA driver is needed: every test installs its own ``pynvml`` in ``sys.modules``
(a fake, or None for "not installed"), so the real nvidia-ml-py is never called.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import pytest_gpuperf.measure.telemetry as telemetry
from pytest_gpuperf.verdict.compare import Comparison, Verdict, downgrade_throttled
from pytest_gpuperf.reporting.messages import comparison_note
from pytest_gpuperf.measure.telemetry import (
    CpuSampler,
    GpuSampler,
    Sampler,
    cpu_info,
    gpu_info,
    handle_for,
    nvml_status,
    other_processes,
    sampler_for,
    summarize,
)
from pytest_gpuperf.verdict.machine import throttle_verdict

MAX_SM_MHZ = 1980
LOW_SM_MHZ = 1200  # < 75% of 1980 (1485)
HW_THERMAL = 0x40
PERIOD = 50  # the fake's reasons/clock pattern repeats every PERIOD reads
THROTTLED_PER_PERIOD = 17  # 17/50 = 34%
FAST = 0.001  # sampler interval for tests (s)
HANDLE = "handle-0"


class NVMLError(Exception):
    """What pynvml raises (e.g. NVMLError_NotSupported)."""


class FakeNVML:
    """A stand-in for the ``pynvml`` module of an H100-like GPU.

    ``throttled``: every PERIOD reads, the first THROTTLED_PER_PERIOD report HW thermal and a
    low SM clock. ``fail``: names of functions that raise NVMLError (a call a driver does not
    support). ``missing``: names the module does not have at all (an old nvidia-ml-py).
    """

    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, *, throttled: bool = False, fail: set[str] = frozenset(),
                 missing: set[str] = frozenset(), processes: list[Any] | None = None) -> None:
        self.throttled = throttled
        self.fail = set(fail)
        self.missing = set(missing)
        self.processes = processes or []
        self.calls: dict[str, int] = {}
        self.reads = 0  # reason reads (either call)
        self.clock_reads = 0

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml"):
            if name in object.__getattribute__(self, "missing"):
                raise AttributeError(name)
            fn = object.__getattribute__(self, name)
            calls = object.__getattribute__(self, "calls")
            fail = object.__getattribute__(self, "fail")

            def wrapped(*args: Any) -> Any:
                calls[name] = calls.get(name, 0) + 1
                if name in fail:
                    raise NVMLError(f"{name}: Not Supported")
                return fn(*args)

            return wrapped
        return object.__getattribute__(self, name)

    # --- pattern -------------------------------------------------------------------------
    def _hot(self, i: int) -> bool:
        return self.throttled and i % PERIOD < THROTTLED_PER_PERIOD

    # --- system --------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"550.54.15"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12040

    # --- device: static ------------------------------------------------------------------
    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return f"handle-{index}"

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str) -> str:
        return f"pci-{bus_id}"

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        return f"uuid-{uuid}"

    def nvmlDeviceGetName(self, h: Any) -> bytes:
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        return "GPU-01234567-89ab-cdef-0123-456789abcdef"

    def nvmlDeviceGetCudaComputeCapability(self, h: Any) -> tuple[int, int]:
        return (9, 0)

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:
        return SimpleNamespace(total=85_520_809_984, free=85_000_000_000, used=520_809_984)

    def nvmlDeviceGetMaxClockInfo(self, h: Any, kind: int) -> int:
        return MAX_SM_MHZ if kind == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetEnforcedPowerLimit(self, h: Any) -> int:
        return 700_000  # mW

    def nvmlDeviceGetPersistenceMode(self, h: Any) -> int:
        return 1

    def nvmlDeviceGetMigMode(self, h: Any) -> list[int]:
        return [0, 0]

    def nvmlDeviceGetEccMode(self, h: Any) -> list[int]:
        return [1, 1]

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: Any) -> int:
        return 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: Any) -> int:
        return 16

    # --- device: dynamic -----------------------------------------------------------------
    def _reasons(self) -> int:
        i = self.reads
        self.reads += 1
        return HW_THERMAL if self._hot(i) else 0

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Any) -> int:
        return self._reasons()

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: Any) -> int:
        return self._reasons()

    def nvmlDeviceGetClockInfo(self, h: Any, kind: int) -> int:
        if kind != self.NVML_CLOCK_SM:
            return 2619
        i = self.clock_reads
        self.clock_reads += 1
        return LOW_SM_MHZ if self._hot(i) else MAX_SM_MHZ

    def nvmlDeviceGetTemperature(self, h: Any, sensor: int) -> int:
        return 71

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:
        return 350_000  # mW

    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:
        return SimpleNamespace(gpu=98, memory=40)

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[Any]:
        return list(self.processes)


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch):
    """Install a FakeNVML built with the given keywords as ``pynvml``."""

    def install(**kw: Any) -> FakeNVML:
        fake = FakeNVML(**kw)
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        return fake

    return install


@pytest.fixture
def no_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """``import pynvml`` raises ImportError (nvidia-ml-py not installed)."""
    monkeypatch.setitem(sys.modules, "pynvml", None)


def collect(sampler: Sampler, n: int, timeout: float = 5.0) -> None:
    """Inside a with-block: wait until the sampler has at least n samples (or timeout)."""
    deadline = time.monotonic() + timeout
    while len(sampler.samples) < n and time.monotonic() < deadline:
        time.sleep(0.002)


def sample(i: int, *, reasons: int | None = 0, clock: float | None = MAX_SM_MHZ, temp: float | None = 60,
           power: float | None = 300.0, gpu: float | None = 90, mem: float | None = 30) -> dict[str, Any]:
    return {"t": float(i), "sm_clock_mhz": clock, "reasons": reasons, "temperature_c": temp,
            "power_w": power, "gpu_util_pct": gpu, "memory_util_pct": mem}


# --------------------------------------------------------------------------------------------
# summarize / throttle_verdict (pure)
# --------------------------------------------------------------------------------------------


def throttled_samples(n: int = PERIOD) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        hot = i % PERIOD < THROTTLED_PER_PERIOD
        out.append(sample(i, reasons=HW_THERMAL if hot else 0, clock=LOW_SM_MHZ if hot else MAX_SM_MHZ,
                          temp=80 if hot else 70, power=300.0 + i, gpu=90 + i % 2, mem=40))
    return out


def test_summarize_throttled_hand_built():
    s = summarize(throttled_samples(), MAX_SM_MHZ)
    assert s is not None
    assert s["samples"] == 50
    assert s["reasons"] == {"HW thermal": pytest.approx(0.34)}
    assert s["throttle_share"] == pytest.approx(0.34)
    assert s["low_clock_share"] == pytest.approx(0.34)
    assert s["sm_clock_min_mhz"] == LOW_SM_MHZ
    assert s["sm_clock_median_mhz"] == MAX_SM_MHZ
    assert s["sm_clock_pct_of_max"] == pytest.approx(100.0)
    assert s["gpu_util_mean_pct"] == pytest.approx(90.5)
    assert s["memory_util_mean_pct"] == pytest.approx(40.0)
    assert s["temperature_max_c"] == 80
    assert s["power_mean_w"] == pytest.approx(300.0 + 24.5)
    assert throttle_verdict(s) == "throttled: HW thermal 34% of samples"


def test_summarize_median_and_pct_of_max():
    clocks = [1000, 1500, 1600, 1700, 1980]
    s = summarize([sample(i, clock=c) for i, c in enumerate(clocks)], 2000)
    assert s["sm_clock_min_mhz"] == 1000
    assert s["sm_clock_median_mhz"] == 1600
    assert s["sm_clock_pct_of_max"] == pytest.approx(80.0)
    assert s["low_clock_share"] == pytest.approx(0.2)  # only 1000 < 1500


def test_summarize_unthrottled_run_has_no_verdict():
    s = summarize([sample(i) for i in range(40)], MAX_SM_MHZ)
    assert s["reasons"] == {}
    assert s["throttle_share"] == 0.0
    assert s["low_clock_share"] == 0.0
    assert throttle_verdict(s) is None


def test_summarize_non_throttle_reasons_are_reported_but_do_not_throttle():
    # GPU idle (0x1) and SW power cap (0x4) are reasons, not throttle reasons
    s = summarize([sample(i, reasons=0x1 | 0x4) for i in range(10)], MAX_SM_MHZ)
    assert s["reasons"] == {"GPU idle": 1.0, "SW power cap": 1.0}
    assert s["throttle_share"] == 0.0
    assert throttle_verdict(s) is None


def test_summarize_none_fields_are_skipped():
    samples = [sample(0, reasons=None, clock=None, temp=None, power=None, gpu=None, mem=None)] * 3
    s = summarize(samples, MAX_SM_MHZ)
    assert s["samples"] == 3
    for key in ("sm_clock_min_mhz", "sm_clock_median_mhz", "sm_clock_pct_of_max", "low_clock_share",
                "throttle_share", "gpu_util_mean_pct", "memory_util_mean_pct", "temperature_max_c",
                "power_mean_w"):
        assert s[key] is None, key
    assert s["reasons"] == {}
    assert throttle_verdict(s) is None


def test_summarize_without_max_clock_has_no_clock_shares():
    s = summarize([sample(i, clock=100) for i in range(5)], None)
    assert s["sm_clock_median_mhz"] == 100
    assert s["sm_clock_pct_of_max"] is None
    assert s["low_clock_share"] is None


def test_summarize_empty_is_none():
    assert summarize([], MAX_SM_MHZ) is None
    assert throttle_verdict(None) is None
    assert throttle_verdict({}) is None


def test_low_clock_rule_alone_triggers_only_without_reasons():
    # the reasons could not be read; the SM clock sat under 75% of max in 20% of samples
    samples = [sample(i, reasons=None, clock=LOW_SM_MHZ if i < 4 else MAX_SM_MHZ) for i in range(20)]
    s = summarize(samples, MAX_SM_MHZ)
    assert s["throttle_share"] is None
    assert s["low_clock_share"] == pytest.approx(0.2)
    assert throttle_verdict(s) == "throttled: SM clock below 75% of max in 20% of samples"


def test_a_power_capped_gpu_at_a_low_clock_is_not_throttled():
    # Defect 12: a T4/L4 runs under its power cap ("SW power cap") below 75% of its max clock on every
    # run; with the reasons read and none of the throttle reasons active, that is its normal state.
    samples = [sample(i, reasons=0x4, clock=LOW_SM_MHZ) for i in range(20)]
    s = summarize(samples, MAX_SM_MHZ)
    assert s["low_clock_share"] == 1.0 and s["throttle_share"] == 0.0
    assert throttle_verdict(s) is None


def test_exactly_ten_percent_does_not_trigger():
    low = [sample(i, reasons=None, clock=LOW_SM_MHZ if i < 3 else MAX_SM_MHZ) for i in range(30)]
    s = summarize(low, MAX_SM_MHZ)
    assert s["low_clock_share"] == pytest.approx(0.1)
    assert throttle_verdict(s) is None
    hot = [sample(i, reasons=HW_THERMAL if i < 3 else 0) for i in range(30)]
    s = summarize(hot, MAX_SM_MHZ)
    assert s["throttle_share"] == pytest.approx(0.1)
    assert throttle_verdict(s) is None
    # one more sample over the line triggers
    s = summarize([sample(i, reasons=HW_THERMAL if i < 4 else 0) for i in range(30)], MAX_SM_MHZ)
    assert throttle_verdict(s) == "throttled: HW thermal 13% of samples"


def test_clock_at_exactly_75_percent_is_not_low():
    s = summarize([sample(i, clock=0.75 * 2000) for i in range(10)], 2000)
    assert s["low_clock_share"] == 0.0


def test_throttle_verdict_names_the_worst_reason():
    tele = {"reasons": {"HW thermal": 0.2, "HW power brake": 0.6, "SW thermal": 0.15}, "low_clock_share": 0.9}
    assert throttle_verdict(tele) == "throttled: HW power brake 60% of samples"


# --------------------------------------------------------------------------------------------
# Sampler with a fake NVML
# --------------------------------------------------------------------------------------------


def test_sampler_throttled_run(fake_nvml):
    fake = fake_nvml(throttled=True)
    s = GpuSampler(HANDLE, interval_s=FAST)
    s.max_sm_clock_mhz = MAX_SM_MHZ
    with s:
        collect(s, 2 * PERIOD)
    n = len(s.samples)
    assert n >= 2 * PERIOD
    assert s.error is None
    # what was collected follows the fake's pattern read by read
    hot = [i % PERIOD < THROTTLED_PER_PERIOD for i in range(n)]
    assert [x["reasons"] for x in s.samples] == [HW_THERMAL if h else 0 for h in hot]
    assert [x["sm_clock_mhz"] for x in s.samples] == [LOW_SM_MHZ if h else MAX_SM_MHZ for h in hot]
    share = sum(hot) / n

    summary = s.summary()
    assert summary["samples"] == n
    assert summary["reasons"] == {"HW thermal": pytest.approx(share)}
    assert summary["throttle_share"] == pytest.approx(share)
    assert summary["low_clock_share"] == pytest.approx(share)
    assert summary["sm_clock_min_mhz"] == LOW_SM_MHZ
    assert summary["sm_clock_median_mhz"] == MAX_SM_MHZ
    assert summary["sm_clock_pct_of_max"] == pytest.approx(100.0)
    assert summary["gpu_util_mean_pct"] == pytest.approx(98.0)
    assert summary["memory_util_mean_pct"] == pytest.approx(40.0)
    assert summary["temperature_max_c"] == 71
    assert summary["power_mean_w"] == pytest.approx(350.0)  # from 350_000 mW
    assert "sampler_error" not in summary
    assert 0.339 < share < 0.44  # ~34%: 34% on whole periods, at most 51/117 in between
    assert throttle_verdict(summary) == f"throttled: HW thermal {share * 100:.0f}% of samples"

    # exactly the first PERIOD samples: 34%
    first = summarize(s.samples[:PERIOD], MAX_SM_MHZ)
    assert first["reasons"] == {"HW thermal": pytest.approx(0.34)}
    assert throttle_verdict(first) == "throttled: HW thermal 34% of samples"


def test_sampler_unthrottled_run(fake_nvml):
    fake_nvml(throttled=False)
    s = GpuSampler(HANDLE, interval_s=FAST)
    s.max_sm_clock_mhz = MAX_SM_MHZ
    with s:
        collect(s, 10)
    summary = s.summary()
    assert summary["samples"] >= 10
    assert summary["reasons"] == {}
    assert summary["low_clock_share"] == 0.0
    assert throttle_verdict(summary) is None


def test_sample_fields(fake_nvml):
    fake_nvml()
    s = Sampler(HANDLE, interval_s=FAST)
    with s:
        collect(s, 3)
    x = s.samples[0]
    assert set(x) == {"t", "sm_clock_mhz", "reasons", "temperature_c", "power_w", "gpu_util_pct",
                      "memory_util_pct"}
    assert x["sm_clock_mhz"] == MAX_SM_MHZ
    assert x["reasons"] == 0
    assert x["temperature_c"] == 71
    assert x["power_w"] == pytest.approx(350.0)
    assert (x["gpu_util_pct"], x["memory_util_pct"]) == (98, 40)
    ts = [y["t"] for y in s.samples]
    assert ts == sorted(ts)


def test_sampler_field_error_is_swallowed_per_field(fake_nvml):
    fake_nvml(fail={"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetPowerUsage"})
    s = Sampler(HANDLE, interval_s=FAST)
    with s:
        collect(s, 5)
    assert s.error is None
    assert len(s.samples) >= 5
    for x in s.samples:
        assert x["gpu_util_pct"] is None and x["memory_util_pct"] is None and x["power_w"] is None
        assert x["sm_clock_mhz"] == MAX_SM_MHZ and x["temperature_c"] == 71 and x["reasons"] == 0


def test_old_driver_raising_event_reasons_falls_back(fake_nvml):
    fake = fake_nvml(throttled=True, fail={"nvmlDeviceGetCurrentClocksEventReasons"})
    s = Sampler(HANDLE, interval_s=FAST)
    with s:
        collect(s, 20)
    assert s.error is None
    n = len(s.samples)
    assert [x["reasons"] for x in s.samples] == [
        HW_THERMAL if i % PERIOD < THROTTLED_PER_PERIOD else 0 for i in range(n)
    ]
    # the new call was tried once, then the old one used for every read
    assert fake.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 1
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == n


def test_old_pynvml_without_event_reasons_falls_back(fake_nvml):
    fake_nvml(throttled=True, missing={"nvmlDeviceGetCurrentClocksEventReasons"})
    s = Sampler(HANDLE, interval_s=FAST)
    with s:
        collect(s, 20)
    assert s.error is None
    assert s.samples[0]["reasons"] == HW_THERMAL  # the first read is in the throttled part


def test_reasons_none_when_neither_call_works(fake_nvml):
    fake = fake_nvml(fail={"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"})
    s = Sampler(HANDLE, interval_s=FAST)
    with s:
        collect(s, 5)
    assert s.error is None
    assert all(x["reasons"] is None for x in s.samples)
    assert all(x["sm_clock_mhz"] == MAX_SM_MHZ for x in s.samples)
    # each call tried once, then given up
    assert fake.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 1
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 1


def test_sampler_exception_is_recorded_and_does_not_affect_the_block(fake_nvml, monkeypatch):
    fake_nvml()
    original = Sampler._read
    reads = {"n": 0}

    def flaky(self, nv, reasons):
        reads["n"] += 1
        if reads["n"] > 3:
            raise RuntimeError("NVML went away")
        return original(self, nv, reasons)

    monkeypatch.setattr(Sampler, "_read", flaky)
    s = GpuSampler(HANDLE, interval_s=FAST)
    s.max_sm_clock_mhz = MAX_SM_MHZ
    work_done = False
    with s:
        thread = s._thread
        assert isinstance(thread, threading.Thread)
        assert thread.daemon
        thread.join(timeout=5.0)
        assert not thread.is_alive()  # the thread ended by itself
        work_done = sum(range(1000)) == 499500
    assert work_done
    assert s._thread is None
    assert s.error == "RuntimeError: NVML went away"
    assert len(s.samples) == 3
    summary = s.summary()
    assert summary["samples"] == 3
    assert summary["sampler_error"] == "RuntimeError: NVML went away"


def test_sampler_read_raising_at_once(fake_nvml, monkeypatch):
    fake_nvml()

    def boom(self, nv, reasons):
        raise ValueError("boom")

    monkeypatch.setattr(Sampler, "_read", boom)
    s = Sampler(HANDLE, interval_s=FAST)
    result = None
    with s:
        thread = s._thread
        assert thread is not None and thread.daemon
        result = 42
    assert s.__exit__(None, None, None) is None  # idempotent, returns normally
    assert result == 42
    assert not thread.is_alive()
    assert s.error == "ValueError: boom"
    assert s.samples == []


def test_sampler_stops_when_the_block_raises(fake_nvml):
    fake_nvml()
    s = Sampler(HANDLE, interval_s=FAST)
    with pytest.raises(KeyError):
        with s:
            thread = s._thread
            collect(s, 2)
            raise KeyError("benchmark failed")
    assert not thread.is_alive()
    assert s._thread is None
    n = len(s.samples)
    time.sleep(0.01)
    assert len(s.samples) == n  # nothing collected after exit


def test_sampler_thread_is_daemon_and_joined(fake_nvml):
    fake_nvml()
    s = Sampler(HANDLE, interval_s=FAST)
    with s:
        thread = s._thread
        assert thread is not None and thread.daemon and thread.is_alive()
        assert thread.name == "gpuperf-nvml"
    assert not thread.is_alive()
    assert s._thread is None
    assert s.error is None


def test_sampler_stays_bounded(fake_nvml, monkeypatch):
    fake_nvml()
    monkeypatch.setattr(telemetry, "MAX_SAMPLES", 16)
    s = Sampler(HANDLE, interval_s=FAST)
    seen_max = 0
    with s:
        deadline = time.monotonic() + 5.0
        # wait until at least two thinnings happened (the fake counts the reads)
        fake = sys.modules["pynvml"]
        while fake.clock_reads < 64 and time.monotonic() < deadline:
            seen_max = max(seen_max, len(s.samples))
            time.sleep(0.001)
    assert fake.clock_reads >= 64
    assert len(s.samples) < 16
    assert seen_max <= 16  # (16 only between the append and the thinning)
    ts = [x["t"] for x in s.samples]
    assert ts == sorted(ts)  # thinning keeps time order


def test_sampler_without_handle_collects_nothing(fake_nvml):
    fake = fake_nvml()
    s = Sampler(None, interval_s=FAST)
    with s:
        assert s._thread is None
    assert s.samples == []
    assert fake.reads == 0


# --------------------------------------------------------------------------------------------
# Missing or broken NVML
# --------------------------------------------------------------------------------------------


def test_missing_library(no_nvml):
    status = nvml_status()
    assert status is not None and "nvidia-ml-py" in status
    assert gpu_info(HANDLE) is None
    assert other_processes(HANDLE) is None
    assert handle_for(0) is None
    s = GpuSampler(HANDLE, interval_s=FAST)
    s.max_sm_clock_mhz = MAX_SM_MHZ
    with s:
        assert s._thread is None
    assert s.samples == []
    assert s.error is None
    assert s.summary() is None
    assert summarize([], None) is None


def test_missing_library_sampler_for_cuda_device(no_nvml):
    s = sampler_for(torch.device("cuda", 0))
    assert isinstance(s, GpuSampler)
    assert s.handle is None and s.max_sm_clock_mhz is None
    with s:
        pass
    assert s.summary() is None


def test_nvml_init_raising(monkeypatch):
    fake = FakeNVML()

    def init() -> None:
        raise NVMLError("Driver Not Loaded")

    fake.nvmlInit = init  # instance attribute: FakeNVML.__getattribute__ still wraps it
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    status = nvml_status()
    assert status == "NVML unavailable (NVMLError: Driver Not Loaded); GPU telemetry is off"
    assert gpu_info(HANDLE) is None
    assert other_processes(HANDLE) is None
    assert handle_for(0) is None
    s = Sampler(HANDLE, interval_s=FAST)
    with s:
        assert s._thread is None
    assert s.samples == []


def test_nvml_status_none_when_working(fake_nvml):
    fake_nvml()
    assert nvml_status() is None


# --------------------------------------------------------------------------------------------
# gpu_info, handle_for, other_processes
# --------------------------------------------------------------------------------------------


def test_gpu_info_values(fake_nvml):
    fake_nvml()
    info = gpu_info(HANDLE)
    assert info == {
        "name": "NVIDIA H100 80GB HBM3",  # bytes decoded
        "uuid": "GPU-01234567-89ab-cdef-0123-456789abcdef",
        "driver_version": "550.54.15",
        "cuda_driver_version": "12.4",
        "compute_capability": "9.0",
        "memory_total_bytes": 85_520_809_984,
        "max_sm_clock_mhz": MAX_SM_MHZ,
        "max_memory_clock_mhz": 2619,
        "power_limit_w": pytest.approx(700.0),
        "persistence_mode": 1,
        "mig_mode": 0,
        "ecc_mode": 1,
        "pcie_generation": 5,
        "pcie_width": 16,
    }


def test_gpu_info_unsupported_call_leaves_only_that_field_none(fake_nvml):
    fake_nvml(fail={"nvmlDeviceGetEccMode", "nvmlDeviceGetMigMode", "nvmlSystemGetCudaDriverVersion",
                    "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetEnforcedPowerLimit"})
    info = gpu_info(HANDLE)
    none = {"ecc_mode", "mig_mode", "cuda_driver_version", "memory_total_bytes", "power_limit_w"}
    assert {k for k, v in info.items() if v is None} == none
    assert info["name"] == "NVIDIA H100 80GB HBM3"
    assert info["compute_capability"] == "9.0"
    assert info["max_sm_clock_mhz"] == MAX_SM_MHZ


@pytest.mark.parametrize("name", [
    "nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlSystemGetDriverVersion",
    "nvmlDeviceGetCudaComputeCapability", "nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetPersistenceMode",
    "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth",
])
def test_gpu_info_each_unsupported_call(fake_nvml, name):
    fake_nvml()
    full = gpu_info(HANDLE)
    assert all(v is not None for v in full.values())
    fake_nvml(fail={name})
    info = gpu_info(HANDLE)
    nones = {k for k, v in info.items() if v is None}
    # MaxClockInfo covers both the SM and the memory clock; every other call one field
    assert len(nones) == (2 if name == "nvmlDeviceGetMaxClockInfo" else 1)
    assert {k: v for k, v in info.items() if k not in nones} == {k: v for k, v in full.items() if k not in nones}


def test_gpu_info_without_handle(fake_nvml):
    fake_nvml()
    assert gpu_info(None) is None
    assert other_processes(None) is None


def test_handle_for_falls_back_to_index_without_cuda(fake_nvml):
    # CPU-only torch cannot tell the PCI bus id: the handle comes by index
    fake = fake_nvml()
    assert handle_for(3) == "handle-3"
    assert "nvmlDeviceGetHandleByPciBusId" not in fake.calls


def test_handle_for_by_pci_bus_id(fake_nvml, monkeypatch):
    fake_nvml()
    props = SimpleNamespace(pci_domain_id=0, pci_bus_id=0x1B, pci_device_id=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    assert handle_for(0) == "pci-00000000:1B:00.0"


def test_handle_for_by_uuid_first(fake_nvml, monkeypatch):
    # Defect 6: under CUDA_VISIBLE_DEVICES=3 CUDA's device 0 is NVML's device 3: only the UUID (or
    # the PCI bus id) names it; the index would read another GPU's telemetry.
    fake = fake_nvml()
    props = SimpleNamespace(uuid="58d5a7e1-0c3c-4f5e-9d2a-1b2c3d4e5f60", pci_domain_id=0, pci_bus_id=0x1B,
                            pci_device_id=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    assert handle_for(0) == "uuid-GPU-58d5a7e1-0c3c-4f5e-9d2a-1b2c3d4e5f60"
    assert "nvmlDeviceGetHandleByIndex" not in fake.calls
    fake = fake_nvml(fail={"nvmlDeviceGetHandleByUUID"})
    assert handle_for(0) == "pci-00000000:1B:00.0"
    fake = fake_nvml(missing={"nvmlDeviceGetHandleByUUID"})  # an old nvidia-ml-py
    assert handle_for(0) == "pci-00000000:1B:00.0"


def test_nvml_uuid_forms():
    from pytest_gpuperf.measure.telemetry import nvml_uuid

    assert nvml_uuid("58d5a7e1-0c3c") == "GPU-58d5a7e1-0c3c"
    assert nvml_uuid("MIG-abc") == "MIG-abc" and nvml_uuid("GPU-abc") == "GPU-abc"
    assert nvml_uuid(None) is None and nvml_uuid("00000000-0000-0000-0000-000000000000") is None


def test_handle_for_pci_failure_falls_back_to_index(fake_nvml, monkeypatch):
    fake_nvml(fail={"nvmlDeviceGetHandleByPciBusId"})
    props = SimpleNamespace(pci_domain_id=0, pci_bus_id=0x1B, pci_device_id=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    assert handle_for(1) == "handle-1"


def test_other_processes_lists_others_and_excludes_own_pid(fake_nvml):
    me = 4242
    fake_nvml(processes=[
        SimpleNamespace(pid=me, usedGpuMemory=1 << 30),
        SimpleNamespace(pid=1234, usedGpuMemory=512 << 20),
        SimpleNamespace(pid=5678, usedGpuMemory=None),  # NVML reports None when it cannot tell
    ])
    assert other_processes(HANDLE, own_pid=me) == [
        {"pid": 1234, "used_memory_bytes": 512 << 20},
        {"pid": 5678, "used_memory_bytes": None},
    ]


def test_other_processes_defaults_to_this_process(fake_nvml):
    fake_nvml(processes=[SimpleNamespace(pid=os.getpid(), usedGpuMemory=1)])
    assert other_processes(HANDLE) == []


def test_other_processes_unsupported_is_none(fake_nvml):
    fake_nvml(fail={"nvmlDeviceGetComputeRunningProcesses"})
    assert other_processes(HANDLE) is None


# --------------------------------------------------------------------------------------------
# sampler_for
# --------------------------------------------------------------------------------------------


def test_sampler_for_cpu_is_cpu_sampler():
    assert isinstance(sampler_for(torch.device("cpu")), CpuSampler)


def test_sampler_for_cuda_with_fake_nvml(fake_nvml, monkeypatch):
    fake_nvml(throttled=True)
    s = sampler_for(torch.device("cuda", 2))
    assert isinstance(s, GpuSampler)
    assert s.handle == "handle-2"
    assert s.max_sm_clock_mhz == MAX_SM_MHZ
    s.interval_s = FAST
    with s:
        collect(s, 10)
    summary = s.summary()
    assert summary["samples"] == len(s.samples) >= 10
    assert summary["sm_clock_min_mhz"] == LOW_SM_MHZ


# --------------------------------------------------------------------------------------------
# CPU
# --------------------------------------------------------------------------------------------


def test_cpu_info_keys_and_types():
    info = cpu_info()
    assert set(info) == {"governor", "cur_freq_mhz", "max_freq_mhz", "load_average"}
    assert info["governor"] is None or isinstance(info["governor"], str)
    for key in ("cur_freq_mhz", "max_freq_mhz"):
        assert info[key] is None or (isinstance(info[key], float) and info[key] > 0)
    la = info["load_average"]
    assert la is None or (len(la) == 3 and all(x >= 0 for x in la))


def test_cpu_info_nothing_readable(monkeypatch):
    monkeypatch.setattr(telemetry, "_read", lambda path: None)
    info = cpu_info()
    assert info["governor"] is None and info["cur_freq_mhz"] is None and info["max_freq_mhz"] is None


def test_cpu_info_units(monkeypatch):
    files = {
        "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor": "performance",
        "/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq": "2400000",  # kHz
        "/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq": "3500000",
    }
    monkeypatch.setattr(telemetry, "_read", files.get)
    info = cpu_info()
    assert info["governor"] == "performance"
    assert info["cur_freq_mhz"] == pytest.approx(2400.0)
    assert info["max_freq_mhz"] == pytest.approx(3500.0)


def test_cpu_info_falls_back_to_proc_cpuinfo(monkeypatch):
    files = {"/proc/cpuinfo": "processor\t: 0\nmodel name\t: X\ncpu MHz\t\t: 2994.372\n"}
    monkeypatch.setattr(telemetry, "_read", files.get)
    info = cpu_info()
    assert info["cur_freq_mhz"] == pytest.approx(2994.372)
    assert info["governor"] is None and info["max_freq_mhz"] is None


def test_cpu_info_without_load_average(monkeypatch):
    def no_load():
        raise OSError("unavailable")

    monkeypatch.setattr(telemetry.os, "getloadavg", no_load)
    assert cpu_info()["load_average"] is None


def test_cpu_sampler_summary():
    s = CpuSampler()
    assert s.summary() is None
    with s:
        pass
    summary = s.summary()
    assert set(summary) == {"cur_freq_mhz", "load_average"}
    assert s.error is None
    assert len(s.samples) == 1


# --------------------------------------------------------------------------------------------
# downgrade_throttled
# --------------------------------------------------------------------------------------------

REASON = "throttled: HW thermal 34% of samples"


def comparison(verdict: Verdict, note: str | None = None) -> Comparison:
    return Comparison(verdict, "bench[x]", 1.2, baseline_median_ms=1.0, ratio=1.2, ratio_ci=(1.1, 1.3), note=note)


def test_downgrade_throttled_regression_becomes_inconclusive():
    c = comparison(Verdict.REGRESSED)
    assert c.failed and c.fails()
    d = downgrade_throttled(c, REASON)
    assert d.verdict is Verdict.INCONCLUSIVE
    assert REASON in d.note and "--gpuperf-strict" in comparison_note(d)
    assert not d.failed
    assert not d.fails()
    assert d.fails(strict=True)
    # the evidence is kept
    assert (d.ratio, d.ratio_ci, d.current_median_ms) == (c.ratio, c.ratio_ci, c.current_median_ms)
    assert c.verdict is Verdict.REGRESSED  # the input is not mutated


def test_downgrade_throttled_keeps_an_existing_note():
    d = downgrade_throttled(comparison(Verdict.REGRESSED, note="confirmed by re-measure"), REASON)
    assert d.note.startswith(REASON)
    assert d.note.endswith("confirmed by re-measure")


@pytest.mark.parametrize("verdict", [v for v in Verdict if v is not Verdict.REGRESSED])
def test_downgrade_throttled_other_verdicts_unchanged(verdict):
    c = comparison(verdict)
    assert downgrade_throttled(c, REASON) is c


def test_downgrade_throttled_without_reason_unchanged():
    c = comparison(Verdict.REGRESSED)
    d = downgrade_throttled(c, None)
    assert d is c
    assert d.failed


def test_idle_samples_do_not_count_as_low_clock():
    """A data-bound benchmark leaves the GPU idle (and clocked down) between batches: those
    samples carry the "GPU idle" reason and are left out of the low-clock share (issue 11, item 4)."""
    idle = telemetry.GPU_IDLE
    samples = [sample(i, clock=LOW_SM_MHZ, reasons=idle) if i % 2 else sample(i, clock=MAX_SM_MHZ) for i in range(20)]
    s = summarize(samples, MAX_SM_MHZ)
    assert s["low_clock_share"] == 0.0 and throttle_verdict(s) is None
    assert s["reasons"]["GPU idle"] == pytest.approx(0.5)
    # a busy sample at a low clock still counts: 3 of the 10 busy samples -> 30%
    samples = [sample(i, clock=LOW_SM_MHZ, reasons=idle) if i % 2
               else sample(i, clock=LOW_SM_MHZ if i < 6 else MAX_SM_MHZ) for i in range(20)]
    s = summarize(samples, MAX_SM_MHZ)
    assert s["low_clock_share"] == pytest.approx(0.3)
    # the reasons were read (none of the throttle reasons): the low clock alone is not throttling
    # (issue 22, defect 12); it is only where the reasons cannot be read
    assert throttle_verdict(s) is None
    assert throttle_verdict(dict(s, throttle_share=None)) == "throttled: SM clock below 75% of max in 30% of samples"
    assert summarize([sample(i, reasons=idle) for i in range(5)], MAX_SM_MHZ)["low_clock_share"] is None


def test_own_pids_reads_every_namespace_level():
    from pytest_gpuperf.measure.telemetry import own_pids

    assert own_pids("Name:\\tpython\nNSpid:\t812\t7\n".replace("\\t", "\t")) >= {812, 7, os.getpid()}
    assert own_pids("") == {os.getpid()}


def test_other_processes_in_a_container_count_this_process_among_them(fake_nvml):
    """NVML lists host PIDs; in a container none is ours and none is visible here (issue 11, item 10)."""
    from pytest_gpuperf.measure.telemetry import other_processes_warning

    fake_nvml(processes=[SimpleNamespace(pid=91001, usedGpuMemory=1 << 30)])
    alone = other_processes(HANDLE, own_pid=7, visible=lambda pid: False)
    assert alone == [{"pid": 91001, "used_memory_bytes": 1 << 30, "foreign_pid_namespace": True}]
    assert other_processes_warning(alone, "cuda:0") is None  # that one is this process
    fake_nvml(processes=[SimpleNamespace(pid=91001, usedGpuMemory=1 << 30), SimpleNamespace(pid=91002, usedGpuMemory=1 << 20)])
    two = other_processes(HANDLE, own_pid=7, visible=lambda pid: False)
    text = other_processes_warning(two, "cuda:0")
    assert text.startswith("1 other compute process(es) on cuda:0") and "this one among them" in text
    # same namespace: a listed PID is visible here, so the list means what it says
    same = other_processes(HANDLE, own_pid=7, visible=lambda pid: pid == 91002)
    assert all("foreign_pid_namespace" not in p for p in same)
    assert other_processes_warning(same, "cuda:0").startswith("2 other compute process(es) on cuda:0 using")


def test_session_pids_include_sibling_workers_only_in_a_worker(tmp_path):
    # Defect 7: sibling pytest-xdist workers and A/B workers were reported as "other compute
    # processes on this GPU". A fake /proc: controller 100 -> workers (us, 201, 202); 300 unrelated;
    # our child 400 (an A/B worker we started).
    import os

    from pytest_gpuperf.measure.telemetry import session_pids

    me = os.getpid()

    def proc(pid: int, ppid: int) -> None:
        d = tmp_path / str(pid)
        d.mkdir()
        (d / "stat").write_text(f"{pid} (python3 -m pytest) S {ppid} 1 1 0 -1")

    proc(me, 100)
    for pid, ppid in ((100, 1), (201, 100), (202, 100), (300, 1), (400, me)):
        proc(pid, ppid)
    worker = session_pids({"PYTEST_XDIST_WORKER": "gw0"}, proc=str(tmp_path))
    assert {me, 100, 201, 202, 400} <= worker and 300 not in worker
    alone = session_pids({}, proc=str(tmp_path))
    assert {me, 400} <= alone and not {100, 201, 202, 300} & alone


def test_under_torchrun_the_host_load_leaves_out_the_other_ranks(tmp_path):
    """On the CPU, torchrun's ranks share the cores: the other ranks of the launch (the launcher's
    other children) are the job's own load, not another user's. A fake /proc: launcher 100 -> ranks
    (us, 201); 300 unrelated. Outside torchrun only this process counts."""
    import os

    from pytest_gpuperf.measure.telemetry import HostLoadMeter, job_cpu_reader, own_cpu_s, process_cpu_s

    me = os.getpid()
    tick = os.sysconf("SC_CLK_TCK")

    def proc(pid: int, ppid: int, ticks: int = 0) -> None:
        d = tmp_path / str(pid)
        d.mkdir(exist_ok=True)
        (d / "stat").write_text(f"{pid} (python3 -m pytest) R {ppid} 1 1 0 -1 0 0 0 0 0 {ticks} 0 0 0")

    for pid, ppid in ((me, 100), (100, 1), (201, 100), (300, 1)):
        proc(pid, ppid)
    assert process_cpu_s(201, str(tmp_path)) == 0.0 and process_cpu_s(999, str(tmp_path)) is None
    assert job_cpu_reader({}, str(tmp_path)) is own_cpu_s
    job = job_cpu_reader({"TORCHELASTIC_RUN_ID": "x"}, str(tmp_path))
    busy = iter([(0.0, 0.0), (3.0, 0.0)])  # the machine's cores: 3 s busy over the span
    clock = iter([0.0, 2.0])
    meter = HostLoadMeter(stat=lambda: next(busy), own=job, clock=lambda: next(clock))
    with meter.span():
        proc(201, 100, ticks=2 * tick)  # the other rank used 2 s of CPU meanwhile
        proc(300, 1, ticks=tick)  # an unrelated process: it stays "other"
    # 3 s busy - (this process's few ms + 2 s of rank 201): about 1 s; without rank 201 it was 3 s
    assert 0.5 < meter.other_s <= 1.0 + 1e-9, meter.other_s  # 1.0 when this process used no tick
