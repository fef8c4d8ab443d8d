"""The plugin's CUDA paths on the simulated CUDA device (``pytest_gpuperf.testing.SimulatedCuda``,
issue 22), and the simulator's own CUDA rules.

Everything runs on the simulator's clocks (device and host), so timings are exact and
independent of this machine: a 1 ms simulated kernel measures 1 ms. The simulation checks
control flow, API use, synchronization, stream/device routing and capture rules, not real GPU
numbers (that is ``benchmarks/gpu_validate.py`` on a real GPU).
"""

from __future__ import annotations

import statistics

import pytest

torch = pytest.importorskip("torch")

from pytest_gpuperf.measure import timing  # noqa: E402
from pytest_gpuperf.core.options import BenchOptions  # noqa: E402
from pytest_gpuperf.testing import SimulatedCuda, SimulatedCudaError, active  # noqa: E402

CUDA0 = torch.device("cuda", 0)


@pytest.fixture
def sim(monkeypatch: pytest.MonkeyPatch) -> SimulatedCuda:
    return SimulatedCuda(devices=2).install(monkeypatch)


def measure(sim: SimulatedCuda, fn, device=CUDA0, **options):
    opts = BenchOptions(**{"max_time": 0.2, **options})
    return timing.Measurer(clock=sim.clock).measure(fn, (), {}, options=opts, device=device)


# ----------------------------------------------------------------------------- the simulator's rules


def test_install_replaces_torch_cuda_and_is_undone(monkeypatch):
    real_count = torch.cuda.device_count()  # 0 on CPU-only machines; a real GPU's count elsewhere
    with monkeypatch.context() as m:
        sim = SimulatedCuda(devices=3).install(m)
        assert torch.cuda.is_available() and torch.cuda.device_count() == 3 and active() is sim
    assert active() is None and torch.cuda.device_count() == real_count


def test_events_need_completion_and_timing(sim):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    sim.kernel(ms=2.0)
    end.record()
    with pytest.raises(SimulatedCudaError, match="not ready"):
        start.elapsed_time(end)  # the kernel has not finished on the device
    end.synchronize()
    assert start.elapsed_time(end) == pytest.approx(2.0 + sim.launch_ns / 1e6)
    untimed = torch.cuda.Event()
    untimed.record()
    with pytest.raises(SimulatedCudaError, match="enable_timing"):
        untimed.elapsed_time(end)


def test_devices_streams_and_synchronize_route_work(sim):
    torch.cuda.set_device(1)
    assert torch.cuda.current_device() == 1 and torch.cuda.current_stream().device == 1
    with torch.cuda.device(0):
        assert torch.cuda.current_device() == 0
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert torch.cuda.current_stream() is side
        sim.kernel(ms=5.0)
    assert torch.cuda.current_stream() is torch.cuda.default_stream()
    torch.cuda.synchronize(0)  # another device: does not wait for device 1's side stream
    assert sim.host_ns < 5e6
    torch.cuda.synchronize()  # the current device: waits for all its streams
    assert sim.host_ns >= 5e6


def test_graph_capture_records_and_forbids_synchronize(sim):
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        sim.kernel(ms=0.5)
        sim.kernel(ms=0.25)
        with pytest.raises(SimulatedCudaError, match="capturing"):
            torch.cuda.synchronize()
    assert [ns for _, ns in g.kernels] == [500_000, 250_000]
    before = sim.host_ns
    g.replay()
    torch.cuda.synchronize()
    assert sim.host_ns - before >= 750_000


def test_memory_statistics_and_out_of_memory(monkeypatch):
    sim = SimulatedCuda(total_memory_bytes=1 << 30).install(monkeypatch)
    buf = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    assert torch.cuda.memory_allocated() == 256 << 20 == torch.cuda.max_memory_allocated()
    buf.free()
    torch.cuda.reset_peak_memory_stats()
    assert torch.cuda.max_memory_allocated() == 0
    with pytest.raises(torch.cuda.OutOfMemoryError):
        sim.alloc(2 << 30)
    assert torch.zeros(3).device.type == "cpu"  # CPU tensors stay real


