"""Issue 48: counting under valgrind for real — a worker process toggles callgrind around its calls.

The pure-Python test takes 3-12 s (two workers; Python starts uninstrumented); the torch fallback test
imports torch under valgrind (18-32 s on a 2-core VM) and is the only one that does.
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
pytestmark = [
    pytest.mark.skipif(I.valgrind_missing() is not None, reason=f"{I.valgrind_missing()}"),
    pytest.mark.skipif(not I.ctypes_supported(), reason="the ctypes client requests are amd64 code (x86-64 Linux only)"),
]

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


def run_worker(tmp_path: Path, code: str, out: str) -> list[Profile]:
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(code))
    out_dir = tmp_path / out
    out_dir.mkdir()
    cmd, env = I.valgrind_command([sys.executable, str(script)], out_dir)
    proc = subprocess.Popen(cmd, env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    return [parse_callgrind(f.read_text()) for f in I.dump_files(out_dir, proc.pid)]


def test_one_process_measures_several_functions_one_named_dump_each(tmp_path: Path) -> None:
    profiles = {p.name: p for p in run_worker(tmp_path, PURE, "a")}
    assert list(profiles) == [I.LOOP, "f", "g"]
    counts = per_call_counts(profiles, 10)
    assert counts["f"] > 1000  # a 200-step Python loop: thousands of instructions per call
    assert counts["g"] == pytest.approx(2 * counts["f"], rel=0.02)  # g is f twice (+ one Python call)
    again = per_call_counts({p.name: p for p in run_worker(tmp_path, PURE, "b")}, 10)
    assert again["f"] == pytest.approx(counts["f"], rel=1e-3) and again["g"] == pytest.approx(counts["g"], rel=1e-3)


def test_the_torch_fallback_counts_and_dumps_in_order(tmp_path: Path) -> None:
    """torch._C._valgrind_toggle / _valgrind_toggle_and_dump_stats (unnamed dumps, by order)."""
    code = """
    import torch
    from pytest_gpuperf.measure import instructions as I

    torch.set_num_threads(1)
    I.counter("ctypes").start_instrumentation()  # torch's requests cannot start it
    count = I.counter("torch")
    a = torch.ones(16)
    I.measure_one(count, "one", lambda: a + a, number=10, warmup=2)
    I.measure_one(count, "two", lambda: (a + a) + a, number=10, warmup=2)
    """
    profiles = run_worker(tmp_path, code, "t")
    assert [p.name for p in profiles] == ["Client Request", "Client Request"]  # unnamed: by dump order
    one, two = (p.total / 10 for p in profiles)
    assert 1.5 < two / one < 2.5  # two adds against one (plus the loop's own cost in both)
