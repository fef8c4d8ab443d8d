"""Issue 48: counting under valgrind for real — a worker process toggles callgrind around its calls.

The pure-Python test takes 3-12 s (two workers; Python starts uninstrumented); the torch fallback test
starts its worker instrumented, as the fallback does, and imports torch under it (50 s on a 2-core VM
with other work running) and is the only one that does.
Skipped, with the reason, where valgrind is missing or the ctypes client requests cannot run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_gpuperf.measure import instructions as I
from pytest_gpuperf.verdict.callgrind import Profile, parse_callgrind
from pytest_gpuperf.verdict.instructions import per_call_counts

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(I.valgrind_missing() is not None, reason=f"{I.valgrind_missing()}")
needs_ctypes = pytest.mark.skipif(not I.ctypes_supported(),
                                  reason="the ctypes client requests are amd64 code (x86-64 Linux only)")

PURE = """
from pytest_gpuperf.measure import instructions as I

def f():
    s = 0
    for i in range(200):
        s += i
    return s

def g():
    f()
    f()

print(I.measure_many([("f", f), ("g", g)], number=10, warmup=2))
"""


def run_worker(tmp_path: Path, code: str, out: str, backend: str = "auto") -> list[Profile]:
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(code))
    out_dir = tmp_path / out
    out_dir.mkdir()
    cmd, env = I.valgrind_command([sys.executable, str(script)], out_dir, backend=backend)
    proc = subprocess.Popen(cmd, env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    return [parse_callgrind(f.read_text()) for f in I.dump_files(out_dir, proc.pid)]


@needs_ctypes
def test_one_process_measures_several_functions_one_named_dump_each(tmp_path: Path) -> None:
    profiles = {p.name: p for p in run_worker(tmp_path, PURE, "a")}
    assert list(profiles) == [I.LOOP, "f", "g"]
    counts = per_call_counts(profiles, 10)
    assert counts["f"] > 1000  # a 200-step Python loop: thousands of instructions per call
    assert counts["g"] == pytest.approx(2 * counts["f"], rel=0.02)  # g is f twice (+ one Python call)
    again = per_call_counts({p.name: p for p in run_worker(tmp_path, PURE, "b")}, 10)
    assert again["f"] == pytest.approx(counts["f"], rel=1e-3) and again["g"] == pytest.approx(counts["g"], rel=1e-3)


def test_the_torch_fallback_counts_and_dumps_in_order(tmp_path: Path) -> None:
    """The fallback as it runs where the ctypes requests cannot: the worker started instrumented
    (``backend="torch"``: ``--instr-atstart=yes``), no ctypes request made, counting toggled by
    torch._C._valgrind_toggle / _valgrind_toggle_and_dump_stats (unnamed dumps, by order)."""
    code = """
    import torch
    from pytest_gpuperf.measure import instructions as I

    assert I.one_intra_op_thread() and torch.get_num_threads() == 1
    count = I.counter("torch")
    count.start_instrumentation()  # a no-op with torch's requests: started instrumented
    a = torch.ones(16)
    I.measure_one(count, "one", lambda: a + a, number=10, warmup=2)
    I.measure_one(count, "two", lambda: (a + a) + a, number=10, warmup=2)
    """
    profiles = run_worker(tmp_path, code, "t", backend="torch")
    assert [p.name for p in profiles] == ["Client Request", "Client Request"]  # unnamed: by dump order
    one, two = (p.total / 10 for p in profiles)
    assert 1.5 < two / one < 2.5  # two adds against one (plus the loop's own cost in both)


# ----------------------------------------------------------------------------- the session (--gpuperf-instructions)

pytest_plugins = ["pytester"]

SESSION_BENCH = """
import os
import pytest

N = int(os.environ.get("CHAIN", "200"))

def chain(n):
    x = 0
    for i in range(n):
        x = x + i * 3
    return x

@pytest.mark.gpu_bench(device="cpu", counts=False, instructions=True)
def test_changed(gpu_bench):
    gpu_bench(chain, N)

@pytest.mark.gpu_bench(device="cpu", counts=False, instructions=True)
def test_same(gpu_bench):
    gpu_bench(chain, 200)

@pytest.mark.gpu_bench(device="cpu", counts=False)
def test_not_asked(gpu_bench):
    gpu_bench(chain, 200)
"""
SESSION_RUN = ("-p", "no:cacheprovider", "--gpuperf-processes=2", "--gpuperf-max-processes=2", "--gpuperf-no-why",
               "--gpuperf-no-ab-confirm")


@needs_ctypes
def test_a_session_counts_stores_gates_and_explains_instructions(pytester: pytest.Pytester,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole path users run, in one pair of sessions (scripted timings, real callgrind counts):
    the update run counts the benchmarks that ask in one valgrind worker and stores instructions per
    call in the baseline (no local path) with the run's dump kept for the why; the next run, with
    one benchmark's chain 20% longer, fails that test on its instructions (the function that grew
    named, both dumps kept as artifacts), passes the unchanged one (an A/A across two launches
    within the tolerance), and writes both into the JSON report and the table."""
    import json

    from scripted import script_timings

    pytester.makepyfile(test_chain=SESSION_BENCH)
    script_timings(pytester, {"ms": 1.0, "cv": 0.01})
    rec = pytester.runpytest("--gpuperf-update-baselines", *SESSION_RUN)  # the markers ask
    rec.assert_outcomes(passed=3)
    rec.stdout.fnmatch_lines(["*counting the instructions of 2 benchmark(s) in one valgrind worker*"])
    (path,) = pytester.path.joinpath("baselines").rglob("*.json")
    stored = json.loads(path.read_text())["benchmarks"]
    assert stored["test_not_asked"].get("instructions") is None
    for name in ("test_changed", "test_same"):
        inst = stored[name]["instructions"]
        assert inst["per_call"] > 1_000 and inst["calls"] == I.CALLS and "dump" not in inst
        assert "callgrind" in inst["tool"]
    assert len(list(pytester.path.joinpath(".gpuperf", "instructions").glob("*.callgrind"))) == 2

    monkeypatch.setenv("CHAIN", "240")
    monkeypatch.setenv("COLUMNS", "200")
    run = pytester.runpytest("--gpuperf", "--gpuperf-json=r.json", *SESSION_RUN)
    run.assert_outcomes(passed=2, failed=1)
    run.stdout.fnmatch_lines(["host instructions per call regressed: * -> * (x1.*)",
                              "  test_chain.py::test_changed (callgrind; tolerance 3.0%)",
                              "  why: the function that grew: *"])
    run.stdout.fnmatch_lines(["*instr/call*", "*test_changed*instructions regressed*"])
    report = json.loads(pytester.path.joinpath("r.json").read_text())["benchmarks"]
    changed, same = report["test_chain.py::test_changed"], report["test_chain.py::test_same"]
    assert changed["instruction_comparison"]["verdict"] == "regressed"
    assert 1.1 < changed["instruction_comparison"]["ratio"] < 1.3
    assert same["instruction_comparison"]["verdict"] == "unchanged"
    assert all(Path(p).is_file() for p in changed["instruction_comparison"]["dumps"])
    assert "instruction_comparison" not in report["test_chain.py::test_not_asked"]