# ----------------------------------------------------------------------------- the timing backend


def test_a_1ms_kernel_measures_1ms_with_events(sim):
    t = measure(sim, lambda: sim.kernel(ms=1.0))
    assert statistics.median(t.samples_ms) == pytest.approx(1.0)
    assert t.calls_per_round == 1 and not t.notes
    assert any(c[0] == "event_record" for c in sim.calls)


def test_a_launch_bound_kernel_is_batched(sim):
    t = measure(sim, lambda: sim.kernel(ms=0.002))
    assert t.calls_per_round > 1
    assert statistics.median(t.samples_ms) == pytest.approx(sim.launch_ns / 1e6, rel=0.2)  # launch-bound


def test_work_on_another_stream_is_timed_by_the_synchronized_wall_clock(sim):
    # Defect 2: a 10 ms kernel on a side stream read 5.25 µs with events on the current stream, and
    # sizing rounds from that estimate ran 98 s of device time for max_time 0.2 s.
    side = torch.cuda.Stream()
    t = measure(sim, lambda: sim.kernel(ms=10.0, stream=side))
    assert statistics.median(t.samples_ms) == pytest.approx(10.0, rel=0.01)
    assert t.calls_per_round == 1
    assert sim.host_ns < 2e9  # warmup (0.1 s default... a few calls) + max_time 0.2 s, not minutes
    assert t.notes and "another stream" in t.notes[0] and "wait_stream" in t.notes[0]


def test_long_calls_make_no_extra_estimate_calls(sim):
    # Defect 5: ten extra calls for the event estimate even when no batching could be needed (a 200 ms
    # call took 4.6 s for max_time 1 s). Now every call launched is a warmup call or a timed round.
    t = measure(sim, lambda: sim.kernel(ms=200.0), max_time=1.0, min_rounds=3)
    assert sim.kernels_launched == t.warmup_calls + t.rounds
    assert sim.host_ns / 1e9 < (t.warmup_calls + t.rounds) * 0.2 + 0.1


def test_graph_mode_captures_with_what_setup_returns(sim):
    # Defect 4: graph mode captured the original arguments: a setup returning a 100 µs input measured 10 µs.
    def fn(ms):
        sim.kernel(ms=ms)

    opts = BenchOptions(max_time=0.2, cuda_graph=True)
    t = timing.Measurer(clock=sim.clock).measure(fn, (0.01,), {}, options=opts, device=CUDA0,
                                                 setup=lambda: ((0.1,), {}))
    assert statistics.median(t.samples_ms) == pytest.approx(0.1, rel=0.01)


def test_the_probe_does_not_leave_rounds_with_a_cold_l2(sim):
    # Defect 3: the default memory probe copies 128 MiB after every k-th round, evicting the L2, so
    # the next round ran cold although flush_l2 is off. One untimed call after each probe re-warms it.
    from pytest_gpuperf.measure.probe import make_probe

    probe = make_probe("memory", CUDA0)
    fn = lambda: sim.kernel(ms=0.5, cold_ms=1.5, name="bench")  # noqa: E731
    opts = BenchOptions(max_time=0.2)
    t = timing.Measurer(clock=sim.clock).measure(fn, (), {}, options=opts, device=CUDA0, probe=probe)
    assert t.probe_ms and max(t.samples_ms) == pytest.approx(0.5, rel=0.02)
    flushed = timing.Measurer(clock=sim.clock).measure(fn, (), {}, options=BenchOptions(max_time=0.2, flush_l2=True),
                                                       device=CUDA0)
    assert min(flushed.samples_ms) == pytest.approx(1.5, rel=0.02)  # flush_l2 still gives cold rounds


