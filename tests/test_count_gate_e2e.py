"""End-to-end: the exact-count gate (issue 14).

Timings are scripted (tests/scripted.py), so the timing verdict is "unchanged" on any machine; the
counts are real (they do not depend on timing): an added ``.item()``, ``.clone()`` or a float64
input must fail with a diff that names what changed, and an unchanged function must pass.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from scripted import script_timings

pytest_plugins = ["pytester"]

RUN = ("-p", "no:cacheprovider")
STEADY = {"ms": 1.0, "cv": 0.02, "seed": 3}

STEP = """
import pytest, torch

torch.manual_seed(0)
W = [torch.randn(32, 32, dtype=torch.{dtype}, requires_grad=True) for _ in range(3)]

@pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0, device="cpu", {marker})
def test_step(gpu_bench):
    x = torch.randn(16, 32, dtype=torch.{dtype})

    def step(x):
        for w in W:
            x = (x @ w).relu()
            {extra}
        x.sum().backward()

    gpu_bench(step, x)
"""


def write_step(pytester: pytest.Pytester, *, extra: str = "pass", dtype: str = "float32", marker: str = "") -> None:
    pytester.makepyfile(test_step=STEP.format(extra=extra, dtype=dtype, marker=marker))


def record(pytester: pytest.Pytester, *args: str) -> None:
    pytester.runpytest("--gpuperf-update-baselines", *RUN, *args).assert_outcomes(passed=1)


@pytest.mark.parametrize(
    "change, expected",
    [
        (dict(extra="x.max().item()"),
         ["op/sync/byte counts regressed: ", "\n  test_step.py::test_step",
          "syncs 0 -> 3 per call (aten::_local_scalar_dense +3)", "aten::max +3"]),
        (dict(extra="x = x.clone()"),
         ["counts regressed: ", "\n  test_step.py::test_step", "ops ", "(aten::clone +3", "bytes "]),
        (dict(dtype="float64"), ["byte counts regressed: bytes ", "\n  test_step.py::test_step"]),
    ],
    ids=["item-per-layer", "clone-per-layer", "float64-input"],
)
def test_a_structural_change_fails_with_the_count_diff(pytester: pytest.Pytester, change, expected) -> None:
    script_timings(pytester, STEADY)
    write_step(pytester)
    record(pytester)
    write_step(pytester, **change)
    rec = pytester.runpytest("--gpuperf", *RUN)
    rec.assert_outcomes(failed=1)
    out = rec.stdout.str()
    for text in expected:
        assert text in out, text
    assert "counts regressed" in out and "baseline: baselines/" in out
    # the timing verdict is independent (scripted: unchanged) and still shown
    assert "unchanged, counts regressed" in out


def test_an_unchanged_function_passes_the_count_gate(pytester: pytest.Pytester) -> None:
    script_timings(pytester, STEADY)
    write_step(pytester)
    record(pytester)
    for _ in range(3):
        rec = pytester.runpytest("--gpuperf", "--gpuperf-json", "r.json", *RUN)
        rec.assert_outcomes(passed=1)
        entry = next(iter(json.loads(pytester.path.joinpath("r.json").read_text())["benchmarks"].values()))
        assert entry["count_comparison"]["verdict"] == "unchanged"
        assert entry["count_comparison"]["failed"] is False


def test_fewer_ops_is_improved_and_passes(pytester: pytest.Pytester) -> None:
    script_timings(pytester, STEADY)
    write_step(pytester, extra="x = x.clone()")
    record(pytester)
    write_step(pytester)
    rec = pytester.runpytest("--gpuperf", *RUN)
    rec.assert_outcomes(passed=1)
    assert "counts improved" in rec.stdout.str()


def test_counts_are_stored_with_every_baseline_run(pytester: pytest.Pytester) -> None:
    script_timings(pytester, STEADY)
    write_step(pytester)
    record(pytester)
    record(pytester)
    (path,) = pytester.path.joinpath("baselines").rglob("*.json")
    entry = json.loads(path.read_text())["benchmarks"]["test_step"]
    assert entry["counts"]["ops"] > 0 and entry["counts"]["syncs"] == 0
    assert entry["counts"]["by_name"]["ops"]["aten::mm"] >= 3
    # 3 matmuls forward, 5 backward (the first layer's input needs no gradient), 2*16*32*32 FLOP each
    assert entry["counts"]["flops"] == 8 * 2 * 16 * 32 * 32
    assert [h["counts"] for h in entry["history"]] == [entry["history"][0]["counts"]] * 2
    assert "by_name" not in entry["history"][0]["counts"]  # names of the newest run only
    rec = pytester.run(sys.executable, "-m", "pytest_gpuperf", "show", "baselines")
    assert rec.ret == 0 and "ops " in rec.stdout.str() and "syncs 0" in rec.stdout.str()


def test_max_syncs_budget_needs_no_baseline(pytester: pytest.Pytester) -> None:
    script_timings(pytester, STEADY)
    write_step(pytester, extra="x.max().item()", marker="max_syncs=0")
    rec = pytester.runpytest("--gpuperf", *RUN)
    rec.assert_outcomes(failed=1)
    assert ("3 syncs per call is over max_syncs=0 (aten::_local_scalar_dense 3)\n  test_step.py::test_step"
            in rec.stdout.str())  # the reason first (issue 47)
    # an update run refuses to record a benchmark over its own budget
    rec = pytester.runpytest("--gpuperf-update-baselines", *RUN)
    rec.assert_outcomes(failed=1)
    assert "baseline not updated" in rec.stdout.str()
    assert not list(pytester.path.joinpath("baselines").rglob("*.json"))


def test_recompiles_are_reported_and_fail_max_recompiles(pytester: pytest.Pytester) -> None:
    script_timings(pytester, STEADY)
    pytester.makepyfile(test_compiled="""
        import itertools, pytest, torch

        f = torch.compile(lambda x: x.sin() + 1, backend="eager")
        sizes = itertools.count(1)

        @pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0, device="cpu", max_recompiles=0)
        def test_new_shape_each_call(gpu_bench):
            gpu_bench.pedantic(f, setup=lambda: ((torch.randn(next(sizes) % 5 + 1),), {}), rounds=6)

        @pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0, device="cpu", max_recompiles=0)
        def test_same_shape(gpu_bench):
            g = torch.compile(lambda x: x.cos() * 2, backend="eager")
            gpu_bench(g, torch.randn(8))
    """)
    rec = pytester.runpytest("--gpuperf", "--gpuperf-json", "r.json", *RUN)
    rec.assert_outcomes(failed=1, passed=1)
    out = rec.stdout.str()
    assert "recompiles is over max_recompiles=0" in out
    assert "torch.compile compiled" in out and "after the first call" in out  # reported as a warning too
    report = json.loads(pytester.path.joinpath("r.json").read_text())["benchmarks"]
    bad = next(e for k, e in report.items() if "new_shape" in k)
    good = next(e for k, e in report.items() if "same_shape" in k)
    assert bad["counts"]["recompiles"] >= 1
    assert good["counts"]["recompiles"] == 0 and good["counts"]["unique_graphs"] == 0


def test_count_gate_can_be_switched_off(pytester: pytest.Pytester) -> None:
    script_timings(pytester, STEADY)
    write_step(pytester)
    record(pytester)
    write_step(pytester, extra="x.max().item()")
    rec = pytester.runpytest("--gpuperf", "--gpuperf-no-counts", "--gpuperf-json", "r.json", *RUN)
    rec.assert_outcomes(passed=1)
    entry = next(iter(json.loads(pytester.path.joinpath("r.json").read_text())["benchmarks"].values()))
    assert entry["counts"] is None and entry["count_comparison"] is None
    pytester.makeini("[pytest]\ngpuperf_counts = false\n")
    pytester.runpytest("--gpuperf", *RUN).assert_outcomes(passed=1)


def test_reports_carry_counts_and_throughput(pytester: pytest.Pytester) -> None:
    script_timings(pytester, STEADY)
    write_step(pytester, marker='items_per_call=16, items="samples"')
    rec = pytester.runpytest("--gpuperf", "--gpuperf-json", "r.json", "--gpuperf-markdown", "r.md",
                             "--junitxml", "j.xml", *RUN)
    rec.assert_outcomes(passed=1)
    out = rec.stdout.str()
    header = next(line for line in out.splitlines() if line.startswith("name "))
    for column in ("ops/kern", "syncs", "FLOP/s", "B/s", "samples/s"):
        assert column in header
    entry = next(iter(json.loads(pytester.path.joinpath("r.json").read_text())["benchmarks"].values()))
    # scripted 1 ms per call: 16 samples per call is 16,000 samples/s
    assert entry["throughput"]["items_per_s"] == pytest.approx(16_000, rel=0.05)
    assert entry["throughput"]["flops_per_s"] == pytest.approx(entry["counts"]["flops"] / 1e-3, rel=0.05)
    assert entry["counts"]["cost_ms"] > 0
    assert "16.0k samples/s" in out or "16k samples/s" in out
    md = pytester.path.joinpath("r.md").read_text()
    assert "| ops/kernels | syncs | FLOP/s | B/s |" in md
    xml = pytester.path.joinpath("j.xml").read_text()
    assert 'name="ops"' in xml and 'name="syncs" value="0"' in xml and 'name="items_per_s"' in xml


def test_cli_compare_fails_on_a_count_regression(pytester: pytest.Pytester) -> None:
    script_timings(pytester, STEADY)
    write_step(pytester)
    pytester.runpytest("--gpuperf", "--gpuperf-json", "a.json", *RUN).assert_outcomes(passed=1)
    write_step(pytester, extra="x.max().item()")
    pytester.runpytest("--gpuperf", "--gpuperf-json", "b.json", *RUN).assert_outcomes(passed=1)  # no baseline
    rec = pytester.run(sys.executable, "-m", "pytest_gpuperf", "compare", "a.json", "b.json")
    assert rec.ret == 1
    out = rec.stdout.str()
    assert "syncs 0 -> 3 per call (aten::_local_scalar_dense +3)" in out
    assert "counts: 1 regressed of 1 compared" in out
    same = pytester.run(sys.executable, "-m", "pytest_gpuperf", "compare", "a.json", "a.json")
    assert same.ret == 0


def test_counts_do_not_change_under_load() -> None:
    """20 counting calls of one training step, while a background process keeps a core busy: the
    counts are identical every time (the gate does not depend on the machine's state)."""
    torch = pytest.importorskip("torch")
    from pytest_gpuperf.measure.counting import count_call
    from pytest_gpuperf.verdict.counts import decide_counts

    w = torch.randn(32, 32, requires_grad=True)

    def step(x):
        y = (x @ w).relu()
        y.max().item()
        y.sum().backward()

    x = torch.randn(16, 32)
    step(x)  # w.grad exists from now on, as after a benchmark's warmup
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)
        first, _ = count_call(step, (x,), {}, torch.device("cpu"))
        for _ in range(20):
            counts, _ = count_call(step, (x,), {}, torch.device("cpu"))
            assert counts == first
            assert not decide_counts(counts, [first.totals()], first).failed
    finally:
        busy.kill()
        busy.wait()
    assert first.syncs == 1 and first.syncs_by_name == {"aten::_local_scalar_dense": 1}
