"""The simulated nccl of the simulated CUDA device (``pytest_gpuperf.testing``: ``SimulatedCuda.collective``,
``SimulatedNccl``; issue 35): NCCL-named collective kernels with the cost model's durations, in the
profiler's events and in the communication analysis (exact numbers on the simulated clock), and
``torch.distributed``'s nccl-facing bits on a one-process gloo group. The two-process session is
``tests/test_simulated_nccl_e2e.py``.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from pytest_gpuperf.measure import communication, trace  # noqa: E402
from pytest_gpuperf.testing import SimulatedCuda, SimulatedCudaError, SimulatedNccl, nccl_kernel_name  # noqa: E402
from pytest_gpuperf.verdict.communication import ProfEvent, classify, rank_communication  # noqa: E402

needs_dist = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available in this torch build")

#: All-reduce of 1e8 bytes on 2 ranks with the defaults: 10 µs + 1e8 B × 2(n-1)/n / 100 GB/s = 1010 µs.
ALL_REDUCE_1E8_NS = 1_010_000


@pytest.fixture
def sim(monkeypatch: pytest.MonkeyPatch) -> SimulatedCuda:
    return SimulatedCuda(devices=2).install(monkeypatch)


def device_events(sim: SimulatedCuda) -> list[ProfEvent]:
    """The simulated device's events as the communication analysis reads them (µs, simulated clock)."""
    return [ProfEvent(e.name(), "cuda", e.sim_start_ns / 1e3, (e.sim_start_ns + e.duration_ns()) / 1e3, 0,
                      trace.event_kind(e.activity_type()))
            for e in sim.kineto if e.sim_start_ns is not None]


# ----------------------------------------------------------------------------- the kernel and its cost model


