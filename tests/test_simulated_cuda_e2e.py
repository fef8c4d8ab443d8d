"""End-to-end on the simulated CUDA device (``-p pytest_gpuperf.testing --gpuperf-simulated-cuda=N``,
issue 22): inner
``pytest --gpuperf`` sessions go through the plugin's real CUDA paths (device resolution, CUDA-event
timing, peak memory, the probe, process replicates, pytest-xdist) with exact simulated timings.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

pytest_plugins = ["pytester"]

RUN = ("-p", "no:cacheprovider")
# the op profile (why it got slower: seconds of torch.profiler per worker process) where a test does
# not check it; tests/unit/test_opdiff.py profiles on the simulated device
NO_WHY = (*RUN, "--gpuperf-no-why")


def sim(devices: int | str) -> tuple[str, ...]:
    """The arguments that install the simulated CUDA device for a session (its worker processes get them)."""
    return ("-p", "pytest_gpuperf.testing", f"--gpuperf-simulated-cuda={devices}")

BENCH = """
import os
import pytest
import torch
from pytest_gpuperf.testing import active

@pytest.mark.gpu_bench(device="cuda", counts=False, max_time=0.2)
def test_kernel(gpu_bench):
    sim = active()
    ms = float(os.environ.get("KERNEL_MS", "1.0"))
    def step():
        buf = torch.empty(4 << 20, dtype=torch.int8, device="cuda")  # 4 MiB of simulated device memory
        sim.kernel(ms=ms)
        buf.free()
    gpu_bench(step)
"""


#: :data:`BENCH` and a second benchmark whose kernel time ``CHANGED_MS`` sets: one compare session
#: shows both verdicts (each session starts two worker processes and an extras process, each
#: importing torch)
BENCH_TWO = BENCH + """

@pytest.mark.gpu_bench(device="cuda", counts=False, max_time=0.2)
def test_changed(gpu_bench):
    sim = active()
    ms = float(os.environ.get("CHANGED_MS", "1.0"))
    gpu_bench(lambda: sim.kernel(ms=ms))
"""


def test_update_then_compare_on_the_simulated_device(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_sim=BENCH_TWO)
    rec = pytester.runpytest_subprocess("--gpuperf-update-baselines", "--gpuperf-processes=2", "--gpuperf-max-processes=1",
                                        *sim(1), *NO_WHY)
    rec.assert_outcomes(passed=2)
    (path,) = pytester.path.joinpath("baselines").rglob("*.json")
    assert path.parent.name == "cuda-simulated-gpu"
    entry = json.loads(path.read_text())["benchmarks"]["test_kernel"]
    assert entry["process_medians_ms"] == [pytest.approx(1.0, rel=0.01)] * 2
    assert entry["peak_memory_bytes"] == 4 << 20
    # one compare session: test_kernel is unchanged, test_changed's kernel 1.3x slower
    monkeypatch.setenv("CHANGED_MS", "1.3")
    rec = pytester.runpytest_subprocess("--gpuperf", "--gpuperf-processes=2", "--gpuperf-json=r.json",
                                        "--gpuperf-no-ab-confirm", "--gpuperf-max-processes=1", *sim(1), *NO_WHY)
    rec.assert_outcomes(passed=1, failed=1)
    benches = json.loads(pytester.path.joinpath("r.json").read_text())["benchmarks"]
    c = benches["test_sim.py::test_kernel"]
    assert c["device"] == "cuda:0" and c["comparison"]["verdict"] == "unchanged"
    assert benches["test_sim.py::test_changed"]["comparison"]["verdict"] == "regressed"
    rec.stdout.fnmatch_lines(["regressed 1.3*", "  test_sim.py::test_changed: *1.3*"])


XDIST_BENCH = """
import os
import pytest
import torch
from pytest_gpuperf.testing import active

@pytest.mark.gpu_bench(counts=False, max_time=0.1)
@pytest.mark.parametrize("i", range(4))
def test_kernel(gpu_bench, memory_budget, i):
    sim = active()
    worker = int(os.environ["PYTEST_XDIST_WORKER"][2:])
    # "cuda" in the test's own code is the GPU this worker measures (worker k: GPU k of 2)
    assert torch.cuda.current_device() == worker % 2
    r = gpu_bench(lambda: sim.kernel(ms=1.0))  # launched on the current device
    assert r.device == f"cuda:{worker % 2}" and abs(r.median_ms - 1.0) < 0.01
    with memory_budget("1 MiB") as mem:
        buf = torch.empty(512 << 10, dtype=torch.int8, device="cuda")
        buf.free()
    assert mem.device == f"cuda:{worker % 2}" and mem.peak_bytes == 512 << 10
    open(f"seen_worker{worker}", "w").close()
