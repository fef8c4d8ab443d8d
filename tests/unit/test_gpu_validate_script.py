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


# ----------------------------------------------------------------------------- distributed (issue 35)


def test_distributed_section_skips_with_fewer_than_two_gpus(gv):
    import torch

    found = torch.cuda.device_count()
    if found >= 2:
        pytest.skip("this machine has 2+ GPUs: the section runs")
    assert gv.distributed(torch.device("cuda"), True) == {"skipped": f"needs 2+ CUDA devices (found {found})"}


def test_all_reduce_bandwidth_is_nccl_tests_formula(gv):
    from pytest_gpuperf.verdict.communication import bus_factor

    two = gv.all_reduce_bandwidth(64 * 2**20, 1.0, 2)  # 64 MiB in 1 ms
    assert two["algbw_gb_per_s"] == pytest.approx(67.108864)
    assert two["busbw_gb_per_s"] == pytest.approx(67.108864)  # 2(n-1)/n = 1 on 2 ranks
    eight = gv.all_reduce_bandwidth(64 * 2**20, 1.0, 8)
    assert eight["busbw_gb_per_s"] == pytest.approx(67.108864 * 1.75)
    # the plugin's own factor agrees
    assert eight["busbw_gb_per_s"] / eight["algbw_gb_per_s"] == pytest.approx(bus_factor("all_reduce", 8))


def test_plain_figures_take_the_slowest_rank_per_repetition(gv):
    fig = gv.plain_figures({"backend": "nccl", "world_size": 2, "bytes": 1_000_000, "calls": 20,
                            "per_call_ms": [[1.0, 3.0, 2.0], [2.0, 1.0, 2.5]]})
    assert fig["slowest_per_rep_ms"] == [2.0, 3.0, 2.5] and fig["median_ms"] == 2.5
    assert fig["busbw_gb_per_s"] == pytest.approx(1_000_000 / 2.5e-3 / 1e9)


REPORT = {"benchmarks": {
    "test_dist.py::test_all_reduce": {
        "stats": {"median_ms": 0.25}, "comparison": {"verdict": "unchanged", "ratio": 1.01},
        "ranks": {"world_size": 2, "medians_ms": [0.24, 0.25], "slowest_rank": 1, "imbalance": 1.04},
        "communication": {"per_call_ms": [0.24, 0.25], "share": [0.97, 0.98], "overlap": [0.0, 0.0],
                          "backend": "nccl", "collectives": {"all_reduce": {"calls": 1.0}}},
        "throughput": {"algbw_gb_per_s": 268.4, "busbw_gb_per_s": 268.4}},
    "test_dist.py::test_local": {
        "stats": {"median_ms": 0.4}, "process_medians_ms": [0.4, 0.41, 0.39],
        "ranks": {"world_size": 2, "medians_ms": [0.4, 0.4], "slowest_rank": 0, "imbalance": 1.0},
        "communication": {"error": "rank 1: profiler failed"}},
}}


def test_report_figures_and_the_table_lines(gv):
    figs = gv.report_figures(REPORT)
    ar, local = figs["test_all_reduce"], figs["test_local"]
    assert ar["rank_medians_ms"] == [0.24, 0.25] and ar["imbalance"] == 1.04 and ar["verdict"] == "unchanged"
    assert ar["comm_share"] == [0.97, 0.98] and ar["backend"] == "nccl" and ar["busbw_gb_per_s"] == 268.4
    assert local["communication_error"] == "rank 1: profiler failed" and "busbw_gb_per_s" not in local
    assert local["process_medians_ms"] == [0.4, 0.41, 0.39] and local["verdict"] is None
    section = {"world_size": 2, "backend": "nccl", "torchrun_update": {"exit": 0, "s": 30.1},
               "torchrun_compare": {"exit": 0, "s": 31.0, "benchmarks": figs},
               "nproc_compare": {"exit": 0, "s": 90.0, "benchmarks": figs}, "plain": {"exit": 0, "s": 12.0,
               "busbw_gb_per_s": 270.0, "median_ms": 0.248}, "busbw_plugin/plain": 0.994, "busbw_met": True}
    text = gv.table(dict(RESULT, distributed=section))
    assert "## Distributed (2 ranks: torchrun, then --gpuperf-nproc)" in text
    assert "2 ranks, backend nccl: torchrun_update exit 0 in 30.1 s, torchrun_compare exit 0 in 31.0 s" in text
    row = "| test_all_reduce | unchanged | 0.25 | [0.24, 0.25] | 1.04 | [0.97, 0.98] | [0, 0] | [0.24, 0.25] | 268.4 |"
    assert row + " unchanged |" in text
    assert "| test_local | - | 0.4 | [0.4, 0.4] | 1 | - | - | - | - | - | [0.4, 0.4] |" in text
    assert "plugin / plain torch = 0.994 (plain 270 GB/s at 0.248 ms; target within 10%: yes)" in text
    skipped = gv.table(dict(RESULT, distributed={"skipped": "needs 2+ CUDA devices (found 1)"}))
    assert '({"skipped": "needs 2+ CUDA devices (found 1)"})' in skipped