def test_a_collective_launches_an_nccl_named_kernel_of_the_modelled_duration(sim):
    sim.collective("all_reduce", 10**8, world_size=2)
    assert sim.calls[-1] == ("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "cuda:0/default")
    (launch, kernel) = list(sim.kineto)
    assert (launch.name(), launch.activity_type()) == ("cudaLaunchKernel", "cuda_runtime")
    assert (kernel.name(), kernel.activity_type(), kernel.duration_ns()) == (
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "kernel", ALL_REDUCE_1E8_NS)
    assert kernel.sim_start_ns == sim.launch_ns  # after one launch cost of host time
    assert sim.default_stream().busy_until_ns == sim.launch_ns + ALL_REDUCE_1E8_NS
    assert sim.collective_ms("all_reduce", 10**8, 2) == pytest.approx(1.01)


@pytest.mark.parametrize(("collective", "ranks", "ms"), [
    ("all_reduce", 4, 0.01 + 1.5),  # 2(n-1)/n = 1.5
    ("all_gather", 4, 0.01 + 0.75),  # (n-1)/n
    ("reduce_scatter", 2, 0.01 + 0.5),
    ("broadcast", 8, 0.01 + 1.0),  # 1
])
def test_the_cost_model_is_latency_plus_bytes_times_bus_factor_over_bus_bandwidth(collective, ranks, ms):
    assert SimulatedCuda().collective_ms(collective, 10**8, ranks) == pytest.approx(ms)
    fast = SimulatedCuda(nccl_latency_us=0.0, nccl_bus_gb_per_s=400.0)  # the parameters: µs, GB/s
    assert fast.collective_ms(collective, 10**8, ranks) == pytest.approx((ms - 0.01) / 4)


def test_one_rank_launches_no_kernel_and_unknown_collectives_raise(sim):
    sim.collective("all_reduce", 10**8, world_size=1)  # NCCL launches none with one rank
    assert not sim.kineto and sim.calls[-1] == ("collective_one_rank", "all_reduce")
    with pytest.raises(ValueError, match="collective='gather'"):
        sim.collective("gather", 8, world_size=2)


@pytest.mark.parametrize(("args", "name"), [
    (("all_reduce",), "ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
    (("all_reduce", torch.bfloat16, "MAX"), "ncclDevKernel_AllReduce_MinMax_bf16_RING_LL"),
    (("reduce_scatter", torch.float16, "AVG"), "ncclDevKernel_ReduceScatter_PreMulSum_f16_RING_LL"),
    (("all_reduce", torch.int64, "AVG"), "ncclDevKernel_AllReduce_SumPostDiv_i64_RING_LL"),
    (("broadcast", torch.int64), "ncclDevKernel_Broadcast_RING_LL"),
    (("all_gather", torch.float32), "ncclDevKernel_AllGather_RING_LL"),
    (("all_to_all",), "ncclDevKernel_SendRecv"),
])
def test_kernel_names_follow_nccl(args, name):
    assert nccl_kernel_name(*args) == name
    # the plugin's classification takes them for communication, of the right collective
    from pytest_gpuperf.verdict.communication import collective_of, is_communication

    assert is_communication(ProfEvent(name, "cuda", 0.0, 1.0, kind="kernel"))
    # NCCL runs all-to-all as send/receive: its kernel's name cannot tell them apart
    assert collective_of(name) == {"all_to_all": "send_recv"}.get(args[0], args[0])


@needs_dist
def test_reduce_ops_of_torch_name_the_kernel():
    assert nccl_kernel_name("all_reduce", torch.float32, dist.ReduceOp.PRODUCT) == "ncclDevKernel_AllReduce_Prod_f32_RING_LL"


# ----------------------------------------------------------------------------- profiler events and the overlap


def test_the_profilers_events_carry_the_nccl_kernel(sim):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        sim.kernel(ms=1.0, name="gemm")
        sim.collective("all_reduce", 10**8, world_size=2)
        torch.cuda.synchronize()
    kernels = [(e.name, e.end_ns - e.start_ns) for e in trace.to_trace_events(prof) if e.kind == "kernel"]
    assert kernels == [("gemm", 1_000_000), ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", ALL_REDUCE_1E8_NS)]


def test_overlap_with_a_compute_kernel_on_another_stream_is_hta_s(sim):
    # simulated clock (µs): gemm launched at 5 on the default stream runs 5..505; the all-reduce
    # launched at 10 on a side stream runs 10..1020, overlapping the gemm for 495 of its 1010 µs
    side = torch.cuda.Stream()
    sim.kernel(ms=0.5, name="gemm")
    sim.collective("all_reduce", 10**8, world_size=2, stream=side)
    torch.cuda.synchronize()
    c = classify(device_events(sim), cuda=True)
    assert c.communication == ((10.0, 1020.0),) and c.computation == ((5.0, 505.0),)
    r = rank_communication(c, (0.0, sim.host_ns / 1e3), calls=1)
    assert sim.host_ns == 1_020_000  # the synchronize waits for the side stream
    assert r.comm_ms == pytest.approx(1.01) and r.step_ms == pytest.approx(1.02)
    assert r.share == pytest.approx(1010 / 1020) and r.overlap == pytest.approx(495 / 1010)
    assert r.collectives == {"all_reduce": 1.0}


# ----------------------------------------------------------------------------- torch.distributed on the simulated device


@pytest.fixture
def group(sim):
    """A one-process "nccl" group on simulated device 1 (gloo underneath)."""
    torch.cuda.set_device(1)
    dist.init_process_group("nccl", store=dist.HashStore(), world_size=1, rank=0)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


@needs_dist
def test_an_nccl_group_is_gloo_underneath_and_nccl_to_its_users(sim, group):
    assert dist.get_backend() == dist.get_backend(group) == "nccl"
    assert dist.distributed_c10d.get_backend() == "gloo"  # torch's own object collectives use the CPU
    assert sim.nccl is not None and sim.nccl.owns() and sim.nccl.groups == [group]
    assert torch.cuda.nccl.version() == SimulatedNccl.VERSION
    with pytest.raises(ValueError, match="monitored_barrier is only implemented for GLOO backend"):
        dist.monitored_barrier()  # as on a real nccl group
    out = [None]
    dist.all_gather_object(out, {"rank": 0})  # gloo, no kernel
    assert out == [{"rank": 0}] and not sim.kineto


@needs_dist
def test_collectives_move_the_values_of_a_simulated_tensor_and_launch_no_kernel_with_one_rank(sim, group):
    t = torch.tensor([3, 4], dtype=torch.int64, device="cuda")
    assert (t.device, t.nbytes, t.dtype) == (torch.device("cuda", 1), 16, torch.int64)
    dist.broadcast(t, src=0)
    dist.all_reduce(t)
    assert t.tolist() == [3, 4]
    assert not [e for e in sim.kineto if e.activity_type() == "kernel"]  # one rank: NCCL launches none
    cpu = torch.ones(2)
    dist.all_reduce(cpu)  # a CPU tensor: gloo's, as it is
    assert cpu.tolist() == [1.0, 1.0]
    with pytest.raises(SimulatedCudaError, match="holds no values"):
        torch.empty(4, device="cuda").tolist()


@needs_dist
def test_sync_collectives_run_on_the_current_stream_async_ones_on_nccls(sim, group, monkeypatch):
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)  # the kernel of 2 ranks; gloo runs 1
    grad = torch.empty(25_000_000, dtype=torch.float32, device="cuda")  # 1e8 bytes on device 1
    dist.all_reduce(grad)
    assert sim.calls[-1] == ("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "cuda:1/default")
    current = sim.current_stream()
    assert current.busy_until_ns == sim.launch_ns + ALL_REDUCE_1E8_NS
    work = dist.all_reduce(grad, async_op=True)  # after the current stream's work, on NCCL's stream
    assert sim.calls[-1] == ("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "cuda:1/nccl")
    nccl = sim.nccl_stream()
    assert nccl.busy_until_ns == current.busy_until_ns + ALL_REDUCE_1E8_NS
    sim.kernel(ms=0.1, name="gemm")  # overlaps it
    assert current.busy_until_ns < nccl.busy_until_ns
    assert work.wait() is True and work.is_completed()
    assert current.busy_until_ns == nccl.busy_until_ns  # the current stream waits for it; the host does not
    assert sim.host_ns < nccl.busy_until_ns


@needs_dist
def test_profile_communication_reads_the_nccl_kernels_on_the_simulated_clock(sim, group, monkeypatch):
    # the plugin's per-rank communication profile: 3 calls of an async all-reduce (1010 µs) under a
    # 2 ms gemm. Call 1: all-reduce 5..1015, gemm 10..2010; calls 2 and 3 start when the previous
    # gemm ends (2010, 4010), together; the step ends at 6010 µs
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    grad = torch.empty(25_000_000, dtype=torch.float32, device="cuda")

    def step():
        work = dist.all_reduce(grad, async_op=True)
        sim.kernel(ms=2.0, name="gemm")
        work.wait()

    r = communication.profile_communication(step, (), {}, torch.device("cuda", 1))
    assert r.comm_ms == pytest.approx(1.01) and r.step_ms == pytest.approx(6010 / 3 / 1e3)
    assert r.share == pytest.approx(3030 / 6010) and r.overlap == pytest.approx((1005 + 1010 + 1010) / 3030)
    assert r.collectives == {"all_reduce": 1.0}


@needs_dist
def test_other_backends_are_torchs_and_everything_is_restored(monkeypatch):
    import torch.cuda.nccl
    from torch.profiler import profile

    names = {(dist, n): getattr(dist, n) for n in SimulatedNccl.API}
    names.update({(torch, "tensor"): torch.tensor, (torch.cuda.nccl, "version"): torch.cuda.nccl.version,
                  (profile, "start"): profile.start, (profile, "stop"): profile.stop,
                  (communication, "_events"): communication._events})
    with monkeypatch.context() as m:
        sim = SimulatedCuda(devices=1).install(m)
        assert all(getattr(obj, n) is not real for (obj, n), real in names.items())
        dist.init_process_group("gloo", store=dist.HashStore(), world_size=1, rank=0)
        try:
            assert dist.get_backend() == "gloo" and not sim.nccl.owns()
        finally:
            dist.destroy_process_group()
    assert all(getattr(obj, n) is real for (obj, n), real in names.items())


def test_what_asks_for_nccl():
    assert SimulatedNccl.is_nccl("nccl") and SimulatedNccl.is_nccl("NCCL")
    assert SimulatedNccl.is_nccl("cpu:gloo,cuda:nccl") and SimulatedNccl.is_nccl(None, torch.device("cuda", 0))
    assert not SimulatedNccl.is_nccl("gloo") and not SimulatedNccl.is_nccl(None)
    assert not SimulatedNccl.is_nccl(None, torch.device("cpu"))