"""


def test_xdist_workers_measure_and_allocate_on_their_own_gpu(pytester: pytest.Pytester) -> None:
    # Defect 1: worker k measured cuda:k inside torch.cuda.device(k), but nothing made GPU k current,
    # so the test's device="cuda" work ran on GPU 0 (a 1 ms kernel measured as 5 µs on cuda:1), and
    # memory_budget tracked GPU 0.
    pytest.importorskip("xdist")
    pytester.makepyfile(test_sim=XDIST_BENCH)
    rec = pytester.runpytest_subprocess("--gpuperf-update-baselines", "--gpuperf-processes=1", "-n", "2", *sim(2), *RUN)
    rec.assert_outcomes(passed=4)
    assert pytester.path.joinpath("seen_worker1").exists()  # worker 1 (GPU 1) measured at least one


def test_a_bad_simulated_device_count_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_sim=BENCH)
    rec = pytester.runpytest_subprocess("--gpuperf", *sim("two"), *RUN)
    assert rec.ret == pytest.ExitCode.USAGE_ERROR
    rec.stderr.fnmatch_lines(["*--gpuperf-simulated-cuda='two': expected a number of simulated CUDA devices, 1 to 64*"])
    pytester.makeini("[pytest]\ngpuperf_simulated_cuda = 65\n")  # the ini value, when the flag is not given
    rec = pytester.runpytest_subprocess("--gpuperf", "-p", "pytest_gpuperf.testing", *RUN)
    assert rec.ret == pytest.ExitCode.USAGE_ERROR
    rec.stderr.fnmatch_lines(["*gpuperf_simulated_cuda='65': expected a number of simulated CUDA devices, 1 to 64*"])


IN_PROCESS = """
import pytest
import torch
from pytest_gpuperf.testing import active

@pytest.mark.gpu_bench(device="cuda", counts=False, max_time=0.1)
def test_side_stream(gpu_bench):
    sim = active()
    side = torch.cuda.Stream()
    gpu_bench(lambda: sim.kernel(ms=2.0, stream=side))  # work the current stream's events cannot see

@pytest.mark.gpu_bench(device="cuda", counts=False, max_time=0.1, cuda_graph=True)
def test_graph(gpu_bench):
    sim = active()
    gpu_bench(lambda: sim.kernel(ms=0.05))

def test_budget(memory_budget):
    with memory_budget("1 MiB") as mem:
        buf = torch.empty(3 << 20, dtype=torch.int8, device="cuda")
        buf.free()

ANY = ("compute", "memory", "overhead", "sync", "transfer", "data")

@pytest.mark.gpu_bench(device="cuda", counts=True, max_time=0.1, expect_bottleneck=ANY)
def test_counted(gpu_bench):
    sim = active()
    r = gpu_bench(lambda: sim.kernel(ms=0.5, name="gemm_kernel"))
    # counted and classified from the profiler's events, the simulated kernels among them
    assert r.smoke or (r.counts.kernels == 1 and r.counts.syncs == 0 and r.bottleneck is not None)

@pytest.mark.gpu_bench(device="cuda", counts=False, max_time=0.1)
def test_oom(gpu_bench):
    sim = active()
    gpu_bench(lambda: sim.alloc(1 << 50))
