"""Profiler event classification across torch versions (pytest_gpuperf.measure.profiling).

torch >= 2.12 exposes ``_KinetoEvent.activity_type()``; older releases (2.4 - 2.11) do not, and
torch 2.4 lacks ``is_user_annotation()`` as well. These tests run a small real profile on the CPU
and check that the inferred classification matches ``activity_type`` (where the installed torch
has it) and the chrome trace's ``cat`` field (on every torch), with those methods hidden; CUDA
categories are covered with synthetic events.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter

import pytest

torch = pytest.importorskip("torch")

from torch.autograd import DeviceType  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

from pytest_gpuperf.measure import profiling  # noqa: E402
from pytest_gpuperf.measure import trace  # noqa: E402
from pytest_gpuperf.verdict.bottleneck import FINAL_SYNC_NAME, PHASE_PREFIX, REGION_NAME, TraceEvent, analyze  # noqa: E402

HAS_ACTIVITY_TYPE = callable(getattr(torch._C._autograd._KinetoEvent, "activity_type", None))
US = 1_000  # ns


class Hidden:
    """A ``_KinetoEvent`` seen through a torch without some methods (``activity_type`` at least)."""

    def __init__(self, event, hide=("activity_type",)) -> None:
        self._event = event
        self._hide = frozenset(hide)

    def __getattr__(self, name):
        if name in self._hide:
            raise AttributeError(name)
        return getattr(self._event, name)


def old_torch(events, hide=("activity_type",)):
    return [Hidden(e, hide) for e in events]


#: torch 2.5 - 2.11 (no activity_type) and torch 2.4 (no is_user_annotation either).
HIDE = {
    "torch-2.11": ("activity_type",),
    "torch-2.4": ("activity_type", "is_user_annotation"),
}


def workload() -> None:
    x = torch.randn(32, 32, requires_grad=True)
    w = torch.randn(32, 32)
    with profiling.phase("forward"):
        y = torch.relu(x @ w).sum()
    with profiling.phase("backward"):
        y.backward()
    with record_function(FINAL_SYNC_NAME):
        torch.zeros(4).add_(1)


@pytest.fixture(scope="module")
def prof():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Warning: Profiler clears events", category=UserWarning)  # torch 2.11
        with profile(activities=[ProfilerActivity.CPU]) as p:
            with record_function(REGION_NAME):
                for _ in range(2):
                    workload()
    return p


def keyed(events: list[TraceEvent]) -> list[tuple]:
    return [(e.name, e.kind, e.start_ns, e.end_ns, e.correlation) for e in events]


# --------------------------------------------------------------------------------------------
# a real CPU profile: the same events with and without activity_type
# --------------------------------------------------------------------------------------------


@pytest.mark.skipif(not HAS_ACTIVITY_TYPE, reason="this torch has no _KinetoEvent.activity_type")
@pytest.mark.parametrize("torch_like", sorted(HIDE))
def test_inferred_activity_matches_activity_type(prof, torch_like):
    raw = trace.raw_events(prof)
    assert raw and all(callable(getattr(e, "activity_type", None)) for e in raw)
    hidden = old_torch(raw, HIDE[torch_like])
    assert not any(hasattr(e, "activity_type") for e in hidden)
    names = trace._cpu_annotation_names(hidden)
    assert {REGION_NAME, FINAL_SYNC_NAME, PHASE_PREFIX + "forward", PHASE_PREFIX + "backward"} <= names
    for e, h in zip(raw, hidden):
        assert trace.event_activity(h, names) == str(e.activity_type()), e.name()
    assert keyed(trace.trace_events_from(hidden)) == keyed(trace.trace_events_from(raw))


@pytest.fixture(scope="module")
def chrome_trace(prof, tmp_path_factory):
    """The profile's chrome trace (torch saves a trace once)."""
    path = profiling.export_trace(prof, tmp_path_factory.mktemp("trace") / "trace.json")
    with open(path) as fh:
        return json.load(fh)


