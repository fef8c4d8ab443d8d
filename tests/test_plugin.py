"""End-to-end tests of the plugin: real inner pytest sessions driven through ``pytester``."""

from __future__ import annotations

import json
import re

import pytest

from cuda_marks import needs_cuda  # noqa: E402
from scripted import script_timings, set_timings

pytest_plugins = ["pytester"]

# Timings are scripted (tests/scripted.py): a verdict asserted here is the same on any machine.
WORKLOAD = """
import pytest

@pytest.mark.gpu_bench(max_time=0.15, warmup_time=0.01, threshold=0.3, device="cpu")
def test_loop(gpu_bench):
    result = gpu_bench(sum, range(100))
    assert result.median_ms > 0
"""
STEADY = {"ms": 1.0, "cv": 0.02, "seed": 1}
RERUN = {"ms": 1.0, "cv": 0.02, "seed": 2}
TWICE_AS_SLOW = {"ms": 2.0, "cv": 0.02, "seed": 3}


def _record(pytester: pytest.Pytester, body: str = WORKLOAD, passed: int = 1) -> None:
    """Write the test module, script steady timings, record baselines, then script an A/A rerun."""
    pytester.makepyfile(test_bench=body)
    script_timings(pytester, STEADY)
    pytester.runpytest("--gpuperf-update-baselines", "-p", "no:cacheprovider").assert_outcomes(passed=passed)
    set_timings(pytester, RERUN)


FAST = dict(max_time=0.05, warmup_time=0.0)


def _baseline_files(pytester: pytest.Pytester) -> list:
    return sorted(pytester.path.joinpath("baselines").rglob("*.json"))


def test_update_then_unchanged_rerun_passes(pytester: pytest.Pytester) -> None:
    _record(pytester)
    files = _baseline_files(pytester)
    assert len(files) == 1 and files[0].name == "test_bench.json"
    assert files[0].parent.name.startswith("cpu-")
    rerun = pytester.runpytest("--gpuperf", "-p", "no:cacheprovider", "--gpuperf-markdown=r.md")
    rerun.assert_outcomes(passed=1)
    rerun.stdout.fnmatch_lines(["*gpuperf: 1 benchmark(s), mode: compare (one process: run-to-run spread not "
                                "measured, --gpuperf-processes 1)*", "*test_bench.py::test_loop*cpu*"])
    rerun.stdout.fnmatch_lines(["*test_loop*unchanged*"])
    assert "regressed" not in rerun.stdout.str()
    # the reports follow the mode (issue 24): stored runs' medians in the legend and the Markdown header
    rerun.stdout.fnmatch_lines(["baseline = median of the stored runs' medians*`gpuperf show --runs`*"])
    md = pytester.path.joinpath("r.md").read_text()
    assert "| baseline (history median) |" in md and "process medians" not in md and "REF's" not in md


def test_doubled_work_fails_with_regression_message(pytester: pytest.Pytester) -> None:
    _record(pytester)
    set_timings(pytester, TWICE_AS_SLOW)
    rec = pytester.runpytest("--gpuperf", "-p", "no:cacheprovider")
    rec.assert_outcomes(failed=1)
    out = rec.stdout.str()
    assert "\nregressed " in out and "\n  test_bench.py::test_loop: median " in out
    ratio = float(re.search(r"ratio (\d+\.\d+)x", out).group(1))
    assert 1.9 < ratio < 2.1, ratio
    assert "Mann-Whitney U p=" in out and "threshold +30%" in out
    assert "baselines/cpu-" in out and "test_bench.json" in out
    rec.stdout.fnmatch_lines(["*test_loop*regressed*"])