def test_a_gpu_probe_frees_its_buffers_with_it(sim):
    # An H200 run (2026-11-29): probes kept for the process left 256 MiB allocated, which a later
    # memory_budget block reported as "allocated before the block". Each measurement builds its own.
    import gc

    from pytest_gpuperf.measure.probe import CUDA_COPY_BYTES, make_probe

    before = sim.memory_allocated(CUDA0)
    probe = make_probe("memory", CUDA0)
    assert sim.memory_allocated(CUDA0) - before == 2 * CUDA_COPY_BYTES
    assert make_probe("memory", CUDA0) is not probe  # no probe is kept between measurements
    gc.collect()
    assert sim.memory_allocated(CUDA0) - before == 2 * CUDA_COPY_BYTES  # the second one is gone
    del probe
    gc.collect()
    assert sim.memory_allocated(CUDA0) == before


def test_use_device_makes_the_measured_gpu_current(sim):
    # Defect 1 (the unit): "cuda" in a test's own code must mean the GPU being measured.
    timing.use_device(torch.device("cuda", 1))
    assert torch.cuda.current_device() == 1
    timing.use_device(torch.device("cpu"))
    assert torch.cuda.current_device() == 1


def test_out_of_memory_is_recognised_without_torch_OutOfMemoryError(monkeypatch):
    # Defect 9: torch < 2.5 has only torch.cuda.OutOfMemoryError; is_oom() was then always False.
    from pytest_gpuperf.measure.memory import is_oom

    err = torch.cuda.OutOfMemoryError("CUDA out of memory")
    assert is_oom(err)
    monkeypatch.delattr(torch, "OutOfMemoryError", raising=False)
    assert is_oom(err) and not is_oom(RuntimeError("x"))


def test_warmup_runs_short_kernels_back_to_back(sim):
    # Defect 8: the warmup synchronized around every call, so the GPU idled between µs kernels (and
    # the warmup measured launch + synchronize latency). Now: two lone synchronized calls, then chunks
    # of back-to-back calls with one synchronize each (Triton's do_bench warms up back to back too).
    t = timing.Measurer(clock=sim.clock).measure(lambda: sim.kernel(ms=0.002), (), {},
                                                 options=BenchOptions(warmup_time=0.025), device=CUDA0, rounds=10)
    syncs = sum(1 for c in sim.calls if c[0] == "synchronize")
    assert t.warmup_calls > 500 and syncs < t.warmup_calls / 100  # was one per warmup call


def test_profiling_after_our_own_graph_capture_turns_cupti_teardown_off(sim, monkeypatch):
    # Defect 10: torch's profiler turns CUPTI teardown off only for inductor's CUDA graphs; we capture
    # our own and then profile (classification, counts), which torch's comment says can crash.
    from pytest_gpuperf.measure import profiling

    monkeypatch.setattr(timing, "_GRAPH_CAPTURED", [False])
    env: dict = {}
    assert not profiling.cupti_guard(CUDA0, env) and env == {}
    measure(sim, lambda: sim.kernel(ms=0.05), cuda_graph=True)
    assert timing.graph_captured()
    assert not profiling.cupti_guard(torch.device("cpu"), env) and env == {}
    assert profiling.cupti_guard(CUDA0, env) and env == {"DISABLE_CUPTI_LAZY_REINIT": "1", "TEARDOWN_CUPTI": "0"}
    env = {"TEARDOWN_CUPTI": "1"}  # the user's own setting wins
    profiling.cupti_guard(CUDA0, env)
    assert env["TEARDOWN_CUPTI"] == "1"


def test_resolve_device_on_the_simulated_gpus(sim):
    assert timing.resolve_device(None) == torch.device("cuda", 0)  # auto: CUDA when available
    assert timing.resolve_device("cuda", default_index=3) == torch.device("cuda", 1)  # xdist worker 3 of 2 GPUs
    assert timing.resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(timing.DeviceUnavailable, match="only 2 CUDA device"):
        timing.resolve_device("cuda:5")
    assert timing.resolve_device("cpu") == torch.device("cpu")


