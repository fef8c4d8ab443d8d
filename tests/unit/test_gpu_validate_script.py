"""``benchmarks/gpu_validate.py`` (issue 11's validation script): its report and option handling,
on synthetic results. The measurements themselves are for a GPU run and are not tested here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_validate.py"


@pytest.fixture(scope="module")
def gv():
    spec = importlib.util.spec_from_file_location("gpu_validate", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RESULT = {
    "environment": {"gpu": "NVIDIA H100 80GB HBM3", "driver": "580.1", "torch": "2.11.0", "cuda": "13.0",
                    "triton": "3.5.0"},
    "agreement": [{"workload": "matmul bf16 4096", "median_us": {"ours": 180.0, "ours_flush": 185.0, "timer": 181.0,
                                                              "do_bench": 184.0},
                   "ratios": {"ours/timer": 0.9945, "ours_flush/do_bench": 1.0054},
                   "met": {"ours/timer": True, "ours_flush/do_bench": True}}],
    "overhead": {"overhead_us": 0.4},
    "l2_flush": {"skipped": "needs CUDA (L2 flush)"},
    "cuda_graph": {"error": "RuntimeError: capture failed"},
    "classification": [{"workload": "gemm", "expected": "compute", "got": "compute", "met": True}],
    "counts": {"error": "boom"},
}


def test_table_names_the_versions_and_every_section(gv):
    text = gv.table(RESULT)
    assert text.startswith("# gpu_validate: NVIDIA H100 80GB HBM3 · driver 580.1 · torch 2.11.0 · CUDA 13.0")
    assert "| matmul bf16 4096 | 180 | 185 | - | 181 | 184 | - | ours/timer 0.995, ours_flush/do_bench 1.005 |" in text
    assert "| gemm | compute | compute | yes |" in text
    assert '"error": "RuntimeError: capture failed"' in text and '(counts: {"error": "boom"})' in text
    assert "## The plugin's default path (update, then compare)" in gv.table(dict(RESULT, plugin={"verdict": "unchanged"}))


def test_unknown_section_is_an_error_naming_the_accepted_ones(gv, capsys):
    with pytest.raises(SystemExit):
        gv.main(["--device", "cpu", "--only", "agreement,bogus"])
    err = capsys.readouterr().err
    assert "--only: unknown section(s) ['bogus']" in err and "classification" in err


def test_cuda_sections_skip_on_cpu_with_a_reason(gv):
    import torch

    cpu = torch.device("cpu")
    for section in (gv.overhead, gv.l2_flush, gv.cuda_graphs):
        assert section(cpu, True)["skipped"].startswith("needs CUDA")