def test_smoke_mode_calls_fn_exactly_once(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        calls = []

        @pytest.mark.gpu_bench
        def test_once(gpu_bench):
            result = gpu_bench(lambda x: calls.append(x) or x * 2, 21)
            assert calls == [21]
            assert result.smoke and result.value == 42
            assert result.comparison is None and result.median_ci_ms is None
            assert result.rounds == 1 and result.samples_ms and result.median_ms > 0
        """
    )
    rec = pytester.runpytest("-p", "no:cacheprovider")
    rec.assert_outcomes(passed=1)
    rec.stdout.fnmatch_lines(["*1 benchmark(s) ran once (smoke mode)*"])
    assert not pytester.path.joinpath("baselines").exists()


def test_measured_result_has_statistics(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0, min_rounds=12, target_precision=0, device="cpu")
        def test_stats(gpu_bench):
            r = gpu_bench(sum, range(500))
            assert r.value == sum(range(500))
            assert r.rounds == len(r.samples_ms) >= 12 and r.calls_per_round >= 1
            assert r.warmup_calls >= 3
            assert r.min_ms <= r.p5_ms <= r.p25_ms <= r.median_ms <= r.p75_ms <= r.p95_ms <= r.p99_ms <= r.max_ms
            lo, hi = r.median_ci_ms
            assert lo <= r.median_ms <= hi
            assert r.iqr_ms == pytest.approx(r.p75_ms - r.p25_ms)
            assert r.comparison.verdict.value == "no-baseline"
            assert r.device == "cpu" and not r.smoke
        """
    )
    pytester.runpytest("--gpuperf", "-p", "no:cacheprovider").assert_outcomes(passed=1)


@pytest.mark.parametrize("content", ["{ not json", '{"schema_version": 1, "benchmarks": {"test_a": {"samples_ms": [1.0, '])
def test_corrupt_baseline_errors_that_test_only_and_stays_untouched(pytester: pytest.Pytester, content: str) -> None:
    body = """
        import pytest

        @pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0, threshold=1.0)
        def test_a(gpu_bench):
            gpu_bench(sum, range(100))
    """
    pytester.makepyfile(test_one=body, test_two=body)
    script_timings(pytester, STEADY)
    pytester.runpytest("--gpuperf-update-baselines", "-p", "no:cacheprovider").assert_outcomes(passed=2)
    bad = next(p for p in _baseline_files(pytester) if p.name == "test_one.json")
    bad.write_text(content)
    before = bad.read_bytes()
    for flag in ("--gpuperf", "--gpuperf-update-baselines"):
        rec = pytester.runpytest(flag, "-p", "no:cacheprovider")
        rec.assert_outcomes(passed=1, errors=1)
        out = rec.stdout.str()
        assert "baseline file" in out and "test_one.json" in out and "unusable" in out
        rec.stdout.fnmatch_lines(["ERROR test_one.py::test_a*"])
        assert bad.read_bytes() == before