def test_smoke_mode_synchronizes_the_device(sim):
    t = timing.Measurer(clock=sim.clock).once(lambda: sim.kernel(ms=3.0), (), {}, CUDA0)
    assert t.samples_ms[0] >= 3.0 and ("synchronize", 0) in sim.calls


def test_kernel_counts_under_cudnn_benchmark_mode_are_reported_not_gated(sim, monkeypatch):
    # Defect 11: with torch.backends.cudnn.benchmark on, cuDNN picks convolution algorithms by timing
    # them in each process, so exact kernel counts can differ between processes on unchanged code.
    from pytest_gpuperf.verdict.compare import Verdict
    from pytest_gpuperf.measure.counting import count_call
    from pytest_gpuperf.verdict.counts import Counts, decide_counts

    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    counts, _ = count_call(lambda: sim.kernel(ms=0.1), (), {}, CUDA0)
    assert counts.cudnn_benchmark and Counts.from_dict(counts.to_dict()).cudnn_benchmark
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    assert not count_call(lambda: sim.kernel(ms=0.1), (), {}, CUDA0)[0].cudnn_benchmark

    stored = Counts(ops=10, kernels=10)
    more = Counts(ops=10, kernels=12)
    assert decide_counts(more, [stored.totals()], stored).verdict is Verdict.REGRESSED
    c = decide_counts(Counts(ops=10, kernels=12, cudnn_benchmark=True), [stored.totals()], stored)
    assert c.verdict is Verdict.UNCHANGED and [x.status for x in c.changes if x.name == "kernels"] == ["not gated"]
    old = Counts(ops=10, kernels=10, cudnn_benchmark=True)  # the baseline was counted in benchmark mode
    assert decide_counts(more, [old.totals()], old).verdict is Verdict.UNCHANGED
    ops = decide_counts(Counts(ops=11, kernels=12, cudnn_benchmark=True), [stored.totals()], stored)
    assert ops.verdict is Verdict.REGRESSED  # other counts are still gated
    budget = decide_counts(Counts(ops=10, kernels=12, cudnn_benchmark=True), [stored.totals()], stored,
                           budgets={"max_kernels": 11})
    assert budget.over_budget  # a declared budget still applies


def test_simulated_nvml_telemetry_on_the_simulated_gpus(sim):
    # NVML of the same simulated devices: handles by UUID (defect 6), the sampler's reads, throttling.
    import sys

    from pytest_gpuperf.measure import telemetry
    from pytest_gpuperf.verdict import machine

    nv = sys.modules["pynvml"]
    assert nv is sim.nvml
    assert telemetry.handle_for(1) == ("nvml-handle", 1) and nv.calls.get("nvmlDeviceGetHandleByIndex") is None
    info = telemetry.gpu_info(telemetry.handle_for(0))
    assert info["name"] == sim.name and info["max_sm_clock_mhz"] == 1980
    nv.reasons, nv.sm_clock_mhz = 0x40, 1000  # HW thermal
    s = telemetry.sampler_for(CUDA0)
    s.interval_s = 0.001
    with s:
        import time

        time.sleep(0.05)
    assert machine.throttle_verdict(s.summary()).startswith("throttled: HW thermal")
    nv.reasons = 0x4  # a power-capped GPU at its cap (defect 12): not throttled
    s = telemetry.sampler_for(CUDA0)
    s.interval_s = 0.001
    with s:
        time.sleep(0.05)
    assert machine.throttle_verdict(s.summary()) is None