def test_the_benchmark_project_compiles_on_both_devices(gv):
    for device, opts in (("cuda", ""), ("cpu", ", max_time=0.1")):
        source = gv.DIST_BENCH.format(device=device, elems=16 << 20, n=4096, dtype="bfloat16", opts=opts)
        compile(source, "test_dist.py", "exec")
        assert source.count("@pytest.mark.gpu_bench(**BENCH") == 3


@pytest.mark.subprocess
def test_plain_all_reduce_script_in_a_world_of_one(gv, tmp_path):
    """The plain torch measurement's child script, run as one gloo rank (no torchrun: a few seconds)."""
    import json
    import os
    import socket
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "plain.py").write_text(gv.PLAIN_ALL_REDUCE)
    env = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    run = gv._run_timed([sys.executable, "plain.py", "gloo", "1024", "4", "3", "plain.json"], str(tmp_path), env, 120)
    assert run["exit"] == 0, run
    data = json.loads((tmp_path / "plain.json").read_text())
    assert data["backend"] == "gloo" and data["world_size"] == 1 and data["bytes"] == 4096
    fig = gv.plain_figures(data)
    assert len(fig["per_rank_per_call_ms"]) == 1 and len(fig["slowest_per_rep_ms"]) == 3 and fig["median_ms"] > 0


def test_run_timed_stops_a_command_at_its_timeout(gv, tmp_path):
    import sys

    run = gv._run_timed([sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"],
                        str(tmp_path), None, 1.0)
    assert run["timed_out_after_s"] == 1.0 and run["exit"] != 0 and "started" in run["tail"] and run["s"] < 30


# ----------------------------------------------------------------------------- issue 49's sections


def test_issue_49_sections_skip_cuda_only_ones_on_cpu_and_show_in_the_table(gv):
    import torch

    cpu = torch.device("cpu")
    assert gv.oom_snapshot(cpu, True)["skipped"].startswith("CUDA only")
    assert gv.clock_rules(cpu, True)["skipped"].startswith("CUDA only: the SM clock")
    text = gv.table(dict(RESULT, ab_bisect={"ab": {"verdict": "regressed", "named": ["aten::softmax"],
                                                   "tail": "long output"}},
                         clock_rules={"skipped": "CUDA only: the SM clock is read through NVML"}))
    assert "## Issue 49: A/B and bisect, OOM snapshot, launch-bound calls, the clock rules" in text
    assert '"named": [' in text and "long output" not in text and "CUDA only: the SM clock" in text
    # the A/B's changed kernel is the softmax's: 1.5x its rows at the third commit
    assert "SCALE = 1.5" in gv.TWO_OPS_BENCH.format(scale=1.5, device="cpu", n=8, rows=4, cols=4)
    with pytest.raises(SystemExit):
        gv.main(["--device", "cpu", "--only", "clock"])


def test_the_table_leaves_the_results_tails_for_the_json(gv):
    result = dict(RESULT, ab_bisect={"ab": {"verdict": "regressed", "tail": "long output"}, "tail": "x"})
    gv.table(result)
    assert result["ab_bisect"] == {"ab": {"verdict": "regressed", "tail": "long output"}, "tail": "x"}