def test_unknown_marker_option_errors_its_own_test_only(pytester: pytest.Pytester) -> None:
    # issue 46: one bad marker value stopped the whole session, even when -k deselected its test
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpu_bench(max_tme=1.0)
        def test_typo(gpu_bench):
            gpu_bench(sum, [1])

        @pytest.mark.gpu_bench(max_time=-1)
        def test_bad_value(gpu_bench):
            gpu_bench(sum, [1])

        @pytest.mark.benchmark(min_rounds="many")
        def test_bad_benchmark_marker(benchmark):
            benchmark(sum, [1])

        @pytest.mark.gpu_bench
        def test_fine(gpu_bench):
            gpu_bench(sum, [1])
        """
    )
    rec = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:benchmark")
    rec.assert_outcomes(passed=1, errors=3)
    out = rec.stdout.str()
    assert "ERROR at setup of test_bad_value" in out and "max_time" in out
    assert "ERROR at setup of test_bad_benchmark_marker" in out and "min_rounds" in out and "'many'" in out
    assert "max_tme" in out and "test_typo" in out
    assert "valid options are" in out and "max_time" in out and "threshold" in out
    assert "Traceback" not in out
    pytester.runpytest("-p", "no:cacheprovider", "-p", "no:benchmark", "-k", "fine").assert_outcomes(passed=1)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--gpuperf-threshold", "abc"], "threshold"),
        (["--gpuperf-alpha", "2"], "alpha"),
        (["--gpuperf-device", "tpu"], "device"),
        (["--gpuperf-max-time", "-1"], "max_time"),
    ],
)
def test_bad_command_line_values_are_usage_errors(pytester: pytest.Pytester, args: list, needle: str) -> None:
    pytester.makepyfile("def test_nothing(): pass")
    rec = pytester.runpytest(*args)
    assert rec.ret == pytest.ExitCode.USAGE_ERROR
    assert needle in rec.stderr.str()


@pytest.mark.parametrize("args, needle", [
    (["--gpuperf-nproc", "two"], "--gpuperf-nproc 'two': expected a whole number of ranks >= 1"),
    (["--gpuperf-nproc", "0"], "--gpuperf-nproc '0': expected a whole number of ranks >= 1"),
    (["--gpuperf-nproc", "2", "-n", "2"], "--gpuperf-nproc 2: pytest-xdist (-n/--dist) cannot be used with it"),
])
def test_gpuperf_nproc_bad_values_and_xdist_are_usage_errors(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, args: list, needle: str) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    pytester.makepyfile("def test_nothing(): pass")
    rec = pytester.runpytest("--gpuperf", *args)
    assert rec.ret == pytest.ExitCode.USAGE_ERROR
    assert needle in rec.stderr.str(), rec.stderr.str()


def test_gpuperf_nproc_under_torchrun_is_a_usage_error(pytester: pytest.Pytester,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    pytester.makepyfile("def test_nothing(): pass")
    rec = pytester.runpytest("--gpuperf", "--gpuperf-nproc", "2")
    assert rec.ret == pytest.ExitCode.USAGE_ERROR
    assert "--gpuperf-nproc 2 starts torchrun itself, but this session already runs under torchrun (WORLD_SIZE=2)" \
        in rec.stderr.str(), rec.stderr.str()


def test_second_unnamed_call_is_a_clear_error_and_names_allow_several(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpu_bench
        def test_twice(gpu_bench):
            gpu_bench(sum, [1])
            gpu_bench(sum, [2])

        @pytest.mark.gpu_bench
        def test_named(gpu_bench):
            a = gpu_bench.pedantic(sum, args=([1],), name="small")
            b = gpu_bench.pedantic(sum, args=([1] * 100,), name="large")
            assert (a.benchmark_id, b.benchmark_id) == ("test_named::small", "test_named::large")
        """
    )
    rec = pytester.runpytest("-p", "no:cacheprovider")
    rec.assert_outcomes(passed=1, failed=1)
    rec.stdout.fnmatch_lines(["*already called without a name*distinct name*"])


def test_pedantic_setup_runs_before_every_round(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import sys

        import pytest

        @pytest.mark.gpu_bench
        def test_pedantic(gpu_bench):
            first = "torch._dynamo.eval_frame" in sys.modules
            log = []
            def setup():
                log.append("setup")
                return (len(log),), {}
            def fn(k):
                log.append(("call", k))
            r = gpu_bench.pedantic(fn, setup=setup, rounds=7, warmup_rounds=2)
            assert r.rounds == 7 and r.calls_per_round == 1 and r.warmup_calls == 2
            calls = [e for e in log if e != "setup"]
            # 2 warmup + 7 timed rounds + 1 extra call that measures peak memory + 1 that counts ops,
            # and, once torch.compile's machinery is loaded (counting loads it), 1 untimed call before
            # the warmup that tells a first compile from recompilations
            first = int(first)
            assert len(calls) == 11 + first and log.count("setup") == 11 + first
            assert all(log[i] == "setup" and log[i + 1][0] == "call" for i in range(0, len(log), 2))
        """
    )
    pytester.runpytest("--gpuperf", "-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_baselines_written_only_for_passing_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0, device="cpu")
        def test_good(gpu_bench):
            gpu_bench(sum, range(100))

        @pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0, device="cpu")
        def test_bad(gpu_bench):
            gpu_bench(sum, range(100))
            assert False, "a failing benchmark test"
        """
    )
    rec = pytester.runpytest("--gpuperf-update-baselines", "-p", "no:cacheprovider")
    rec.assert_outcomes(passed=1, failed=1)
    (path,) = _baseline_files(pytester)
    text = path.read_text()
    assert text.endswith("}\n") and text.startswith('{\n  "benchmarks"')
    data = json.loads(text)
    assert list(data["benchmarks"]) == ["test_good"]
    entry = data["benchmarks"]["test_good"]
    for key in ("schema_version", "id", "stats", "samples_ms", "rounds", "calls_per_round", "warmup_rounds",
                "options", "environment", "git_commit", "timestamp_utc"):
        assert key in entry, key
    assert entry["environment"]["torch_version"] and entry["environment"]["device_type"] == "cpu"
    assert entry["timestamp_utc"].endswith("Z")
    assert json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n" == text


