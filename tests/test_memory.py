"""End-to-end tests of memory measurement: the ``memory_budget`` fixture, peak memory in
``gpu_bench``, memory regressions and out-of-memory handling (inner sessions via ``pytester``)."""

from __future__ import annotations

import json

import pytest

from cuda_marks import needs_cuda  # noqa: E402

pytest_plugins = ["pytester"]

RUN = ("-p", "no:cacheprovider")


def test_budget_exceeded_fails_with_message_and_within_budget_passes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import torch

        def test_over(memory_budget):
            with memory_budget("1 MiB"):
                x = torch.ones(4 << 20)  # 16 MiB of float32
                del x

        def test_under(memory_budget):
            with memory_budget("64 MiB") as mem:
                x = torch.ones(4 << 20)
                del x
            assert 16 << 20 <= mem.peak_bytes < 17 << 20
            assert mem.peak_total_bytes == mem.peak_bytes and mem.leaked_bytes == 0
            assert mem.budget_bytes == 64 << 20 and mem.device == "cpu"
            assert mem.report.fragmentation is None

        def test_int_budget(memory_budget):
            with memory_budget(32 * 2**20):
                torch.ones(1 << 20)
        """
    )
    rec = pytester.runpytest(*RUN)
    rec.assert_outcomes(passed=2, failed=1)
    rec.stdout.fnmatch_lines([
        "*memory budget exceeded: peak 16.0 MiB > budget 1.00 MiB on cpu (allocated before the block:*"
    ])


def test_leak_is_caught_and_non_leak_is_not(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import torch
        kept = []

        def test_leaks(memory_budget):
            with memory_budget("64 MiB", max_leak="1 MiB") as mem:
                kept.append(torch.ones(1 << 20))  # 4 MiB survives the block

        def test_no_leak(memory_budget):
            with memory_budget("64 MiB", max_leak="1 MiB") as mem:
                y = torch.ones(1 << 20) * 2
                total = float(y.sum())
                del y
            assert mem.leaked_bytes <= 0 and total == 2 * (1 << 20)
        """
    )
    rec = pytester.runpytest(*RUN)
    rec.assert_outcomes(passed=1, failed=1)
    rec.stdout.fnmatch_lines(["*memory leak: 4.00 MiB still allocated after the block on cpu > max_leak 1.00 MiB*"])


def test_bad_budget_size_is_a_clear_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_bad(memory_budget):
            with memory_budget("12"):
                pass
        """
    )
    rec = pytester.runpytest(*RUN)
    rec.assert_outcomes(failed=1)
    rec.stdout.fnmatch_lines(["*ValueError: invalid size '12': no unit*KiB*"])


GROWING = """
import pathlib
import pytest
import torch

def mib():
    p = pathlib.Path(__file__).with_name("mib.txt")
    return int(p.read_text()) if p.exists() else 16

@pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0, device="cpu", threshold=100.0)  # memory only
def test_alloc(gpu_bench):
    n = mib() * (1 << 18)  # float32 elements in mib() MiB
    r = gpu_bench(lambda: torch.ones(n).sum())
    assert r.peak_memory_bytes >= n * 4
"""


def test_memory_growth_after_baseline_fails_and_shrink_passes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_alloc=GROWING)
    pytester.runpytest("--gpuperf-update-baselines", *RUN).assert_outcomes(passed=1)
    (path,) = pytester.path.joinpath("baselines").rglob("*.json")
    entry = json.loads(path.read_text())["benchmarks"]["test_alloc"]
    assert 16 << 20 <= entry["peak_memory_bytes"] < (16 << 20) + 1024  # the tensor plus the 0-d sum

    pytester.path.joinpath("mib.txt").write_text("20")  # +25% > 2% + 1 MiB
    rec = pytester.runpytest("--gpuperf", *RUN)
    rec.assert_outcomes(failed=1)
    rec.stdout.fnmatch_lines([
        "*memory regressed +25.0%: 16.0 MiB -> 20.0 MiB, allowed +2% + 1.00 MiB*",
        "*test_alloc.py::test_alloc*",
        "*20.0 MiB (+25.0%)*memory regressed*",
    ])

    pytester.path.joinpath("mib.txt").write_text("8")
    rec = pytester.runpytest("--gpuperf", "--gpuperf-json", "r.json", *RUN)
    rec.assert_outcomes(passed=1)
    report = json.loads(pytester.path.joinpath("r.json").read_text())
    mem = report["benchmarks"]["test_alloc.py::test_alloc"]["memory_comparison"]
    assert mem["verdict"] == "improved"
    assert 8 << 20 <= mem["current_bytes"] < (8 << 20) + 1024 and 16 << 20 <= mem["baseline_bytes"] < (16 << 20) + 1024


def test_max_memory_marker_option(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest, torch

        @pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0, max_memory="1 MiB")
        def test_over(gpu_bench):
            gpu_bench(torch.ones, 1 << 20)

        @pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0, max_memory="8 MiB")
        def test_within(gpu_bench):
            gpu_bench(torch.ones, 1 << 20)
        """
    )
    rec = pytester.runpytest("--gpuperf", *RUN)
    rec.assert_outcomes(passed=1, failed=1)
    rec.stdout.fnmatch_lines(["*memory budget exceeded: peak 4.00 MiB > max_memory 1.00 MiB on cpu*", "*test_over*"])