def test_counting_and_profiling_see_the_simulated_kernels_copies_and_syncs(sim):
    # The simulator's kineto-like events join the real profiler's: the count gate's kernel and sync
    # counts, and the trace the bottleneck classification reads, see the simulated device's work.
    from pytest_gpuperf.measure import profiling
    from pytest_gpuperf.measure.counting import count_call

    buf = sim.alloc(1 << 20)

    def fn():
        sim.kernel(ms=0.1, name="gemm_kernel")
        sim.kernel(ms=0.1, name="gemm_kernel")
        buf.copy_(None)
        sim.kernel(ms=0.05, name="relu_kernel")
        torch.cuda.synchronize()  # a host sync inside the benchmark, as .item() makes

    counts, _ = count_call(fn, (), {}, CUDA0)
    assert counts.kernels == 3 and dict(counts.kernels_by_name) == {"gemm_kernel": 2, "relu_kernel": 1}
    assert counts.syncs == 1 and dict(counts.syncs_by_name) == {"cudaDeviceSynchronize": 1}  # not our final sync
    _, events = profiling.profile_calls(fn, (), {}, CUDA0, calls=2)
    kinds = {}
    for e in events:
        kinds[e.kind] = kinds.get(e.kind, 0) + 1
    assert kinds["kernel"] == 6 and kinds["memcpy"] == 2 and kinds["runtime"] >= 8


def test_bottleneck_classification_runs_on_the_simulated_device(sim):
    # The classification's CUDA path (profile with CUDA activities, kernel trace, roofline) runs on
    # the simulator's events; the class it reaches is not a claim about real GPUs.
    from pytest_gpuperf.measure import profiling
    from pytest_gpuperf.verdict.bottleneck import CLASSES

    def fn():
        for _ in range(50):
            sim.kernel(ms=0.002, name="tiny_kernel")

    _, b = profiling.classify_call(fn, (), {}, CUDA0, median_ms=0.3)
    assert b.kind in CLASSES and b.evidence.kernel_count == 50


def test_a_profile_reads_the_simulated_device_on_the_simulated_clock(sim):
    # Kernels where they ran on the simulated device, the region over the simulated time the calls
    # took: host time spent between launches (sim.host) is device idle time once the queue drained,
    # exactly, whatever the machine's speed or load (no real time passes in sim.host).
    from pytest_gpuperf.measure import profiling
    from pytest_gpuperf.verdict.bottleneck import analyze

    def fn():
        sim.kernel(ms=1.0, name="a_kernel")
        sim.host(3.0)  # 3 ms of host work: the 1 ms kernel drains meanwhile
        sim.kernel(ms=1.0, name="b_kernel")

    _, events = profiling.profile_calls(fn, (), {}, CUDA0, calls=2)
    kernels = sorted((e.start_ns, e.end_ns) for e in events if e.kind == "kernel")
    region = next(e for e in events if e.name == "gpuperf::region")
    t0 = region.start_ns  # µs after it: 5 launch; 3005 host work; 3010 launch; call 2's launch queues
    assert [(s - t0, t - t0) for s, t in kernels] == [(5_000, 1_005_000), (3_010_000, 4_010_000),
                                                      (4_010_000, 5_010_000), (6_020_000, 7_020_000)]
    assert region.end_ns - t0 == 7_020_000  # the final synchronize returns when the last kernel ends
    e = analyze(events, device_type="cuda", calls=2)
    assert (e.wall_s, e.busy_s, e.idle_s) == pytest.approx((3.51e-3, 2.0e-3, 1.51e-3), abs=1e-12)
    # the gaps the host's work left (2005 + 1010 µs; the first launch's 5 µs has no kernel before it)
    assert e.host_wait_s == pytest.approx(1.5075e-3, abs=1e-12)


def test_the_host_cpu_time_of_issuing_each_round_is_read_beside_the_events(sim):
    # issue 45: on CUDA the CPU clocks time the host's launches of each round (not the device time)
    opts = BenchOptions(max_time=0.05, warmup_time=0.005)
    t = timing.Measurer(clock=sim.clock, cpu_clocks=timing.CpuClocks()).measure(
        lambda: sim.kernel(ms=1.0), (), {}, options=opts, device=CUDA0)
    assert len(t.cpu_samples_ms) == len(t.process_cpu_samples_ms) == len(t.samples_ms) > 0
    assert all(v > 0 for v in t.cpu_samples_ms)
    assert measure(sim, lambda: sim.kernel(ms=1.0)).cpu_samples_ms == ()  # the simulator's clock alone: none
