"""Scaling efficiency across world sizes (issue 35, item 5): one benchmark suite recorded at 1, 2
and 4 ranks, then ``gpuperf scaling``.

Three update sessions: a plain one (world size 1, in-process), then torchrun with 2 and with 4
ranks (gloo, the CPU). The timings are scripted per world size (``world_size_ms``, no noise), so
every efficiency is exact on any machine. At 4 ranks ``min_scaling_efficiency`` fails a benchmark
whose scripted efficiency is below it (and its baseline is not written), and a benchmark with no
baseline at a smaller world size gets a note instead of the gate.
"""

from __future__ import annotations

import json
import sys

import pytest

from scripted import script_timings

dist = pytest.importorskip("torch.distributed")
pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available in this torch build")

BENCHES = """
import pytest

@pytest.mark.gpu_bench(max_time=0.05, min_rounds=10, min_scaling_efficiency=0.75)
def test_step(gpu_bench):
    gpu_bench(lambda: None)

@pytest.mark.gpu_bench(max_time=0.05, min_rounds=10, scaling="weak")
def test_weak(gpu_bench):
    gpu_bench(lambda: None)

@pytest.mark.gpu_bench(max_time=0.05, min_rounds=10, min_scaling_efficiency=0.8)
def test_gated(gpu_bench):
    gpu_bench(lambda: None)

@pytest.mark.gpu_bench(max_time=0.05, min_rounds=10, min_scaling_efficiency=0.8)
def test_new(gpu_bench):
    gpu_bench(lambda: None)
"""

#: Scripted medians (ms) per world size, and the efficiencies they give (relative to world size 1;
#: test_new, first recorded at 2 ranks, relative to 2).
TIMINGS = {
    "test_step": {"world_size_ms": {"1": 8.0, "2": 5.0, "4": 2.5}, "cv": 0},  # strong: 80%, 80%
    "test_weak": {"world_size_ms": {"1": 2.0, "2": 2.0, "4": 2.5}, "cv": 0},  # weak: 100%, 80%
    "test_gated": {"world_size_ms": {"1": 4.0, "2": 2.0, "4": 2.0}, "cv": 0},  # strong: 100%, then 50% < 80%
    "test_new": {"world_size_ms": {"2": 2.0, "4": 1.0}, "cv": 0},  # strong from 2 ranks: (2·2) / (4·1) = 100%
}


def torchrun(pytester: pytest.Pytester, ranks: int, *args: str) -> pytest.RunResult:
    """``pytest ARGS`` on ``ranks`` ranks under torchrun (the CPU, gloo)."""
    return pytester.run(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks),
                        "-m", "pytest", "-p", "no:cacheprovider", *args, timeout=240)


def table_rows(out: str) -> dict[str, list[list[str]]]:
    """``gpuperf scaling``'s tables: benchmark name -> its rows split into cells."""
    tables: dict[str, list[list[str]]] = {}
    current = None
    for line in out.splitlines():
        if line and not line.startswith(" ") and "::" in line:
            current = line.split()[0]
            tables[current] = []
        elif current and line.strip() and line.strip()[0].isdigit():
            tables[current].append(line.split())
    return tables


def test_a_scaling_table_from_1_2_and_4_ranks_and_the_gate(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_d=BENCHES)
    script_timings(pytester, **TIMINGS)
    plain = pytester.runpytest("-p", "no:cacheprovider", "--gpuperf-update-baselines", "-k", "not test_new")
    assert plain.ret == 0, plain.stdout.str()

    two = torchrun(pytester, 2, "--gpuperf-update-baselines")
    out = two.stdout.str()
    assert two.ret == 0, out
    assert "min_scaling_efficiency=0.8 not applied at 2 ranks: no baseline at a smaller world size" in out, out

    four = torchrun(pytester, 4, "--gpuperf-update-baselines", "--gpuperf-json", "report.json")
    out = four.stdout.str()
    assert four.ret == 1, out
    assert out.count("1 failed, 3 passed") == 4, out  # the same outcome on every rank
    assert "FAILED test_d.py::test_gated" in out
    key = next(p.name for p in (pytester.path / "baselines").iterdir() if not p.name.endswith(("-ws2", "-ws4")))
    message = (f"scaling efficiency 0.50 at 4 ranks (strong: T1 / (N·TN), T1 = 4.000 ms from "
               f"baselines/{key}/test_d.json, T4 = 2.000 ms) is below min_scaling_efficiency=0.8")
    head, aside = message.split(" (", 1)  # the reason first, within 80 columns, the benchmark under it (issue 47)
    assert f"{head}\n  test_d.py::test_gated\n  ({aside}" in out, out
    report = json.loads((pytester.path / "report.json").read_text())["benchmarks"]
    step = report["test_d.py::test_step"]["scaling"]
    assert (step["kind"], step["world_size"], step["reference_world_size"], step["reference_ms"]) == (
        "strong", 4, 1, 8.0)
    assert step["efficiency"] == pytest.approx(0.8, abs=1e-6)
    assert report["test_d.py::test_new"]["scaling"]["reference_world_size"] == 2
    stored = json.loads((pytester.path / "baselines" / f"{key}-ws4" / "test_d.json").read_text())
    assert sorted(stored["benchmarks"]) == ["test_new", "test_step", "test_weak"]  # the failed gate wrote nothing

    scaling = pytester.run(sys.executable, "-m", "pytest_gpuperf", "scaling")
    out = scaling.stdout.str()
    assert scaling.ret == 0, out + scaling.stderr.str()
    tables = table_rows(out)
    assert tables["test_d.py::test_step"] == [["1", "8.000", "ms", "1.00x", "100.0%", "strong"],
                                              ["2", "5.000", "ms", "1.60x", "80.0%", "strong"],
                                              ["4", "2.500", "ms", "3.20x", "80.0%", "strong"]]
    assert tables["test_d.py::test_weak"] == [["1", "2.000", "ms", "1.00x", "100.0%", "weak"],
                                              ["2", "2.000", "ms", "2.00x", "100.0%", "weak"],
                                              ["4", "2.500", "ms", "3.20x", "80.0%", "weak"]]
    assert tables["test_d.py::test_gated"] == [["1", "4.000", "ms", "1.00x", "100.0%", "strong"],
                                               ["2", "2.000", "ms", "2.00x", "100.0%", "strong"]]
    assert tables["test_d.py::test_new"] == [["2", "2.000", "ms", "1.00x", "100.0%", "strong"],
                                             ["4", "1.000", "ms", "2.00x", "100.0%", "strong"]]
    assert f"test_d.py::test_new  [{key}]  strong scaling, efficiency (2·T2) / (N·TN)" in out