def test_environment_change_warns_but_does_not_fail(pytester: pytest.Pytester) -> None:
    _record(pytester)
    (path,) = _baseline_files(pytester)
    data = json.loads(path.read_text())
    data["benchmarks"]["test_loop"]["environment"]["torch_version"] = "0.0.1"
    path.write_text(json.dumps(data))
    rec = pytester.runpytest("--gpuperf", "-p", "no:cacheprovider")
    rec.assert_outcomes(passed=1)
    rec.stdout.fnmatch_lines(["*warning: test_bench.py::test_loop: environment differs*torch_version 0.0.1 -> *"])


def test_json_report_has_results_and_verdicts(pytester: pytest.Pytester) -> None:
    _record(pytester)
    rec = pytester.runpytest("--gpuperf", "--gpuperf-json", "out/report.json", "-p", "no:cacheprovider")
    rec.assert_outcomes(passed=1)
    report = json.loads(pytester.path.joinpath("out", "report.json").read_text())
    entry = report["benchmarks"]["test_bench.py::test_loop"]
    assert entry["verdict"] == "unchanged"
    assert entry["comparison"]["baseline_median_ms"] > 0 and entry["comparison"]["ratio"] > 0
    assert entry["stats"]["median_ms"] > 0 and entry["samples_ms"]
    assert report["schema_version"] == 2 and report["environments"]


def test_ini_options_and_baseline_dir(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        """
        [pytest]
        gpuperf_max_time = 0.05
        gpuperf_min_rounds = 11
        gpuperf_target_precision = 0
        gpuperf_baseline_dir = perf-baselines
        """
    )
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpu_bench(warmup_time=0)
        def test_ini(gpu_bench):
            r = gpu_bench(sum, range(100))
            assert r.options.max_time == 0.05 and r.options.min_rounds == 11
            assert r.rounds >= 11
        """
    )
    pytester.runpytest("--gpuperf-update-baselines", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert [p.name for p in pytester.path.joinpath("perf-baselines").rglob("*.json")] == ["test_ini_options_and_baseline_dir.json"]


def test_marker_overrides_command_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpu_bench(threshold=0.2)
        def test_marker(gpu_bench):
            r = gpu_bench.pedantic(sum, args=([1],), rounds=10)
            assert r.options.threshold == 0.2 and r.options.alpha == 0.05

        @pytest.mark.gpu_bench
        def test_cli(gpu_bench):
            r = gpu_bench.pedantic(sum, args=([1],), rounds=10)
            assert r.options.threshold == 0.1
        """
    )
    rec = pytester.runpytest("--gpuperf", "--gpuperf-threshold", "0.1", "--gpuperf-alpha", "0.05",
                             "-p", "no:cacheprovider")
    rec.assert_outcomes(passed=2)