def test_bad_max_memory_errors_its_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpu_bench(max_memory="lots")
        def test_x(gpu_bench):
            gpu_bench(sum, [1])
        """
    )
    rec = pytester.runpytest(*RUN)
    rec.assert_outcomes(errors=1)  # its own test (issue 46)
    assert "max_memory" in rec.stdout.str() and "GiB" in rec.stdout.str()


def test_oom_in_benchmark_fails_only_that_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest, torch

        def explode():
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")

        @pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0, max_memory="2 GiB")
        def test_a_oom(gpu_bench):
            gpu_bench(explode)

        @pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0)
        def test_b_next(gpu_bench):
            assert gpu_bench(sum, [1, 2]).value == 3

        def test_c_oom_in_block(memory_budget):
            with memory_budget("1 GiB"):
                explode()

        def test_d_after(memory_budget):
            with memory_budget("1 MiB"):
                pass
        """
    )
    for args in (("--gpuperf",), ()):
        rec = pytester.runpytest(*args, *RUN)
        rec.assert_outcomes(passed=2, failed=2)
        rec.stdout.fnmatch_lines([
            "*out of memory in benchmark test_*::test_a_oom on cpu: max_memory 2.00 GiB, peak so far*",
            "*out of memory inside the memory_budget block on cpu: budget 1.00 GiB*",
        ])


def test_peak_memory_in_baseline_summary_and_json(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_alloc=GROWING)
    rec = pytester.runpytest("--gpuperf-update-baselines", "--gpuperf-json", "r.json", *RUN)
    rec.assert_outcomes(passed=1)
    rec.stdout.fnmatch_lines(["*peak mem*", "*test_alloc.py::test_alloc*16.0 MiB*"])
    report = json.loads(pytester.path.joinpath("r.json").read_text())
    assert 16 << 20 <= report["benchmarks"]["test_alloc.py::test_alloc"]["peak_memory_bytes"] < (16 << 20) + 1024


def test_smoke_mode_records_no_memory(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpu_bench
        def test_s(gpu_bench):
            assert gpu_bench(sum, [1]).peak_memory_bytes is None
        """
    )
    pytester.runpytest(*RUN).assert_outcomes(passed=1)




@needs_cuda
def test_cuda_budget_oom_and_snapshot(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest, torch

        def test_over(memory_budget):
            x = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")  # allocated before
            with memory_budget("16 MiB", device="cuda") as mem:
                y = torch.empty(32 << 20, dtype=torch.uint8, device="cuda")
                del y

        def test_real_oom(memory_budget):
            with memory_budget("1 GiB", device="cuda"):
                torch.empty(1 << 50, dtype=torch.uint8, device="cuda")

        def test_after_oom(memory_budget):
            with memory_budget("64 MiB", device="cuda") as mem:
                torch.ones(1 << 20, device="cuda")
            assert mem.reserved_peak_bytes >= mem.peak_total_bytes > 0
            assert mem.fragmentation >= 1.0
        """
    )
    # In a process of its own: earlier tests' CUDA memory (in-process inner sessions, the default probe's
    # buffers) would count as "allocated before the block" (a GPU run, 2026-11-29: 352 MiB, not 64 MiB)
    rec = pytester.runpytest_subprocess("--gpuperf-memory-snapshot", "snaps", *RUN)
    rec.assert_outcomes(passed=1, failed=2)
    rec.stdout.fnmatch_lines([
        "*memory budget exceeded: peak 32.0 MiB > budget 16.0 MiB on cuda:0 (allocated before the block: 64.0 MiB)*",
        "*memory snapshot: *snaps*.pickle*",
        "*largest live allocations at the recorded peak*",
    ])
    assert list(pytester.path.joinpath("snaps").glob("*.pickle"))


RETURNS_A_TENSOR = """
import gc, weakref, torch
import pytest

REFS = []

def make():
    t = torch.ones(1 << 16)
    REFS.append(weakref.ref(t))
    return t

@pytest.mark.gpu_bench(max_time=0.02, warmup_time=0.0, device="cpu")
def test_returns_a_tensor(gpu_bench):
    r = gpu_bench(make)
    assert r.value is not None and r.value.numel() == 1 << 16  # the test still gets its value

def test_after():
    gc.collect()
    assert REFS and not [ref for ref in REFS if ref() is not None], "a benchmark's return value outlived its test"
"""


@pytest.mark.parametrize("mode", [(), ("--gpuperf-update-baselines", "--gpuperf-processes", "1")])
def test_the_session_keeps_no_benchmark_return_value_after_its_test(pytester: pytest.Pytester, mode) -> None:
    # Found on a real GPU (H200, 2026-11-26): the session kept every result with its value, so each
    # benchmark's output tensor stayed allocated for the rest of the session (1.7 GiB before the
    # next test's memory_budget block).
    pytester.makepyfile(test_values=RETURNS_A_TENSOR)
    pytester.runpytest(*mode, *RUN).assert_outcomes(passed=2)
