"""The ``gpuperf`` command line (``pytest_gpuperf.cli.reports``): compare and show.

Inputs are written to ``tmp_path`` from seeded log-normal samples, so every verdict is
deterministic; ``main([...])`` is called in-process (one subprocess test checks
``python -m pytest_gpuperf``).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pytest_gpuperf.cli.reports import main
from scripted import SUITE_BASE, SUITE_CURRENT

MODULE = "tests/perf/test_demo.py"
ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- helpers


def samples(seed: int, median_ms: float = 1.0, sigma: float = 0.05, n: int = 200) -> list[float]:
    """Seeded log-normal per-call times (ms) around ``median_ms``."""
    return np.random.default_rng(seed).lognormal(math.log(median_ms), sigma, n).tolist()


def entry(
    bid: str,
    samples_ms: list[float],
    *,
    history_medians: list[float] | None = None,
    options: dict | None = None,
    peak: int | None = None,
    stamp: str = "2026-11-21T15:31:22Z",
) -> dict:
    """A benchmark entry as the plugin stores it (only the fields the command line reads)."""
    med = float(np.median(samples_ms))
    e = {
        "schema_version": 2,
        "id": bid,
        "name": bid,
        "device": "cpu",
        "stats": {"median_ms": med},
        "samples_ms": samples_ms,
        "rounds": len(samples_ms),
        "options": {"threshold": 0.05, "alpha": 0.01, **(options or {})},
        "peak_memory_bytes": peak,
        "timestamp_utc": stamp,
    }
    if history_medians is not None:
        e["history"] = [
            {"median_ms": m, "timestamp_utc": f"2026-11-{10 + i:02d}T00:00:00Z", "peak_memory_bytes": peak}
            for i, m in enumerate(history_medians)
        ]
    return e


def write_baseline(path: Path, entries: dict[str, dict], module: str | None = MODULE, device_key: str = "cpu-test") -> Path:
    """A baseline file ``{"schema_version", "device_key", "module", "benchmarks"}``."""
    data = {"schema_version": 2, "device_key": device_key, "benchmarks": entries}
    if module is not None:
        data["module"] = module
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


def write_report(path: Path, entries: dict[str, dict], module: str = MODULE) -> Path:
    """A ``--gpuperf-json`` report: entries keyed ``module::id``, each with its ``module``."""
    data = {
        "schema_version": 2,
        "kind": "report",
        "created_utc": "2026-11-22T10:00:00Z",
        "git_commit": None,
        "environments": {},
        "benchmarks": {f"{module}::{bid}": dict(e, module=module, verdict=None, comparison=None) for bid, e in entries.items()},
        "warnings": [],
    }
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


def row(out: str, name: str) -> str:
    """The table row of benchmark ``name`` (the line starting with it)."""
    lines = [ln for ln in out.splitlines() if ln.strip().split("  ")[0].endswith(name)]
    assert lines, f"no row for {name} in:\n{out}"
    return lines[0]


@pytest.fixture
def base_file(tmp_path: Path) -> Path:
    return write_baseline(tmp_path / "base.json", {"test_a": entry("test_a", samples(1))})


# ----------------------------------------------------------------------------- compare


def test_regressed_exits_1(tmp_path, base_file, capsys):
    cur = write_report(tmp_path / "cur.json", {"test_a": entry("test_a", samples(2, median_ms=1.3))})
    assert main(["compare", str(base_file), str(cur)]) == 1
    out = capsys.readouterr().out
    r = row(out, "test_a")
    assert "regressed" in r and "1.3" in r and " ms" in r and "x-" in r  # medians with units, ratio CI
    assert "\nregressed " in out and "\n  tests/perf/test_demo.py::test_a: median " in out  # comparison_message
    assert out.rstrip().endswith("1 regressed, 0 improved, 0 inconclusive, 0 unchanged")


def test_unchanged_exits_0(tmp_path, base_file, capsys):
    cur = write_report(tmp_path / "cur.json", {"test_a": entry("test_a", samples(3))})
    assert main(["compare", str(base_file), str(cur)]) == 0
    out = capsys.readouterr().out
    assert "unchanged" in row(out, "test_a")
    assert "0 regressed, 0 improved, 0 inconclusive, 1 unchanged" in out


def test_instructions_are_compared_and_a_regression_exits_1(tmp_path, capsys):
    """Issue 48: the two files' instruction counts go through the plugin's gate (3%; another build
    not compared), beside the same timing."""
    tool = "valgrind-3.19.0 callgrind, CPython 3.11.7, torch 2.13.0+cpu"

    def counted(bid: str, per_call: float, tool: str = tool) -> dict:
        return dict(entry(bid, samples(5)), instructions={"per_call": per_call, "calls": 20, "tool": tool})

    base = write_baseline(tmp_path / "b.json", {"test_a": counted("test_a", 10_000), "test_b": counted("test_b", 10_000),
                                                "test_c": counted("test_c", 10_000)})
    cur = write_report(tmp_path / "c.json", {"test_a": counted("test_a", 10_200), "test_b": counted("test_b", 10_600),
                                             "test_c": counted("test_c", 20_000, tool.replace("2.13.0", "2.12.0"))})
    assert main(["compare", str(base), str(cur)]) == 1
    out = capsys.readouterr().out
    assert row(out, "test_a").split()[-1] == "unchanged" and row(out, "test_b").split()[-1] == "regressed"
    assert row(out, "test_c").split()[-1] == "inconclusive"
    assert "test_b: instructions per call 10,000 -> 10,600 (x1.0600, regressed; tolerance 3.0%)" in out
    assert "not compared: the baseline was counted by" in out
    assert out.rstrip().endswith("instructions: 1 regressed of 3 compared")


def test_improved_exits_0(tmp_path, base_file, capsys):
    cur = write_report(tmp_path / "cur.json", {"test_a": entry("test_a", samples(4, median_ms=0.7))})
    assert main(["compare", str(base_file), str(cur)]) == 0
    assert "0 regressed, 1 improved" in capsys.readouterr().out


@pytest.mark.parametrize(
    "content, problem",
    [
        (None, "no such file"),
        ('{"schema_version": 2, "benchmarks": {', "not valid JSON"),
        ("[1, 2, 3]", "not a JSON object"),
        ('{"hello": "world"}', "neither 'schema_version' nor 'benchmarks'"),
        ('{"schema_version": 2, "module": "m.py", "benchmarks": {"t": {"samples_ms": []}}}', "no 'samples_ms' list"),
        ('{"schema_version": 2, "kind": "report", "benchmarks": {"m.py::t": {"samples_ms": [1, -2]}}}',
         "not a positive number"),
        ('{"schema_version": 2, "kind": "something-else", "benchmarks": {}}', "unknown 'kind'"),
        ('{"schema_version": 99, "benchmarks": {}}', "upgrade the plugin"),
    ],
    ids=["missing", "corrupt-json", "not-object", "wrong-shape", "empty-samples", "report-bad-sample",
         "unknown-kind", "newer-schema"],
)
@pytest.mark.parametrize("side", ["baseline", "current"])
def test_unreadable_input_exits_2(tmp_path, base_file, capsys, content, problem, side):
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content, encoding="utf-8")
    argv = ["compare", str(bad), str(base_file)] if side == "baseline" else ["compare", str(base_file), str(bad)]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert str(bad) in captured.err and problem in captured.err
    assert captured.out == ""


def test_baseline_error_message_is_reused(tmp_path, base_file, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": "two", "benchmarks": {}}', encoding="utf-8")
    assert main(["compare", str(bad), str(base_file)]) == 2
    err = capsys.readouterr().err
    assert f"unusable baseline file (missing or non-integer 'schema_version'): {bad}" in err


@pytest.mark.parametrize("stats, problem", [([1.0], "not a JSON object"), ({"median_ms": -3.0}, "positive")])
def test_entry_with_bad_stats_exits_2(tmp_path, capsys, stats, problem):
    # baseline.parse now checks "stats": the CLI reports its message and exits 2
    e = dict(entry("test_a", samples(40)), stats=stats)
    base = write_baseline(tmp_path / "base.json", {"test_a": e})
    cur = write_report(tmp_path / "cur.json", {"test_a": entry("test_a", samples(41))})
    assert main(["compare", str(base), str(cur)]) == 2
    err = capsys.readouterr().err
    assert str(base) in err and problem in err


def test_options_not_an_object_use_defaults(tmp_path, base_file, capsys):
    cur = write_report(tmp_path / "cur.json", {"test_a": dict(entry("test_a", samples(42, median_ms=1.10)), options=None)})
    assert main(["compare", str(base_file), str(cur)]) == 1  # default threshold 5%
    assert "threshold +5%" in capsys.readouterr().out


def test_inconclusive_fails_only_with_fail_on_inconclusive(tmp_path, capsys):
    base = write_baseline(tmp_path / "base.json", {"test_a": entry("test_a", samples(5, sigma=0.3, n=6))})
    cur = write_report(tmp_path / "cur.json", {"test_a": entry("test_a", samples(6, median_ms=1.04, sigma=0.3, n=6))})
    assert main(["compare", str(base), str(cur)]) == 0
    out = capsys.readouterr().out
    assert "inconclusive" in row(out, "test_a")
    assert "0 regressed, 0 improved, 1 inconclusive, 0 unchanged" in out
    assert main(["compare", str(base), str(cur), "--fail-on", "inconclusive"]) == 1
    assert main(["compare", str(base), str(cur), "--fail-on", "regressed"]) == 0


def test_report_vs_report(tmp_path, capsys):
    base = write_report(tmp_path / "main.json", {
        "test_a": entry("test_a", samples(7)),
        "test_b": entry("test_b", samples(8, median_ms=0.02)),
        "test_gone": entry("test_gone", samples(9)),
    })
    cur = write_report(tmp_path / "pr.json", {
        "test_a": entry("test_a", samples(10, median_ms=1.3)),
        "test_b": entry("test_b", samples(11, median_ms=0.02)),
        "test_new": entry("test_new", samples(12)),
    })
    assert main(["compare", str(base), str(cur)]) == 1
    out = capsys.readouterr().out
    assert "(report)" in out
    assert "regressed" in row(out, "::test_a")
    b = row(out, "::test_b")
    assert "unchanged" in b and "µs" in b  # 20 µs medians shown in µs
    assert f"only in baseline {base}: {MODULE}::test_gone" in out
    assert f"only in current {cur}: {MODULE}::test_new" in out
    assert "1 regressed, 0 improved, 0 inconclusive, 1 unchanged" in out


def test_baseline_vs_report_by_full_name(tmp_path, base_file, capsys):
    other = "tests/perf/test_other.py"
    cur = tmp_path / "cur.json"
    data = json.loads(write_report(cur, {"test_a": entry("test_a", samples(13))}).read_text())
    # the same test id in another module must not be matched: the full names decide
    data["benchmarks"][f"{other}::test_a"] = dict(entry("test_a", samples(14, median_ms=2.0)), module=other)
    cur.write_text(json.dumps(data))
    assert main(["compare", str(base_file), str(cur)]) == 0
    out = capsys.readouterr().out
    assert "(baseline)" in out and "(report)" in out
    assert "matched by test id" not in out
    assert f"only in current {cur}: {other}::test_a" in out
    assert "0 regressed, 0 improved, 0 inconclusive, 1 unchanged" in out


def test_fallback_matches_by_test_id(tmp_path, capsys):
    base = write_baseline(tmp_path / "base.json", {"test_a": entry("test_a", samples(15))}, module="old/path/test_demo.py")
    cur = write_report(tmp_path / "cur.json", {"test_a": entry("test_a", samples(16, median_ms=1.3))})
    assert main(["compare", str(base), str(cur)]) == 1
    out = capsys.readouterr().out
    assert "matched by test id" in out
    assert "regressed" in row(out, f"{MODULE}::test_a")


def test_baseline_without_module_matches_by_test_id(tmp_path, capsys):
    base = write_baseline(tmp_path / "base.json", {"test_k[cls::param]": entry("k", samples(17))}, module=None)
    cur = write_report(tmp_path / "cur.json", {"test_k[cls::param]": entry("k", samples(18))})
    assert main(["compare", str(base), str(cur)]) == 0
    out = capsys.readouterr().out
    assert "matched by test id" in out and "1 unchanged" in out


def test_no_common_benchmark_exits_2(tmp_path, base_file, capsys):
    cur = write_report(tmp_path / "cur.json", {"test_zzz": entry("test_zzz", samples(19))})
    assert main(["compare", str(base_file), str(cur)]) == 2
    err = capsys.readouterr().err
    assert "no benchmark in common" in err and str(base_file) in err and "test_zzz" in err


def test_threshold_flag_changes_verdict(tmp_path, base_file, capsys):
    cur = write_report(tmp_path / "cur.json", {"test_a": entry("test_a", samples(20, median_ms=1.10))})
    assert main(["compare", str(base_file), str(cur)]) == 1  # +10% > 5%
    assert "regressed" in row(capsys.readouterr().out, "test_a")
    assert main(["compare", str(base_file), str(cur), "--threshold", "0.2"]) == 0
    assert "unchanged" in row(capsys.readouterr().out, "test_a")


def test_threshold_defaults_to_current_entry_options(tmp_path, base_file, capsys):
    cur = write_report(tmp_path / "cur.json",
                       {"test_a": entry("test_a", samples(20, median_ms=1.10), options={"threshold": 0.2})})
    assert main(["compare", str(base_file), str(cur)]) == 0
    assert "unchanged" in row(capsys.readouterr().out, "test_a")
    assert main(["compare", str(base_file), str(cur), "--threshold", "0.05"]) == 1  # the flag wins


def test_alpha_flag(tmp_path, capsys):
    # few samples, a real +12% shift: p is small but not below a tiny alpha (and the CI reaches below
    # 1+T, so the CI alone does not decide)
    base = write_baseline(tmp_path / "base.json", {"test_a": entry("test_a", samples(21, n=12))})
    cur = write_report(tmp_path / "cur.json", {"test_a": entry("test_a", samples(22, median_ms=1.12, n=12))})
    assert main(["compare", str(base), str(cur)]) == 1
    capsys.readouterr()
    assert main(["compare", str(base), str(cur), "--alpha", "1e-9"]) == 0


def test_baseline_history_raises_the_floor(tmp_path, capsys):
    # 5 stored runs wandering +-10%: a +10% current run is within the run-to-run noise
    hist = [0.9, 1.1, 0.95, 1.08, 1.0]
    base = write_baseline(tmp_path / "base.json", {"test_a": entry("test_a", samples(23), history_medians=hist)})
    cur = write_report(tmp_path / "cur.json", {"test_a": entry("test_a", samples(24, median_ms=1.10))})
    assert main(["compare", str(base), str(cur), "-v"]) == 0
    out = capsys.readouterr().out
    assert "unchanged" in row(out, "test_a")
    assert "baseline history: 5 run(s)" in out and "effect floor" in out


@pytest.mark.parametrize("argv", [["--threshold", "-1"], ["--alpha", "2"], ["--fail-on", "never"]])
def test_bad_flags_exit_2(tmp_path, base_file, capsys, argv):
    assert main(["compare", str(base_file), str(base_file), *argv]) == 2
    assert "usage:" in capsys.readouterr().err


def test_no_subcommand_exits_2(capsys):
    assert main([]) == 2
    assert "compare" in capsys.readouterr().err


@pytest.mark.parametrize("cmd", ["compare", "show"])
def test_help_exits_0(cmd, capsys):
    assert main([cmd, "--help"]) == 0
    out = capsys.readouterr().out
    assert "usage:" in out and "example" in out and f"gpuperf {cmd}" in out


def test_module_entry_point(tmp_path, base_file):
    cur = write_report(tmp_path / "cur.json", {"test_a": entry("test_a", samples(25, median_ms=1.3))})
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_gpuperf", "compare", str(base_file), str(cur)],
        capture_output=True, text=True, encoding="utf-8", timeout=120, cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stderr
    assert "regressed" in proc.stdout and "1 regressed" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "pytest_gpuperf", "show", "--help"],
                          capture_output=True, text=True, encoding="utf-8", timeout=120, cwd=tmp_path)
    assert proc.returncode == 0 and "python -m pytest_gpuperf show" in proc.stdout


# ----------------------------------------------------------------------------- show


def make_baselines(root: Path) -> None:
    write_baseline(root / "cpu-test" / "tests__perf__test_demo.json", {
        "test_a": entry("test_a", samples(30), history_medians=[1.02, 0.98, 1.0], peak=3 * 2**20),
        "test_b": entry("test_b", samples(31, median_ms=0.0042), stamp="2026-10-01T08:00:00Z"),
    })
    write_baseline(root / "cuda-test-gpu" / "tests__perf__test_demo.json",
                   {"test_a": entry("test_a", samples(32, median_ms=0.25), history_medians=[0.26, 0.25])},
                   device_key="cuda-test-gpu")


def test_show_lists_benchmarks(tmp_path, capsys):
    make_baselines(tmp_path / "bl")
    assert main(["show", str(tmp_path / "bl")]) == 0
    out = capsys.readouterr().out
    assert "device cpu-test:" in out and "device cuda-test-gpu:" in out
    cpu_part, gpu_part = out.split("device cuda-test-gpu:")
    a = row(cpu_part, "test_a").split()
    assert a[:4] == ["test_a", "3", "1", "ms"] and "2026-11-12" in a and "3.00 MiB" in " ".join(a)
    b = row(cpu_part, "test_b")
    assert " 1 " in b and "µs" in b and "2026-10-01" in b and b.rstrip().endswith("-")
    g = row(gpu_part, "test_a")
    assert " 2 " in g and "250 µs" in g and "2026-11-11" in g


def test_show_runs_lists_every_stored_run(tmp_path, capsys):
    # Issue 24: the table's legend points at `gpuperf show --runs` for each stored run's own median.
    e = entry("test_a", samples(30), peak=2**20)
    e["history"] = [
        {"median_ms": 1.02, "iqr_ms": 0.051, "rounds": 200, "timestamp_utc": "2026-11-10T09:15:00Z",
         "git_commit": "3f2a9c1e0000", "environment": {"cpu_model": "AMD EPYC"}},
        {"median_ms": 0.98, "iqr_ms": 0.0098, "rounds": 210, "timestamp_utc": "2026-11-11T10:30:00Z",
         "git_commit": "a634c19f0000", "dirty": True, "environment": {"device_name": "NVIDIA H100"},
         "process_medians_ms": [0.97, 0.98, 0.99], "cpu_median_ms": 0.95},
    ]
    write_baseline(tmp_path / "bl" / "cpu-test" / "tests__perf__test_demo.json", {"test_a": e})
    assert main(["show", str(tmp_path / "bl")]) == 0
    assert "runs of test_a" not in capsys.readouterr().out  # only with --runs
    assert main(["show", "--runs", str(tmp_path / "bl")]) == 0
    out = capsys.readouterr().out
    assert "runs of test_a (oldest first):" in out
    lines = out[out.index("runs of test_a"):].splitlines()
    header = lines[1].split()
    assert header[:2] == ["date", "(UTC)"] and "commit" in header and "processes" in header
    first, second = (ln for ln in lines if ln.strip().startswith("2026-11-1"))
    assert first.split()[:5] == ["2026-11-10", "09:15", "3f2a9c1", "AMD", "EPYC"]
    assert "1.02 ms" in first and "5.0%" in first and first.split()[-2:] == ["200", "1"]
    assert second.split()[:4] == ["2026-11-11", "10:30", "a634c19*", "NVIDIA"]  # * : recorded from uncommitted changes
    assert "980 µs" in second and "1.0%" in second and second.split()[-2:] == ["210", "3"]
    assert "950 µs" in second  # its CPU time (issue 45); the first run was recorded without
    assert first.split()[first.split().index("ms") + 1] == "-"


def test_show_flags_corrupt_file_and_lists_the_rest(tmp_path, capsys):
    root = tmp_path / "bl"
    make_baselines(root)
    bad = root / "cpu-test" / "tests__perf__test_broken.json"
    bad.write_text('{"schema_version": 2, "benchmarks": {"t": ', encoding="utf-8")
    assert main(["show", str(root)]) == 2
    captured = capsys.readouterr()
    assert str(bad) in captured.out and "not valid JSON" in captured.out
    assert "1 unreadable" in captured.err
    assert "test_b" in captured.out and "device cuda-test-gpu:" in captured.out  # the others still shown


def test_show_flags_entry_without_usable_median(tmp_path, capsys):
    root = tmp_path / "bl"
    make_baselines(root)
    odd = root / "cpu-test" / "tests__perf__test_odd.json"
    write_baseline(odd, {"t": dict(entry("t", samples(43)), stats="oops")})
    assert main(["show", str(root)]) == 2
    out = capsys.readouterr().out
    assert f"{odd}: UNREADABLE" in out and "test_b" in out


def test_show_default_dir_and_missing_dir(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["show"]) == 2  # ./baselines does not exist
    assert "baselines" in capsys.readouterr().err
    make_baselines(tmp_path / "baselines")
    assert main(["show"]) == 0
    assert "test_b" in capsys.readouterr().out
    assert main(["show", str(tmp_path / "nowhere")]) == 2
    assert "nowhere" in capsys.readouterr().err


def test_show_empty_dir(tmp_path, capsys):
    (tmp_path / "bl").mkdir()
    assert main(["show", str(tmp_path / "bl")]) == 0
    assert "no baseline files" in capsys.readouterr().out


def test_show_reads_the_projects_baselines(capsys):
    """The committed baselines of the bundled perf suite list without errors."""
    root = ROOT / "baselines"
    if not root.is_dir():
        pytest.skip("no committed baselines")
    assert main(["show", str(root)]) == 0
    assert "runs" in capsys.readouterr().out


def test_compare_decides_replicated_runs_over_process_medians(tmp_path, capsys):
    # Reports measured by worker processes carry each process's median: `gpuperf compare` decides on
    # them as the plugin does (one process 25% slower than the two others, which agree, is set aside
    # as a slow period: issue 45).
    base_entry = entry("test_a", samples(31))
    base_entry["process_medians_ms"] = [1.0, 1.01, 0.99]
    cur_entry = entry("test_a", samples(32, median_ms=1.08))
    cur_entry["process_medians_ms"] = [1.0, 1.25, 1.0]
    base = write_baseline(tmp_path / "base.json", {"test_a": base_entry})
    cur = write_report(tmp_path / "cur.json", {"test_a": cur_entry})
    assert main(["compare", str(base), str(cur), "-v"]) == 0
    out = capsys.readouterr().out
    assert "geometric mean of 2 of 3 process medians" in out and "this run's process 2 of 3 set aside: 1.25x" in out
    cur_entry["process_medians_ms"] = [1.3, 1.31, 1.29]
    cur = write_report(tmp_path / "cur2.json", {"test_a": cur_entry})
    assert main(["compare", str(base), str(cur)]) == 1


def test_compare_reads_each_benchmark_with_the_spread_of_all_it_compares(tmp_path, capsys):
    # issue 45: over worker processes, an unchanged benchmark whose own spread came out wide by
    # chance passes "unchanged" with the suite's spread (Smyth's moderated t, for the one-sided
    # question only), as the plugin decides it; a regression still fails on its own evidence.
    base, cur = {}, {}
    for i, (b, c) in enumerate(zip(SUITE_BASE, SUITE_CURRENT)):
        base[f"test_p{i}"] = dict(entry(f"test_p{i}", samples(60 + i)), process_medians_ms=list(b))
        cur[f"test_p{i}"] = dict(entry(f"test_p{i}", samples(80 + i)), process_medians_ms=list(c))
    base_path = write_baseline(tmp_path / "base.json", base)
    assert main(["compare", str(base_path), str(write_report(tmp_path / "cur.json", cur)), "-v"]) == 1
    out = capsys.readouterr().out
    assert "unchanged" in row(out, "test_p0") and "regressed" in row(out, "test_p1")
    assert "inconclusive" in row(out, "test_p2")  # +4%: its bound stays above 1+T
    assert "with the spread moderated by this run's 12 benchmarks (SD of log process medians 2.6% -> 1.5%" in out
    # fewer than 10 benchmarks with a spread: each decides alone
    few = {k: v for k, v in list(cur.items())[:9]}
    assert main(["compare", str(base_path), str(write_report(tmp_path / "few.json", few))]) == 1
    assert "inconclusive" in row(capsys.readouterr().out, "test_p0")


def test_compare_gives_the_memory_verdict_the_plugin_gives(tmp_path, capsys):
    # gate.evaluate decides peak memory too: 4 MiB -> 8 MiB fails here as it fails the test
    base = write_baseline(tmp_path / "base.json", {"test_a": entry("test_a", samples(41), peak=4 << 20)})
    cur = write_report(tmp_path / "cur.json", {"test_a": entry("test_a", samples(42), peak=8 << 20)})
    assert main(["compare", str(base), str(cur)]) == 1
    out = capsys.readouterr().out
    assert "memory regressed " in out and "\n  tests/perf/test_demo.py::test_a" in out
    assert "memory: 1 regressed of 1 compared" in out
    same = write_report(tmp_path / "same.json", {"test_a": entry("test_a", samples(43), peak=4 << 20)})
    assert main(["compare", str(base), str(same)]) == 0


def test_compare_redecides_an_ab_verdict_on_the_reports_blocks(tmp_path, capsys):
    # A report whose verdict came from A/B (here: 16 paired blocks per process pair, B 1.3x slower in
    # both pairs) is decided again on those blocks, as the plugin decided it, not against the
    # stored baseline's samples (which would say unchanged: the baseline is as slow as B).
    from pytest_gpuperf.verdict.paired import Block, abba_schedule
    from pytest_gpuperf.verdict.gate import Evidence, Reference, evaluate
    from pytest_gpuperf.core.options import DEFAULTS
    from pytest_gpuperf.reporting.report import comparison_dict

    rng = np.random.default_rng(5)
    blocks = tuple(Block(side, p, pos, (float((1.3 if side == "B" else 1.0) * rng.lognormal(0, 0.01)),))
                   for p in range(2) for pos, side in enumerate(abba_schedule(4, seed=p)))
    plugin = evaluate(Evidence(ab_blocks=blocks), Reference.ab("main (3f2a9c1)", measured=True), DEFAULTS,
                      benchmark_id=f"{MODULE}::test_a").comparison
    assert plugin.verdict.value == "regressed"
    base = write_baseline(tmp_path / "base.json", {"test_a": entry("test_a", samples(51, median_ms=1.3))})
    cur = write_report(tmp_path / "cur.json", {"test_a": entry("test_a", samples(52, median_ms=1.3))})
    data = json.loads(cur.read_text())
    data["benchmarks"][f"{MODULE}::test_a"]["comparison"] = comparison_dict(plugin)
    cur.write_text(json.dumps(data))
    assert main(["compare", str(base), str(cur)]) == 1
    out = capsys.readouterr().out
    assert "decided on the report's A/B blocks against main (3f2a9c1)" in out
    assert "regressed" in row(out, "test_a") and f"{plugin.ratio:.3f}x" in row(out, "test_a")