def test_cuda_device_skips_with_reason_without_cuda(pytester: pytest.Pytester) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here: the skip path cannot be exercised")
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpu_bench(device="cuda")
        def test_gpu_only(gpu_bench):
            gpu_bench(sum, [1])
        """
    )
    rec = pytester.runpytest("-rs", "-p", "no:cacheprovider")
    rec.assert_outcomes(skipped=1)
    rec.stdout.fnmatch_lines(["*SKIPPED*CUDA is not available*"])


def test_plain_session_does_not_import_torch(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import sys

        def test_plain():
            assert "pytest_gpuperf.plugin" in sys.modules
            assert "torch" not in sys.modules
            assert "numpy" not in sys.modules
        """
    )
    rec = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    rec.assert_outcomes(passed=1)


def test_plain_run_imports_no_heavy_module_even_after_the_session(pytester: pytest.Pytester) -> None:
    """Nothing but option parsing loads at start-up: after a whole plain session (summary and
    session-finish hooks included) numpy, scipy and torch are still not imported."""
    import subprocess
    import sys

    pytester.makeini("[pytest]\n")
    pytester.makepyfile("def test_one():\n    assert 1 + 1 == 2\n")
    code = (
        "import sys, pytest\n"
        "rc = pytest.main(['-q', '-p', 'no:cacheprovider'])\n"
        "assert 'pytest_gpuperf.plugin' in sys.modules, 'plugin not loaded'\n"
        "print('HEAVY:', sorted(m for m in ('numpy', 'scipy', 'torch') if m in sys.modules))\n"
        "sys.exit(rc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=pytester.path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "HEAVY: []" in out.stdout, out.stdout


@pytest.mark.parametrize("marker, needle", [
    ('max_memory="1 MiB"', "memory budget exceeded"),
    ('expect_bottleneck="data"', "expected data-bound"),
])
def test_update_never_records_a_benchmark_that_fails_its_hard_checks(pytester: pytest.Pytester, marker: str,
                                                                     needle: str) -> None:
    """--gpuperf-update-baselines used to skip max_memory and expect_bottleneck: a benchmark over
    its hard budget passed and became the new baseline."""
    pytester.makepyfile(
        f"""
        import pytest, torch

        @pytest.mark.gpu_bench({marker}, max_time=0.05, device="cpu")
        def test_big(gpu_bench):
            gpu_bench(lambda: torch.ones(1 << 21).sum())  # allocates 8 MiB, no data loading

        @pytest.mark.gpu_bench(max_time=0.05, device="cpu")
        def test_fine(gpu_bench):
            gpu_bench(sum, range(100))
        """
    )
    script_timings(pytester, STEADY)
    rec = pytester.runpytest("--gpuperf-update-baselines", "-p", "no:cacheprovider")
    rec.assert_outcomes(passed=1, failed=1)
    rec.stdout.fnmatch_lines([f"*baseline not updated*{needle}*"])
    (path,) = _baseline_files(pytester)
    assert list(json.loads(path.read_text())["benchmarks"]) == ["test_fine"]


def test_benchmark_exception_fails_only_that_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        def boom():
            raise RuntimeError("kaboom")

        @pytest.mark.gpu_bench(**{fast})
        def test_raises(gpu_bench):
            gpu_bench(boom)

        @pytest.mark.gpu_bench(**{fast})
        def test_fine(gpu_bench):
            gpu_bench(sum, [1, 2])
        """.replace("{fast}", repr(FAST))
    )
    rec = pytester.runpytest("--gpuperf", "-p", "no:cacheprovider")
    rec.assert_outcomes(passed=1, failed=1)
    rec.stdout.fnmatch_lines(["*RuntimeError: kaboom*"])




@needs_cuda
@pytest.mark.parametrize("mode", ["events", "flush_l2", "cuda_graph"])
def test_cuda_timing_modes(pytester: pytest.Pytester, mode: str) -> None:
    opts = {"events": "", "flush_l2": "flush_l2=True,", "cuda_graph": "cuda_graph=True,"}[mode]
    pytester.makepyfile(
        f"""
        import pytest, torch

        @pytest.mark.gpu_bench({opts} max_time=0.2, device="cuda")
        def test_cuda(gpu_bench):
            a = torch.randn(1024, 1024, device=gpu_bench.device)
            r = gpu_bench(torch.matmul, a, a)
            assert r.device.startswith("cuda") and r.median_ms > 0 and r.rounds >= 10
        """
    )
    pytester.runpytest("--gpuperf", "-p", "no:cacheprovider").assert_outcomes(passed=1)


OPTIONS_PROBE = '''
import json, pathlib
import pytest
from pytest_gpuperf.plugin.keys import SESSION_KEY

def _dump(request):
    options = request.config.stash[SESSION_KEY].options_for(request.node)
    pathlib.Path(request.config.rootpath, request.node.name + ".json").write_text(json.dumps(options.to_dict()))

def test_plain(request):
    _dump(request)

@pytest.mark.benchmark(min_rounds=50, max_time=6)
def test_benchmark_marker(request):
    _dump(request)

@pytest.mark.benchmark(max_time=6)
@pytest.mark.gpu_bench(**MARKER)
def test_marked(request):
    _dump(request)
'''


def test_every_option_resolves_with_one_precedence_through_the_plugin(pytester: pytest.Pytester) -> None:
    # The plugin's sources of every option, in one precedence: @gpu_bench marker > @benchmark marker >
    # --gpuperf-* > --benchmark-* > ini gpuperf_* > default (the table of tests/unit/test_option_precedence.py).
    # processes is the exception the README states: ini gpuperf_processes and --gpuperf-processes set the
    # session's number of worker processes, the option only caps it per benchmark (marker).
    from option_samples import SAMPLES

    from pytest_gpuperf.core.options import DEFAULTS

    def as_json(value: object) -> object:
        return list(value) if isinstance(value, tuple) else value

    ini = {n: raw for n, ((raw, _), _, _) in SAMPLES.items() if n != "processes"}
    ini["device"] = "cpu"  # a device that exists here (the command line's is "auto": CUDA when there is one)
    pytester.makeini("[pytest]\n" + "".join(f"gpuperf_{n} = {raw}\n" for n, raw in ini.items()))
    marker = {n: m for n, (_, _, (m, _)) in SAMPLES.items()}
    pytester.makepyfile(test_option_sources=f"MARKER = {marker!r}\n" + OPTIONS_PROBE)

    def run(*args: str) -> dict[str, dict[str, object]]:
        pytester.runpytest("-p", "no:cacheprovider", *args).assert_outcomes(passed=3)
        return {t: json.loads((pytester.path / f"{t}.json").read_text())
                for t in ("test_plain", "test_benchmark_marker", "test_marked")}

    got = run()
    for name, ((_, ini_value), _, (_, marker_value)) in SAMPLES.items():
        expected_plain = getattr(DEFAULTS, name) if name == "processes" else ini_value
        assert got["test_plain"][name] == as_json(expected_plain), name
        assert got["test_marked"][name] == as_json(marker_value), name
    assert got["test_benchmark_marker"]["min_rounds"] == 50 and got["test_benchmark_marker"]["max_time"] == 6.0

    cli = {n: c for n, (_, c, _) in SAMPLES.items() if c is not None}
    cli["device"] = ("auto", None)
    flags = [f"--gpuperf-{n.replace('_', '-')}={raw}" for n, (raw, _) in cli.items()]
    got = run(*flags, "--benchmark-max-time=5", "--benchmark-min-rounds=40")
    for name, ((_, ini_value), _, (_, marker_value)) in SAMPLES.items():
        expected_plain = (cli[name][1] if name in cli else 40 if name == "min_rounds"
                          else getattr(DEFAULTS, name) if name == "processes" else ini_value)
        if name == "max_rounds":
            expected_plain = max(40, DEFAULTS.max_rounds)  # --benchmark-min-rounds lifts the cap, as there
        assert got["test_plain"][name] == as_json(expected_plain), name
        assert got["test_marked"][name] == as_json(marker_value), name
    assert got["test_plain"]["max_time"] == float(cli["max_time"][1])  # --gpuperf-max-time over --benchmark-max-time
    assert got["test_benchmark_marker"]["min_rounds"] == 50 and got["test_benchmark_marker"]["max_time"] == 6.0


def test_the_reason_fits_in_the_short_summary_at_80_columns(pytester: pytest.Pytester,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 24: a failure message starts with the verdict and its numbers (the benchmark's id, already
    # on pytest's FAILED line, and the evidence follow on later lines), so `-rf` at 80 columns shows why.
    monkeypatch.setenv("COLUMNS", "80")
    _record(pytester)
    set_timings(pytester, TWICE_AS_SLOW)
    rec = pytester.runpytest("--gpuperf", "-p", "no:cacheprovider", "-rf")
    rec.assert_outcomes(failed=1)
    (line,) = [ln for ln in rec.outlines if ln.startswith("FAILED ")]
    assert len(line) <= 80 and re.search(r"::test_loop - regressed 2\.\d+x", line), line
    pytester.makepyfile(test_mem="""
import pytest, torch

@pytest.mark.gpu_bench(device="cpu", max_memory="1 KiB", counts=False)
def test_alloc(gpu_bench):
    gpu_bench(torch.ones, 1 << 20)
""")
    rec = pytester.runpytest("--gpuperf", "-p", "no:cacheprovider", "-rf", "test_mem.py")
    rec.assert_outcomes(failed=1)
    (line,) = [ln for ln in rec.outlines if ln.startswith("FAILED ")]
    assert len(line) <= 80 and "::test_alloc - memory budget exceeded: peak 4" in line, line


@pytest.mark.parametrize("columns", [80, 120, 200])
def test_the_summary_table_and_legend_fit_the_terminal(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                      columns: int) -> None:
    # Issue 24: the table drops columns by priority (name, median, ratio, verdict first) and wraps its
    # legend to the width pytest reports with; the JSON report keeps every field.
    monkeypatch.setenv("COLUMNS", str(columns))
    _record(pytester)
    rec = pytester.runpytest("--gpuperf", "-p", "no:cacheprovider", "--gpuperf-json=r.json")
    rec.assert_outcomes(passed=1)
    out = rec.outlines
    start = next(i for i, ln in enumerate(out) if "gpuperf: 1 benchmark(s), mode:" in ln)
    end = next(i for i, ln in enumerate(out) if ln.startswith("baselines: "))
    block = out[start + 1:end]
    assert block and all(len(ln) <= columns for ln in block), [len(ln) for ln in block]
    header = next(ln for ln in block if ln.startswith("name ")).split()  # after the mode's words that did not fit
    assert header[0] == "name" and {"median", "ratio", "verdict"} <= set(header)
    assert ("device" in header) is (columns >= 200)
    entry = json.loads((pytester.path / "r.json").read_text())["benchmarks"]["test_bench.py::test_loop"]
    assert {"stats", "peak_memory_bytes", "rounds", "device"} <= set(entry)


def test_an_unusable_baseline_file_is_reported_once_per_test(pytester: pytest.Pytester) -> None:
    # Issue 24: the error's reason once in the test's ERROR section (no chained BaselineError traceback
    # repeating it), and first in the short summary.
    pytester.makepyfile(test_bench=WORKLOAD)
    script_timings(pytester, STEADY)
    pytester.runpytest("--gpuperf-update-baselines", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    (path,) = pytester.path.joinpath("baselines").rglob("*.json")
    path.write_text("{broken")
    rec = pytester.runpytest("--gpuperf", "-p", "no:cacheprovider", "-rE")
    rec.assert_outcomes(errors=1)
    out = rec.stdout.str()
    assert "During handling of the above exception" not in out
    section = out[out.index("ERROR at setup of test_loop"):out.index("short test summary")]
    assert section.count("unusable baseline file (not valid JSON") == 1
    rec.stdout.fnmatch_lines(["ERROR test_bench.py::test_loop - Failed: unusable baseline file (not valid JSON*"])
