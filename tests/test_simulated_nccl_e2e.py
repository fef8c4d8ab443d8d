"""The CUDA side of a torchrun session on the simulated device (issue 35): nccl, ``cuda:LOCAL_RANK``
and the kernel-based communication time, without a GPU or NCCL.

One launch: ``python -m torch.distributed.run --standalone --nproc-per-node 2 -m pytest -p
pytest_gpuperf.testing --gpuperf-simulated-cuda=2 --gpuperf --gpuperf-update-baselines ...``. Each
rank has two simulated GPUs; the plugin creates the "nccl" process group (gloo underneath:
``pytest_gpuperf.testing.SimulatedNccl``), so the benchmark's all-reduce really runs between the two
processes and launches a simulated NCCL kernel, whose time, share of the step and overlap with a
compute kernel the report gives exactly, on the simulated clock.
"""

from __future__ import annotations

import json
import sys

import pytest

dist = pytest.importorskip("torch.distributed")
pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available in this torch build")

#: A data-parallel step: the gradient's all-reduce (1e8 bytes, async: on NCCL's stream) overlaps a
#: 2 ms compute kernel on the current stream; ``work.wait()`` joins them. Each rank writes what it
#: saw (device, backend, the simulated kernels and their streams) to ``rank<RANK>.json``.
BENCH = """
import json, os
import pytest
import torch
import torch.distributed as dist
from pytest_gpuperf.testing import active

@pytest.mark.gpu_bench(device="cuda", counts=False, max_time=0.05, min_rounds=5)
def test_step(gpu_bench):
    sim = active()
    grad = torch.empty(25_000_000, dtype=torch.float32, device="cuda")  # 1e8 bytes

    def step():
        work = dist.all_reduce(grad, async_op=True)
        sim.kernel(ms=2.0, name="gemm")
        work.wait()

    gpu_bench(step)
    kernels = sorted({(c[1], c[2]) for c in sim.calls if c[0] == "kernel" and c[1] != "probe_add"})
    with open(f"rank{os.environ['RANK']}.json", "w") as f:
        json.dump({"device": str(gpu_bench.device), "current": torch.cuda.current_device(),
                   "buffer": str(grad.device), "backend": str(dist.get_backend()),
                   "collective_ms": sim.collective_ms("all_reduce", grad.nbytes, dist.get_world_size()),
                   "kernels": kernels}, f)
"""

#: The simulator's defaults (``SimulatedCuda``): launch cost 5 µs; NCCL latency 10 µs, bus
#: bandwidth 100 GB/s. All-reduce of S = 1e8 bytes on 2 ranks (bus factor 2(n-1)/n = 1):
#: 10 µs + 1e8 B / 1e11 B/s = 1010 µs.
LAUNCH_US, COMM_US, GEMM_US = 5, 1010, 2000


def profiled_timeline(calls: int = 3) -> tuple[float, float, float]:
    """(communication ms per call, share, overlap) of ``calls`` profiled steps from an idle device
    (after the profile's warm-up call and synchronize), on the simulated clock (µs from the start):
    each step launches the all-reduce (5 µs host time; NCCL's stream starts it once the current
    stream's earlier work is done), then the gemm (5 µs; after the previous step's gemm), and
    ``work.wait()`` costs no host time. The step ends at the final synchronize, when the last
    gemm ends."""
    host = current = 0
    comm, overlap = [], 0
    for _ in range(calls):
        host += LAUNCH_US
        start = max(host, current)
        comm.append((start, start + COMM_US))
        host += LAUNCH_US
        gemm = (max(host, current), max(host, current) + GEMM_US)
        overlap += min(comm[-1][1], gemm[1]) - max(comm[-1][0], gemm[0])
        current = max(gemm[1], comm[-1][1])
    comm_us = calls * COMM_US
    return comm_us / 1e3 / calls, comm_us / current, overlap / comm_us


def test_nccl_all_reduce_on_the_simulated_device_under_torchrun(pytester: pytest.Pytester) -> None:
    """Two ranks, two simulated GPUs each: the process group is "nccl" as the plugin sees it; rank r
    measures cuda:r (its buffer, its kernels on cuda:r's streams: the all-reduce on NCCL's stream,
    the gemm on the default one); the JSON report's communication of each rank comes from the NCCL
    kernel, with the cost model's time per call, its share of the step and its overlap with the
    gemm, exact on the simulated clock."""
    pytester.makepyfile(test_nccl=BENCH)
    result = pytester.run(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          "-m", "pytest", "-p", "no:cacheprovider", "-p", "pytest_gpuperf.testing",
                          "--gpuperf-simulated-cuda=2", "--gpuperf-update-baselines", "--gpuperf-no-why",
                          "--gpuperf-json", "report.json", timeout=180)
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 0, out
    assert result.stdout.str().count("1 passed") == 2, out  # each rank's own line

    for rank in (0, 1):
        seen = json.loads((pytester.path / f"rank{rank}.json").read_text())
        assert seen["device"] == seen["buffer"] == f"cuda:{rank}" and seen["current"] == rank, seen
        assert seen["backend"] == "nccl", seen
        assert seen["collective_ms"] == pytest.approx(COMM_US / 1e3), seen
        kernels = {tuple(k) for k in seen["kernels"]}
        assert ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", f"cuda:{rank}/nccl") in kernels, kernels
        assert ("gemm", f"cuda:{rank}/default") in kernels, kernels
        # the plugin's own lockstep (rank 0's decisions) broadcasts int64 tensors on the device
        assert ("ncclDevKernel_Broadcast_RING_LL", f"cuda:{rank}/default") in kernels, kernels
        assert not any(stream.startswith(f"cuda:{1 - rank}") for _, stream in kernels), kernels

    report = json.loads((pytester.path / "report.json").read_text())
    entry = report["benchmarks"]["test_nccl.py::test_step"]
    assert entry["device"] == "cuda:0"  # rank 0's report
    comm = entry["communication"]
    per_call_ms, share, overlap = profiled_timeline()
    assert comm["backend"] == "nccl", comm
    assert comm["collectives"] == {"all_reduce": {"calls": 1.0}}, comm  # from the kernel's name
    assert comm["per_call_ms"] == [pytest.approx(per_call_ms, abs=1e-9)] * 2, comm  # 1.01 ms: the cost model
    assert comm["share"] == [pytest.approx(share, abs=1e-9)] * 2, comm  # 3030 / 6010 µs
    assert comm["overlap"] == [pytest.approx(overlap, abs=1e-9)] * 2, comm  # (1005 + 1010 + 1010) / 3030 µs
    assert (per_call_ms, round(share, 4), round(overlap, 4)) == (1.01, 0.5042, 0.9983)
    # the timed rounds: the gemms back to back, the all-reduce hidden under them
    assert entry["stats"]["median_ms"] == pytest.approx(2.0, rel=0.01), entry["stats"]
    (stored,) = (pytester.path / "baselines").rglob("*.json")
    assert stored.parent.name.endswith("-ws2"), stored