@pytest.mark.parametrize("torch_like", ["installed"] + sorted(HIDE))
def test_inferred_activity_matches_chrome_trace_cat(prof, chrome_trace, torch_like):
    """The chrome trace's ``cat`` is the activity type on every torch: an oracle without activity_type."""
    raw = trace.raw_events(prof)
    events = raw if torch_like == "installed" else old_torch(raw, HIDE[torch_like])
    cats = {"cpu_op", "user_annotation"}
    want = Counter((t["name"], t["cat"]) for t in chrome_trace["traceEvents"]
                   if t.get("ph") == "X" and t.get("cat") in cats)
    names = trace._cpu_annotation_names(events)
    got = Counter((str(e.name()), trace.event_activity(e, names)) for e in events)
    got = Counter({k: n for k, n in got.items() if k[1] in cats})
    assert got == want
    assert want[(REGION_NAME, "user_annotation")] == 1 and want[(PHASE_PREFIX + "forward", "user_annotation")] == 2


@pytest.mark.parametrize("torch_like", sorted(HIDE))
def test_old_torch_profile_analyzes_like_the_installed_one(monkeypatch, torch_like):
    """The whole path (profile_calls -> TraceEvents -> analyze) with activity_type hidden."""
    x = torch.randn(64, 64)

    def fn():
        with profiling.phase("mm"):
            y = x @ x
        for _ in range(20):
            y = y + 1
        return y

    cpu = torch.device("cpu")
    _, native = profiling.profile_calls(fn, (), {}, cpu, 2)
    real_raw_events = trace.raw_events
    monkeypatch.setattr(trace, "raw_events", lambda p: old_torch(real_raw_events(p), HIDE[torch_like]))
    _, old = profiling.profile_calls(fn, (), {}, cpu, 2)
    for events in (native, old):
        kinds = Counter(e.kind for e in events)
        assert kinds["annotation"] == 1 + 2 + 1  # the region, a phase per call, the final sync
        ev = analyze(events, device_type="cpu", calls=2)
        assert ev.kernel_count == 21  # the matmul and 20 adds per call: the top-level ops
        assert ev.wall_s > 0 and ev.busy_s > 0 and ev.kernel_median_s > 0
        assert set(ev.phases) == {"mm"}
    assert Counter(e.kind for e in old) == Counter(e.kind for e in native)
    assert [e.name for e in old if e.kind == "annotation"] == [e.name for e in native if e.kind == "annotation"]


