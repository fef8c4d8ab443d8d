"""End-to-end: 80 columns everywhere (issue 47, item 5).

A user at 80 columns saw the table drop its baseline column for a long verdict cell and cut names
in the middle of a word, a failure's first line of 102 characters, a mode header of 135, and a
legend for columns that were not shown. Here sessions run with ``COLUMNS=80`` (timings scripted,
tests/scripted.py: the same verdicts on any machine; one process, ``--gpuperf-processes=1``, so no
worker processes) and no line of their output is longer than 80 characters.
"""

from __future__ import annotations

import json

import pytest

from scripted import script_timings, set_timings

pytest_plugins = ["pytester"]

RUN = ("-p", "no:cacheprovider", "--gpuperf-processes=1", "-rfE")
WIDTH = 80

BENCH = """
import pytest

OPTS = dict(max_time=0.2, warmup_time=0.01, device="cpu", counts=False)

@pytest.mark.gpu_bench(**OPTS)
@pytest.mark.parametrize("case", ["large-batch"])
def test_tmul_chain_of_eight_matrices_in_bfloat16(gpu_bench, case):
    gpu_bench(sum, range(100))

@pytest.mark.gpu_bench(**OPTS)
def test_neighbour_on_a_busy_host(gpu_bench):
    gpu_bench(sum, range(100))

@pytest.mark.gpu_bench(**OPTS)
def test_unsteady(gpu_bench):
    gpu_bench(sum, range(100))

@pytest.mark.gpu_bench(**OPTS, max_memory="1 KiB")
def test_allocates_past_its_budget(gpu_bench):
    import torch

    gpu_bench(torch.ones, 1 << 16)
"""
QUIET = {"ms": 1.0, "cv": 0.02, "seed": 1, "cpu": {"share": 1.0}}
#: a bursty neighbour: most rounds stretched 1.5-3x, a quarter untouched (tests/test_cpu_time_e2e.py)
BURSTS = {"every": 7, "factors": [1.0, 3.0, 1.5, 2.5]}


def _too_long(lines: list[str]) -> list[str]:
    """The lines longer than :data:`WIDTH`, but those no wrapping can shorten: one token (a path or
    a node id longer than the width, on a line of its own: it is never split), and two lines pytest
    prints itself: ``rootdir: PATH`` (the temporary directory, whose path depends on the machine) and
    the short summary's ``FAILED NODEID`` of a node id too long for a reason beside it (pytest then
    leaves the reason out and never cuts the id)."""
    def pytests(ln: str) -> bool:
        head, _, rest = ln.partition(" ")
        return head in ("rootdir:", "FAILED", "ERROR") and " " not in rest
    return [ln for ln in lines if len(ln) > WIDTH and " " in ln.strip() and not pytests(ln)]


def _spread_baseline(pytester: pytest.Pytester, name: str) -> None:
    """Make ``name``'s stored baseline six widely spread samples of one run: a comparison against
    it is inconclusive (tests/test_user_rough_edges.py)."""
    (path,) = pytester.path.joinpath("baselines").rglob("*.json")
    data = json.loads(path.read_text())
    entry = data["benchmarks"][name]
    entry["samples_ms"] = [entry["stats"]["median_ms"] * f for f in (0.4, 0.6, 0.9, 1.1, 1.6, 2.4)]
    entry["history"] = entry["history"][:1]
    path.write_text(json.dumps(data))


def test_80_columns(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # an update (a memory budget fails it), a compare with a regression (a long name), a verdict on
    # CPU time, an inconclusive one (--gpuperf-strict: it fails too), then an update again
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    pytester.makepyfile(**{"tests/models/test_matmul_variants": BENCH})
    script_timings(pytester, QUIET)
    update = pytester.runpytest("--gpuperf-update-baselines", *RUN)
    update.assert_outcomes(passed=3, failed=1)
    update.stdout.fnmatch_lines(["baseline not updated: memory budget exceeded:", "  peak * > max_memory 1.00 KiB*",
                                 "*new+over max_memory", "*a+b (compact verdict) = a, and b*", "*new = no baseline*"])
    _spread_baseline(pytester, "test_unsteady")
    set_timings(pytester, QUIET,
                test_tmul_chain_of_eight_matrices_in_bfloat16={"ms": 2.0, "cv": 0.02, "seed": 3,
                                                               "cpu": {"share": 1.0}},
                test_neighbour_on_a_busy_host={"ms": 1.0, "cv": 0.02, "seed": 3, "machine": BURSTS,
                                               "host_load": 0.98, "cpu": {"ms": 1.0, "cv": 0.02, "seed": 3}})
    compare = pytester.runpytest("--gpuperf", "--gpuperf-strict", *RUN)
    compare.assert_outcomes(passed=1, failed=3)
    out = compare.outlines
    compare.stdout.fnmatch_lines(["regressed 2.0*x [[]*]: median * -> *", "inconclusive *: median * -> *",
                                  "*[[]cpu]*", "*a verdict 'on CPU time' ([[]cpu]) was decided*"])
    table = out[out.index("name" + out[next(i for i, ln in enumerate(out) if ln.startswith("name "))][4:]):]
    assert "baseline" in table[0].split() and any(ln.startswith("tests/models/...") for ln in table[2:6]), table
    again = pytester.runpytest("--gpuperf-update-baselines", *RUN)
    again.stdout.fnmatch_lines(["*inconclusive*"])
    for rec in (update, compare, again):
        assert not _too_long(rec.outlines), "\n".join(rec.outlines)


def test_80_columns_with_worker_processes(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # the default mode's words at 80 columns: the progress lines, the header with the processes,
    # the first line "(2 processes)" and the legend of the replicates (worker processes: slower)
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    pytester.makepyfile(**{"tests/models/test_matmul_variants": BENCH.split("@pytest.mark.gpu_bench(**OPTS)\ndef "
                                                                            "test_neighbour")[0]})
    run = ("-p", "no:cacheprovider", "--gpuperf-processes=2", "--gpuperf-max-processes=2", "--gpuperf-no-why",
           "--gpuperf-no-ab-confirm", "-rf")
    script_timings(pytester, {"ms": 1.0, "cv": 0.02, "process_factors": [1.0, 1.02]})
    update = pytester.runpytest("--gpuperf-update-baselines", *run)
    update.assert_outcomes(passed=1)
    set_timings(pytester, {"ms": 2.0, "cv": 0.02, "process_factors": [1.0, 1.02]})
    compare = pytester.runpytest("--gpuperf", *run)
    compare.assert_outcomes(failed=1)
    compare.stdout.fnmatch_lines(["regressed *x [[]*]: median * -> * (2 processes)",
                                  "*mode: compare (2 worker processes per benchmark)*",
                                  "median = geometric mean of this run's per-process medians*"])
    for rec in (update, compare):
        assert not _too_long(rec.outlines), "\n".join(rec.outlines)
