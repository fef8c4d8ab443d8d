"""End-to-end: 80 columns everywhere (issue 47, item 5).

A user at 80 columns saw the table drop its baseline column for a long verdict cell and cut names
in the middle of a word, a failure's first line of 102 characters, a mode header of 135, and a
legend for columns that were not shown. Here sessions run with ``COLUMNS=80`` (timings scripted,
tests/scripted.py: the same verdicts on any machine; one process, ``--gpuperf-processes=1``, so no
worker processes) and no line of their output is longer than 80 characters.
"""

from __future__ import annotations

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
def test_one_off_slow_period(gpu_bench):
    gpu_bench(sum, range(100))

@pytest.mark.gpu_bench(**OPTS, max_memory="1 KiB")
def test_allocates_past_its_budget(gpu_bench):
    gpu_bench(bytearray, 1 << 16)
"""
QUIET = {"ms": 1.0, "cv": 0.02, "seed": 1, "cpu": {"share": 1.0}}
#: a bursty neighbour: most rounds stretched 1.5-3x, a quarter untouched (tests/test_cpu_time_e2e.py)
BURSTS = {"every": 7, "factors": [1.0, 3.0, 1.5, 2.5]}


def _long_lines(lines: list[str]) -> list[str]:
    """The lines longer than :data:`WIDTH`."""
    return [ln for ln in lines if len(ln) > WIDTH]


def test_every_line_of_an_update_and_a_compare_fits_80_columns(pytester: pytest.Pytester,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    pytester.makepyfile(**{"tests/models/test_matmul_variants": BENCH})
    script_timings(pytester, QUIET)
    update = pytester.runpytest("--gpuperf-update-baselines", *RUN)
    print("\n".join(update.outlines))
    set_timings(pytester, QUIET,
                test_tmul_chain_of_eight_matrices_in_bfloat16={"ms": 2.0, "cv": 0.02, "seed": 3,
                                                               "cpu": {"share": 1.0}},
                test_neighbour_on_a_busy_host={"ms": 1.0, "cv": 0.02, "seed": 3, "machine": BURSTS,
                                               "host_load": 0.98, "cpu": {"ms": 1.0, "cv": 0.02, "seed": 3}},
                test_one_off_slow_period={"ms": 1.0, "cv": 0.02, "slow_calls": 35, "slow_factor": 2.0,
                                          "cpu": {"share": 1.0}})
    rec = pytester.runpytest("--gpuperf", *RUN)
    print("\n".join(rec.outlines))
    assert not _long_lines(update.outlines) and not _long_lines(rec.outlines)