"""


def test_an_in_process_session_on_the_simulated_device(pytester: pytest.Pytester) -> None:
    # In this process (so that benchmarks/cuda_coverage.py sees the plugin's CUDA lines run): smoke
    # mode, then an update run with a memory snapshot; the simulator is uninstalled after each session.
    import torch

    from pytest_gpuperf.testing import active

    pytester.makepyfile(test_sim=IN_PROCESS)
    smoke = pytester.runpytest_inprocess(*sim(1), *RUN)
    smoke.assert_outcomes(passed=3, failed=2)  # the budget and the out-of-memory fail in smoke mode too
    assert active() is None and not torch.cuda.is_available()
    rec = pytester.runpytest_inprocess("--gpuperf-update-baselines", "--gpuperf-processes=1",
                                       "--gpuperf-memory-snapshot=snaps", *sim(1), *RUN)
    rec.assert_outcomes(passed=3, failed=2)
    rec.stdout.fnmatch_lines(["*out of memory in benchmark test_sim.py::test_oom on cuda:0: max_memory none*"])
    rec.stdout.fnmatch_lines(["*memory budget exceeded: peak 3.00 MiB > budget 1.00 MiB on cuda:0*",
                              "*memory snapshot: */snaps/*.pickle*"])
    rec.stdout.fnmatch_lines(["*test_side_stream: CUDA events on the current stream of cuda:0 saw*another stream*"])
    assert list(pytester.path.joinpath("snaps").glob("*.pickle"))
    assert active() is None


def test_the_fixture_installs_the_simulator_for_the_test_and_its_sessions(pytester: pytest.Pytester) -> None:
    # A user's own test of their benchmark code, with the plugin's fixture (no plugin argument)
    pytester.makepyfile(test_outer="""
        import os
        import torch
        from pytest_gpuperf.measure.timing import Measurer
        from pytest_gpuperf.core.options import BenchOptions

        def test_timing_on_two_gpus(gpuperf_simulated_cuda, pytester):
            sim = gpuperf_simulated_cuda(devices=2)
            assert torch.cuda.device_count() == 2
            # and its pytester sessions get the plugin argument
            assert os.environ["PYTEST_ADDOPTS"].endswith("-p pytest_gpuperf.testing --gpuperf-simulated-cuda=2")
            t = Measurer(clock=sim.clock).measure(lambda: sim.kernel(ms=2.0), (), {},
                                                  options=BenchOptions(max_time=0.1), device=torch.device("cuda", 1))
            assert abs(t.samples_ms[0] - 2.0) < 0.01
    """)
    rec = pytester.runpytest_subprocess("-p", "pytester", *RUN)
    rec.assert_outcomes(passed=1)


CLOCKED = """
import os
import pytest
from pytest_gpuperf.testing import active

@pytest.mark.gpu_bench(device="cuda", counts=False, max_time=0.1)
def test_clocked(gpu_bench):
    sim = active()
    sim.nvml.kernels_follow_clock = True  # compute-bound: its time follows the SM clock
    sim.nvml.sm_clock_mhz = int(os.environ.get("SM_MHZ", "1980"))
    ms = float(os.environ.get("KERNEL_MS", "1.0"))
    gpu_bench(lambda: sim.kernel(ms=ms))
"""


def test_a_lower_clock_is_not_a_regression_and_slower_code_is(pytester: pytest.Pytester,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 49, in this process: the SM clock read per block of rounds goes into the baseline; the
    same kernel at 1600 MHz (1.24x the time, the same cycles per call) passes inconclusive with
    both clocks named; 1.5x the work at the baseline's clock fails."""
    pytester.makepyfile(test_clk=CLOCKED)
    args = ("--gpuperf-processes=1", "--gpuperf-json=r.json", *sim(1), *RUN)
    pytester.runpytest_inprocess("--gpuperf-update-baselines", *args).assert_outcomes(passed=1)
    (path,) = pytester.path.joinpath("baselines").rglob("*.json")
    stored = json.loads(path.read_text())["benchmarks"]["test_clocked"]["gpu_clock"]
    assert stored["median_mhz"] == 1980 and stored["default_mhz"] == 1980 and stored["dropped_rounds"] == 0
    assert stored["median_kcycles"] == pytest.approx(1980 * 1.005, rel=0.01)  # ms x MHz: 1 ms kernel + 5 µs launch
    from pytest_gpuperf.storage.schema import validate

    validate(json.loads(path.read_text()), "baseline")
    monkeypatch.setenv("SM_MHZ", "1600")
    rec = pytester.runpytest_inprocess("--gpuperf", *args)
    rec.assert_outcomes(passed=1)
    c = json.loads(pytester.path.joinpath("r.json").read_text())["benchmarks"]["test_clk.py::test_clocked"]
    assert c["gpu_clock"]["median_mhz"] == 1600 and c["comparison"]["verdict"] == "inconclusive"
    assert "SM clock 1600 vs 1980 MHz: the clock, not the code, made it slower" in c["comparison"]["note"]
    validate(json.loads(pytester.path.joinpath("r.json").read_text()), "report")
    monkeypatch.setenv("SM_MHZ", "1980")
    monkeypatch.setenv("KERNEL_MS", "1.5")
    rec = pytester.runpytest_inprocess("--gpuperf", *args)
    rec.assert_outcomes(failed=1)
    rec.stdout.fnmatch_lines(["*regressed 1.5*"])
    from pytest_gpuperf.storage.history import HistoryStore

    with HistoryStore(str(pytester.path / ".gpuperf" / "history.sqlite")) as store:  # schema 6: the clock per run
        assert [r["sm_clock_mhz"] for r in store.series("test_clk.py::test_clocked")] == [1980, 1600, 1980]