def test_profile_calls_emits_no_torch_warnings():
    """torch 2.11 warns on every fresh profiler that it clears events between cycles: not ours to show."""
    x = torch.ones(8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, events = profiling.profile_calls(lambda: x + 1, (), {}, torch.device("cpu"), 1)
    assert [e.name for e in events if e.kind == "annotation"] == [REGION_NAME, FINAL_SYNC_NAME]


def test_public_function_events_fallback(prof):
    """Without ``prof.profiler.kineto_results`` the public ``prof.events()`` is read instead."""

    class NoKineto:
        profiler = object()

        def events(self):
            return prof.events()

    assert not hasattr(NoKineto.profiler, "kineto_results")
    public = trace.to_trace_events(NoKineto())
    private = trace.to_trace_events(prof)
    assert {e.kind for e in public} == {e.kind for e in private} == {"annotation", "cpu_op"}
    ann = [e.name for e in private if e.kind == "annotation"]
    assert [e.name for e in public if e.kind == "annotation"] == ann
    # FunctionEvents drop a few utility ops (torch's _filter_name); everything else is there
    assert Counter(e.name for e in public) <= Counter(e.name for e in private)
    assert len(public) >= 0.9 * len(private)
    region = next(e for e in public if e.name == REGION_NAME)
    assert region.duration_ns == pytest.approx(next(e for e in private if e.name == REGION_NAME).duration_ns, abs=2 * US)
    ev = analyze(public, device_type="cpu", calls=2)
    assert ev.kernel_count == analyze(private, device_type="cpu", calls=2).kernel_count
    assert set(ev.phases) == {"forward", "backward"}


# --------------------------------------------------------------------------------------------
# synthetic CUDA events: every category, with and without activity_type
# --------------------------------------------------------------------------------------------


class FakeEvent:
    """The ``_KinetoEvent`` methods profiling reads; ``activity`` / ``user`` / ``scope`` None: absent."""

    def __init__(self, name, device, activity=None, *, start=0, end=0, corr=0, user=None, scope=0):
        self._name, self._device, self._start, self._end, self._corr = name, device, start, end, corr
        if activity is not None:
            self.activity_type = lambda: activity
        if user is not None:
            self.is_user_annotation = lambda: user
        if scope is not None:
            self.scope = lambda: scope

    def name(self):
        return self._name

    def device_type(self):
        return self._device

    def start_ns(self):
        return self._start

    def duration_ns(self):
        return self._end - self._start

    def correlation_id(self):
        return self._corr


CPU, CUDA = DeviceType.CPU, DeviceType.CUDA

#: (name, device, activity type (chrome trace cat), start us, end us, correlation, user annotation)
CUDA_TRACE = [
    (REGION_NAME, CPU, "user_annotation", 0, 1000, 1, True),
    (PHASE_PREFIX + "step", CPU, "user_annotation", 0, 500, 2, True),
    ("aten::add", CPU, "cpu_op", 10, 40, 3, False),
    ("cudaLaunchKernel", CPU, "cuda_runtime", 20, 30, 101, False),
    ("cuLaunchKernel", CPU, "cuda_driver", 22, 28, 0, False),
    ("__cudaPushCallConfiguration", CPU, "cuda_runtime", 19, 20, 0, False),
    ("aten::copy_", CPU, "cpu_op", 50, 400, 4, False),
    ("cudaMemcpyAsync", CPU, "cuda_runtime", 60, 70, 102, False),
    ("cudaMemsetAsync", CPU, "cuda_runtime", 71, 75, 103, False),
    ("cudaStreamSynchronize", CPU, "cuda_runtime", 75, 400, 104, False),
    ("cudaDeviceSynchronize", CPU, "cuda_runtime", 900, 990, 105, False),
    ("[memory]", CPU, "cpu_instant_event", 80, 80, 0, False),
    ("Activity Buffer Request", CPU, "overhead", 5, 9, 0, False),
    # the device side
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", CUDA, "kernel", 100, 200, 101, False),
    ("ampere_sgemm_128x64_nn", CUDA, "kernel", 410, 430, 0, False),
    ("Memcpy HtoD (Pageable -> Device)", CUDA, "gpu_memcpy", 250, 350, 102, False),
    ("Memcpy DtoH (Device -> Pinned)", CUDA, "gpu_memcpy", 440, 460, 0, False),
    ("Memcpy DtoD (Device -> Device)", CUDA, "gpu_memcpy", 470, 480, 0, False),
    ("Memset (Device)", CUDA, "gpu_memset", 360, 370, 103, False),
    ("Stream Sync", CUDA, "cuda_sync", 350, 400, 104, False),
    ("Lazy Function Loading", CUDA, "overhead", 95, 100, 0, False),
    # record_function ranges mirrored on the GPU timeline: not kernels
    (REGION_NAME, CUDA, "gpu_user_annotation", 100, 990, 1, True),
    (PHASE_PREFIX + "step", CUDA, "gpu_user_annotation", 100, 480, 2, True),
    (FINAL_SYNC_NAME, CPU, "user_annotation", 890, 1000, 5, True),
]


def synthetic(flavor: str) -> list[FakeEvent]:
    out = []
    for name, device, activity, s, e, corr, user in CUDA_TRACE:
        out.append(FakeEvent(
            name, device,
            activity if flavor == "torch-2.13" else None,
            start=s * US, end=e * US, corr=corr,
            user=None if flavor == "torch-2.4" else user,
            # record_function ranges have at::RecordScope::USER_SCOPE on the CPU; kineto's own
            # records report another scope
            scope=7 if (user and device == CPU) else 0,
        ))
    return out


FLAVORS = ["torch-2.13", "torch-2.11", "torch-2.4"]


@pytest.mark.parametrize("flavor", FLAVORS)
def test_synthetic_cuda_events_classify_by_category(flavor):
    events = synthetic(flavor)
    names = trace._cpu_annotation_names(events) if flavor != "torch-2.13" else frozenset()
    assert [trace.event_activity(e, names) for e in events] == [row[2] for row in CUDA_TRACE]
    kinds = {(t.name, t.kind) for t in trace.trace_events_from(events)}
    assert {k for _, k in kinds} == {"annotation", "cpu_op", "runtime", "kernel", "memcpy", "memset"}
    # GPU-side annotations, CUPTI sync and overhead records and allocator instants are dropped
    device_side = [t for t in trace.trace_events_from(events) if t.kind in ("kernel", "memcpy", "memset")]
    assert len(device_side) == 6 and not any(t.name.startswith("gpuperf::") for t in device_side)
    assert ("Stream Sync", "kernel") not in kinds and ("[memory]", "cpu_op") not in kinds
    assert ("Activity Buffer Request", "cpu_op") not in kinds
    assert ("cuLaunchKernel", "runtime") in kinds and ("cudaStreamSynchronize", "runtime") in kinds


@pytest.mark.parametrize("flavor", FLAVORS)
def test_synthetic_cuda_trace_analyzes_the_same_everywhere(flavor):
    ev = analyze(trace.trace_events_from(synthetic(flavor)), device_type="cuda")
    # kernels 100-200, 410-430; memset 360-370; DtoD copy 470-480: 140 us busy. The GPU-side
    # region annotation (100-990 us) would make the device look 89% busy if counted as a kernel.
    assert ev.busy_s == pytest.approx(140e-6)
    assert ev.kernel_count == 3  # two kernels and the memset
    assert ev.copy_s == pytest.approx(120e-6)  # HtoD 250-350 and DtoH 440-460
    assert ev.idle_s == pytest.approx((1000 - 260) * 1e-6)
    # cudaStreamSynchronize counts; cudaDeviceSynchronize inside gpuperf::final_sync does not
    assert ev.sync_s == pytest.approx(325e-6)
    assert ev.phases == {"step": 1.0}
    assert ev == analyze(trace.trace_events_from(synthetic("torch-2.13")), device_type="cuda")


def test_activity_type_is_preferred_over_inference():
    """Where torch says what an event is, the name does not matter."""
    e = FakeEvent("Memcpy-looking kernel name", CUDA, "kernel", user=False)
    assert trace.event_activity(e) == "kernel"
    e = FakeEvent("some_kernel", CUDA, "gpu_user_annotation", user=False)
    assert trace.event_activity(e) == "gpu_user_annotation"
    assert trace.trace_events_from([e]) == []


def test_inference_edge_cases():
    # a GPU-side event named like a CPU annotation is an annotation only where torch cannot say
    assert trace.event_activity(FakeEvent("my_range", CUDA, user=None), {"my_range"}) == "gpu_user_annotation"
    assert trace.event_activity(FakeEvent("my_range", CUDA, user=False), {"my_range"}) == "kernel"
    assert trace.event_activity(FakeEvent("my_range", CUDA, user=None), set()) == "kernel"
    # ROCm: HIP runtime calls on the host, kernels reported as CUDA devices
    assert trace.event_activity(FakeEvent("hipLaunchKernel", CPU)) == "cuda_runtime"
    # user ops are CPU ops whatever their namespace; record_function ranges by scope or flag
    assert trace.event_activity(FakeEvent("mylib::cuda_fused", CPU, user=False)) == "cpu_op"
    assert trace.event_activity(FakeEvent("culprit", CPU, user=None, scope=0)) == "cpu_op"
    assert trace.event_activity(FakeEvent("my_range", CPU, user=None, scope=7)) == "user_annotation"
    assert trace.event_activity(FakeEvent("my_range", CPU, user=True, scope=None)) == "user_annotation"
    # a record_function range keeps its name, even one that CUPTI also uses for an overhead record
    assert trace.event_activity(FakeEvent("Resource", CPU, user=None, scope=7)) == "user_annotation"
    assert trace.event_activity(FakeEvent("Resource", CPU, user=None, scope=0)) == "overhead"
    # other devices are not classified
    assert trace.event_activity(FakeEvent("k", DeviceType.XPU)) == ""
    assert trace.event_activity(FakeEvent("k", "DeviceType.CUDA")) == "kernel"


def test_function_event_view_on_a_torch_without_is_user_annotation():
    """torch 2.4's FunctionEvent has no is_user_annotation: GPU-side ranges are told apart by name."""
    from types import SimpleNamespace

    def fe(name, device, start, end, corr, scope=0):
        return SimpleNamespace(name=name, trace_name=name, device_type=device, scope=scope, id=corr,
                               time_range=SimpleNamespace(start=start, end=end))

    class Old:
        profiler = object()

        def events(self):
            return [
                fe(REGION_NAME, CPU, 0.0, 1000.0, 1, scope=7),
                fe("aten::add", CPU, 10.0, 40.0, 2),
                fe("cudaLaunchKernel", CPU, 20.0, 30.0, 101),
                fe("add_kernel", CUDA, 100.0, 200.5, 101),
                fe(REGION_NAME, CUDA, 99.0, 990.0, 1),
            ]

    events = trace.to_trace_events(Old())
    assert [(e.name, e.kind) for e in events] == [
        (REGION_NAME, "annotation"), ("aten::add", "cpu_op"), ("cudaLaunchKernel", "runtime"), ("add_kernel", "kernel"),
    ]
    assert events[3].start_ns == 100_000 and events[3].end_ns == 200_500 and events[3].correlation == 101
    assert analyze(events, device_type="cuda").busy_s == pytest.approx(100.5e-6)


def test_fp32_peak_follows_the_tf32_settings_in_force():
    """cuDNN convolutions use TF32 by default while fp32 matmuls do not: a conv step's compute
    peak is the TF32 matmul's, or it shows more than 100% of peak (issue 11, item 7)."""
    from pytest_gpuperf.measure.profiling import uses_tf32

    defaults = dict(matmul_tf32=False, cudnn_tf32=True)
    assert uses_tf32("float32", device_type="cuda", has_conv=True, **defaults)
    assert not uses_tf32("float32", device_type="cuda", has_conv=False, **defaults)
    assert uses_tf32("float32", device_type="cuda", has_conv=False, matmul_tf32=True, cudnn_tf32=False)
    assert not uses_tf32("float32", device_type="cuda", has_conv=True, matmul_tf32=False, cudnn_tf32=False)
    assert not uses_tf32("bfloat16", device_type="cuda", has_conv=True, **defaults)
    assert not uses_tf32("float32", device_type="cpu", has_conv=True, matmul_tf32=True, cudnn_tf32=True)
    assert uses_tf32(None, device_type="cuda", has_conv=True, **defaults)  # no FLOP dtype: fp32 peak


def test_calibration_is_cached_per_math_mode(monkeypatch):
    import torch

    from pytest_gpuperf.measure import profiling

    monkeypatch.setattr(profiling, "_CALIBRATION", {})
    timed = []
    monkeypatch.setattr(profiling, "_median_s", lambda fn, device, reps: timed.append(reps) or 1.0)
    cpu = torch.device("cpu")
    first = profiling.calibrate(cpu, "float32")
    assert profiling.calibrate(cpu, "float32", tf32=True) == first  # no TF32 on the CPU: the same entry
    assert len(timed) == 2 and set(profiling._CALIBRATION) == {("cpu", "float32")}
    assert torch.backends.cuda.matmul.allow_tf32 is False  # restored


def test_profiler_warm_up_step_is_run_and_left_out_of_the_trace():
    """The profiler's own start-up lands in a discarded warm-up step (issue 11, item 3): ``fn``
    runs once more than profiled, and only the profiled calls are in the trace."""
    import torch

    from pytest_gpuperf.measure.profiling import profile_calls

    made = []

    def fn():
        made.append(1)
        return torch.ones(4).add(1)

    _, events = profile_calls(fn, (), {}, torch.device("cpu"), 3)
    assert len(made) == 4
    assert sum(e.name == "aten::add" for e in events) == 3
    assert sum(e.name == "gpuperf::region" for e in events) == 1
    made.clear()
    _, events = profile_calls(fn, (), {}, torch.device("cpu"), 3, warmup=False)
    assert len(made) == 3 and sum(e.name == "aten::add" for e in events) == 3


def test_quiet_kineto_keeps_kinetos_lines_out_and_the_rest_in(capfd):
    # kineto writes "USDT: ... profiler_start" from C++ to file descriptor 2 when a profiler starts or
    # stops; quiet_kineto drops exactly those lines and writes every other line back, in order
    import os

    from pytest_gpuperf.measure.trace import quiet_kineto, quietly

    with quiet_kineto():
        os.write(2, b"USDT:2026-11-25 08:32:33 16798:16798 SyncActivityProfilerHandler.cpp:52] profiler_start\n")
        os.write(2, b"a real warning\n")
        os.write(2, b"[W1125 08:00:00.000 CuptiActivityProfiler.cpp:123] kineto noise\n")
        os.write(2, b"another line\n")
    err = capfd.readouterr().err
    assert err == "a real warning\nanother line\n"

    class Noisy:
        def __enter__(self):
            os.write(2, b"USDT:x SyncActivityProfilerHandler.cpp:52] profiler_start\n")
            return self

        def __exit__(self, *exc):
            os.write(2, b"USDT:x SyncActivityProfilerHandler.cpp:59] profiler_stop\n")

    with quietly(Noisy()):
        os.write(2, b"the user's own output\n")  # inside the block: not redirected
    assert capfd.readouterr().err == "the user's own output\n"
    with pytest.raises(ValueError), quietly(Noisy()):
        raise ValueError("propagates")
    assert capfd.readouterr().err == ""


@pytest.mark.subprocess
def test_profiling_does_not_import_inductor():
    """Starting ``torch.profiler.profile`` asks ``hasattr(torch, "_inductor")``, which imports
    torch._inductor, torch._dynamo and sympy (seconds of CPU in every extras, op-profile and A/B
    worker process); the plugin's profilers keep it out while nothing imported it (this session has:
    a fresh process), and torch's lazy attribute works as before afterwards."""
    import subprocess
    import sys

    code = """
import sys, torch
from pytest_gpuperf.measure.memory import MemoryTracker
from pytest_gpuperf.measure.opprofile import profile_ops
from pytest_gpuperf.measure.profiling import profile_calls
with MemoryTracker(torch.device("cpu")) as mem:
    x = torch.ones(1 << 16)
assert mem.report.peak_bytes >= 1 << 18, mem.report
assert profile_ops(lambda: torch.ones(64).sum(), (), {}, torch.device("cpu"), cycles=2, calls=2)
assert profile_calls(lambda: torch.ones(64).sum(), (), {}, torch.device("cpu"), 2)[1]
assert "torch._inductor" not in sys.modules and "torch._dynamo" not in sys.modules, "imported"
assert "_inductor" in getattr(torch, "_lazy_modules", {"_inductor"})
assert hasattr(torch, "_inductor") and "torch._inductor" in sys.modules  # the lazy attribute as before
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr


def test_profiling_a_call_prints_no_kineto_lines(capfd):
    prof, events = profiling.profile_calls(lambda: torch.ones(8) + 1, (), {}, torch.device("cpu"), 2)
    assert events
    out = capfd.readouterr()
    assert "USDT:" not in out.err and "ActivityProfiler" not in out.err
