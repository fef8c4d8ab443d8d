"""End-to-end: issue 13's rough edges (xdist reference, unwritable reports, absent devices, benchmarks
that measure nothing or a generator, long ids, traces of update runs, repeated warnings, noisy
baselines, long calls, budget units).

Every verdict asserted here comes from scripted timings (tests/scripted.py), never real timing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_gpuperf.plugin import session as plugin_session
from scripted import script_timings, set_timings

pytest_plugins = ["pytester"]

RUN = ("-p", "no:cacheprovider")
STEADY = {"ms": 1.0, "cv": 0.02, "seed": 1}

LOOP = """
import pytest

@pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0, device="cpu", confirm=0)
def test_loop(gpu_bench):
    gpu_bench(sum, range(100))
"""


# ----------------------------------------------------------------------------- A: xdist reference


def test_xdist_workers_share_one_reference_measurement(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(
        test_many="""
        import pytest

        @pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0, device="cpu")
        @pytest.mark.parametrize("n", range(6))
        def test_b(gpu_bench, n):
            gpu_bench(sum, range(10))
        """
    )
    script_timings(pytester, STEADY)
    rec = pytester.runpytest_subprocess("-n", "2", "--gpuperf", "--gpuperf-json", "r.json", "--gpuperf-processes=1", *RUN)
    rec.assert_outcomes(passed=6)
    assert "results of 2 worker(s) merged" in rec.stdout.str()  # both workers measured
    report = json.loads(pytester.path.joinpath("r.json").read_text())
    references = [e["environment"]["reference"] for e in report["benchmarks"].values()]
    assert len(references) == 6 and references[0]["matmul_ms"] > 0
    # measured once and shared: float-for-float the same dict in every worker's results
    assert all(r == references[0] for r in references)
    assert [env["reference"] for env in report["environments"].values()] == [references[0]]


# ----------------------------------------------------------------------------- B: unwritable reports


@pytest.mark.parametrize("option", ["--gpuperf-json", "--gpuperf-markdown"])
def test_report_path_under_a_regular_file_is_a_usage_error(pytester: pytest.Pytester, option: str) -> None:
    pytester.makepyfile(test_bench=LOOP)
    pytester.path.joinpath("notes.txt").write_text("a regular file")
    rec = pytester.runpytest("--gpuperf", option, "notes.txt/out.json", *RUN)
    assert rec.ret == pytest.ExitCode.USAGE_ERROR
    err = rec.stderr.str()
    assert option in err and "notes.txt/out.json" in err and "not a folder" in err
    assert "Traceback" not in err + rec.stdout.str()


def test_report_path_that_is_a_folder_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=LOOP)
    pytester.mkdir("out")
    rec = pytester.runpytest("--gpuperf", "--gpuperf-json", "out", *RUN)
    assert rec.ret == pytest.ExitCode.USAGE_ERROR
    assert "--gpuperf-json" in rec.stderr.str() and "is a folder" in rec.stderr.str()


def test_report_that_cannot_be_written_at_the_end_gives_one_error_line_and_the_summary(
        pytester: pytest.Pytester) -> None:
    # The folder is fine at startup; the test itself replaces it by a regular file.
    pytester.makepyfile(test_bench=LOOP + """
def test_zz_break_the_folder():
    import pathlib, shutil
    shutil.rmtree("out")
    pathlib.Path("out").write_text("in the way")
""")
    pytester.mkdir("out")
    script_timings(pytester, STEADY)
    rec = pytester.runpytest("--gpuperf", "--gpuperf-json", "out/r.json", "--gpuperf-markdown", "out/s.md", *RUN)
    rec.assert_outcomes(passed=2)
    out = rec.stdout.str()
    assert "gpuperf: 1 benchmark(s), mode: compare" in out and "test_bench.py::test_loop" in out
    rec.stdout.fnmatch_lines(["error: could not write --gpuperf-json *out/r.json: *",
                              "error: could not write --gpuperf-markdown *out/s.md: *"])
    assert "Traceback" not in out + rec.stderr.str() and "INTERNALERROR" not in out
    assert "results written to" not in out and "Markdown summary written to" not in out


# ----------------------------------------------------------------------------- C: absent devices


def _skip_if_cuda() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here: an absent-CUDA usage error cannot be exercised")


def test_command_line_cuda_device_without_cuda_is_a_usage_error(pytester: pytest.Pytester) -> None:
    _skip_if_cuda()
    pytester.makepyfile(test_bench=LOOP)
    rec = pytester.runpytest("--gpuperf", "--gpuperf-device", "cuda", *RUN)
    assert rec.ret == pytest.ExitCode.USAGE_ERROR
    rec.stderr.fnmatch_lines(["*pytest-gpuperf: --gpuperf-device cuda: *CUDA is not available here*"])


def test_ini_cuda_device_without_cuda_is_a_usage_error(pytester: pytest.Pytester) -> None:
    _skip_if_cuda()
    pytester.makepyfile(test_bench=LOOP)
    pytester.makeini("[pytest]\ngpuperf_device = cuda:0\n")
    rec = pytester.runpytest(*RUN)  # also in smoke mode: the option names a device that is not here
    assert rec.ret == pytest.ExitCode.USAGE_ERROR
    rec.stderr.fnmatch_lines(["*pytest-gpuperf: ini gpuperf_device cuda:0: *CUDA is not available here*"])


# ----------------------------------------------------------------------------- D: measuring nothing


NOTHING = """
import pytest

@pytest.mark.gpu_bench(device="cpu")
def test_forgot_to_call(gpu_bench):
    pass

@pytest.mark.gpu_bench(device="cpu")
def test_without_the_fixture():
    pass

def numbers():
    yield from range(1000)

@pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0, device="cpu")
def test_generator(gpu_bench):
    gpu_bench(numbers)

@pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0, device="cpu")
def test_generator_benchmark(benchmark):
    benchmark(numbers)  # pytest-benchmark times the creation and passes: so does its fixture here
"""


def test_marked_test_that_measures_nothing_warns_and_a_generator_fails(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=NOTHING)
    script_timings(pytester, STEADY)
    rec = pytester.runpytest("--gpuperf", *RUN)
    rec.assert_outcomes(passed=3, failed=1)
    rec.stdout.fnmatch_lines([
        "*numbers() returned a generator, so only its creation was timed*lambda: list(numbers(...))*",
    ])
    rec.stdout.fnmatch_lines(["warning: test_bench.py::test_generator_benchmark: benchmark: numbers() returned a "
                              "generator, so only its creation is timed (as pytest-benchmark does)*"])
    for name in ("test_forgot_to_call", "test_without_the_fixture"):
        rec.stdout.fnmatch_lines([f"warning: test_bench.py::{name} is marked gpu_bench but measured nothing: "
                                  f"call gpu_bench(fn, ...)*"])
    smoke = pytester.runpytest(*RUN)  # without --gpuperf nothing is measured anyway: no warning
    smoke.assert_outcomes(passed=3, failed=1)
    assert "measured nothing" not in smoke.stdout.str()
    assert "returned a generator" in smoke.stdout.str()


# ----------------------------------------------------------------------------- E + G + L: long ids, traces


LONG_ID = """
import pytest
import torch

@pytest.mark.gpu_bench(expect_bottleneck="data", max_time=0.05, warmup_time=0.0, device="cpu")
@pytest.mark.parametrize("n", [8], ids=["x" * 300])
def test_long(gpu_bench, n):
    a = torch.ones(n)
    gpu_bench(torch.add, a, a)
"""


def test_long_id_trace_is_written_named_and_git_ignored_and_the_table_stays_narrow(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=LONG_ID)
    script_timings(pytester, STEADY)
    # an update run fails the hard check (no DataLoader: never data-bound) but writes no trace
    # (the history store, also under .gpuperf/, is off here: this checks the trace alone)
    pytester.runpytest("--gpuperf-update-baselines", "--gpuperf-no-history", *RUN).assert_outcomes(failed=1)
    assert not pytester.path.joinpath(".gpuperf").exists()
    rec = pytester.runpytest("--gpuperf", "--gpuperf-json", "r.json", *RUN)
    rec.assert_outcomes(failed=1)
    out = rec.stdout.str()
    (trace,) = re.findall(r"trace: (\S+\.trace\.json)", out)
    assert Path(trace).is_file() and len(Path(trace).name) <= 100 + len(".trace.json")
    assert "traceEvents" in json.loads(Path(trace).read_text())
    assert pytester.path.joinpath(".gpuperf", ".gitignore").read_text().splitlines()[-1] == "*"
    start = out.index("gpuperf: 1 benchmark(s), mode: compare")
    table = [ln for ln in out[start:out.index("baselines:", start)].splitlines()[1:]  # after the header's sep line
             if not ln.startswith("baseline =")]
    # the name is cut to 70 characters; the other 14 columns take about 160 more
    assert max(len(ln) for ln in table) < 240 and any("..." in ln for ln in table)
    report = json.loads(pytester.path.joinpath("r.json").read_text())
    assert list(report["benchmarks"]) == [f"test_bench.py::test_long[{'x' * 300}]"]  # full id in JSON


def test_budget_is_reported_in_the_unit_the_user_wrote(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_bench="""
        import pytest
        import torch

        @pytest.mark.gpu_bench(max_memory="100 kB", max_time=0.05, warmup_time=0.0, device="cpu")
        def test_alloc(gpu_bench):
            gpu_bench(lambda: torch.ones(1 << 18).sum())
        """
    )
    script_timings(pytester, STEADY)
    rec = pytester.runpytest("--gpuperf", *RUN)
    rec.assert_outcomes(failed=1)
    (line,) = [ln for ln in rec.stdout.lines if ln.startswith("memory budget exceeded")]
    assert re.search(r"peak [\d.]+ kB > max_memory 100 kB on cpu", line) and "KiB" not in line


# ----------------------------------------------------------------------------- F: intended slowdowns


def test_regression_failure_says_how_to_rerecord(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=LOOP)
    script_timings(pytester, STEADY)
    pytester.runpytest("--gpuperf-update-baselines", *RUN).assert_outcomes(passed=1)
    set_timings(pytester, {"ms": 2.0, "cv": 0.02, "seed": 2})
    rec = pytester.runpytest("--gpuperf", *RUN)
    rec.assert_outcomes(failed=1)
    rec.stdout.fnmatch_lines(["regressed *", "  test_bench.py::test_loop: *median ratio *, 99% CI *;"
                              " Hodges-Lehmann ratio*if the change is intended, re-record with "
                              "`pytest --gpuperf-update-baselines`*"])


# ----------------------------------------------------------------------------- H: one warning per cause


MODULE = """
import pytest

@pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0, device="cpu", confirm=0)
def test_{name}(gpu_bench):
    gpu_bench.pedantic(sum, args=(range(10),), rounds=30, warmup_rounds=2)
"""


def test_drift_warns_once_and_updates_print_no_strict_hint(pytester: pytest.Pytester,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    cache = plugin_session._REFERENCE_CACHE
    monkeypatch.setitem(cache, "cpu", {"matmul_ms": 1.0, "copy_ms": 1.0})
    pytester.makepyfile(test_a=MODULE.format(name="a"), test_b=MODULE.format(name="b"))
    script_timings(pytester, STEADY)
    pytester.runpytest("--gpuperf-update-baselines", *RUN).assert_outcomes(passed=2)
    monkeypatch.setitem(cache, "cpu", {"matmul_ms": 2.0, "copy_ms": 2.0})  # the machine got slower
    rec = pytester.runpytest("--gpuperf", *RUN)
    rec.assert_outcomes(passed=2)
    drift = [ln for ln in rec.stdout.lines if "machine speed drift" in ln]
    assert len(drift) == 1 and drift[0].startswith("warning: cpu: machine speed drift")  # two files, one cause
    # An inconclusive comparison while updating: a baseline of six widely spread samples.
    (path,) = pytester.path.joinpath("baselines").rglob("test_a.json")
    data = json.loads(path.read_text())
    entry = data["benchmarks"]["test_a"]
    entry["samples_ms"] = [entry["stats"]["median_ms"] * f for f in (0.4, 0.6, 0.9, 1.1, 1.6, 2.4)]
    entry["history"] = entry["history"][:1]
    path.write_text(json.dumps(data))
    rec = pytester.runpytest("--gpuperf-update-baselines", *RUN)
    rec.assert_outcomes(passed=2)
    rec.stdout.fnmatch_lines(["*test_a*inconclusive*(baseline updated)*"])
    assert "--gpuperf-strict" not in rec.stdout.str()
    assert len([ln for ln in rec.stdout.lines if "machine speed drift" in ln]) == 1


# ----------------------------------------------------------------------------- J: noisy baselines


def test_recording_a_noisy_baseline_warns_how_to_fix_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=LOOP)
    script_timings(pytester, dict(STEADY, stall_every=3, stall_factor=3.0))  # every third call stalls
    rec = pytester.runpytest("--gpuperf-update-baselines", *RUN)
    rec.assert_outcomes(passed=1)
    rec.stdout.fnmatch_lines(["warning: test_bench.py::test_loop: noisy baseline recorded: IQR *% of the median"
                              " (>= 10%)*max_time (now 0.05 s)*quieter machine*MALLOC_*more rounds*"])
    set_timings(pytester, STEADY)
    rec = pytester.runpytest("--gpuperf-update-baselines", *RUN)
    assert "noisy baseline" not in rec.stdout.str()
    rec = pytester.runpytest("--gpuperf", *RUN)  # compare runs record nothing: no warning
    assert "noisy baseline" not in rec.stdout.str()


def test_warnings_wrap_to_the_terminal_width(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 24: a warning longer than the terminal wraps to its width, continuations indented, words whole.
    monkeypatch.setenv("COLUMNS", "80")
    pytester.makepyfile(test_bench=LOOP)
    script_timings(pytester, dict(STEADY, stall_every=3, stall_factor=3.0))
    rec = pytester.runpytest("--gpuperf-update-baselines", *RUN)
    rec.assert_outcomes(passed=1)
    out = rec.outlines
    start = next(i for i, ln in enumerate(out) if ln.startswith("warning: test_bench.py::test_loop: noisy baseline"))
    end = next(i for i in range(start + 1, len(out)) if not out[i].startswith("  "))
    block = out[start:end]
    assert len(block) >= 3 and all(len(ln) <= 80 for ln in block), block
    assert " ".join(ln.strip() for ln in block).endswith("or more rounds (min_rounds, pedantic rounds=...)")


# ----------------------------------------------------------------------------- K: calls longer than max_time


def test_one_long_call_says_why_the_measurement_overran_max_time(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=LOOP)
    script_timings(pytester, {"ms": 300.0, "cv": 0.0})  # scripted: takes no real time
    rec = pytester.runpytest("--gpuperf", *RUN)
    rec.assert_outcomes(passed=1)
    # Issue 24: one line for the session, addressed to the suite's author, naming every such benchmark.
    rec.stdout.fnmatch_lines(["warning: 1 benchmark(s) took far longer than their max_time because one call is long:"
                              " test_bench.py::test_loop (3.3 s for max_time 0.05 s: one call takes 300 ms,"
                              " min_rounds=10 and 1 warmup call). For the suite's author: min_rounds rounds and the"
                              " warmup always run, so lower min_rounds/warmup_time or raise max_time in their"
                              " @pytest.mark.gpu_bench(...)"])
    assert rec.stdout.str().count("took far longer than their max_time") == 1
    set_timings(pytester, STEADY)
    assert "took far longer" not in pytester.runpytest("--gpuperf", *RUN).stdout.str()


def test_long_calls_of_several_benchmarks_give_one_warning_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=LOOP, test_other=LOOP.replace("def test_loop", "def test_other"))
    script_timings(pytester, {"ms": 300.0, "cv": 0.0})
    rec = pytester.runpytest("--gpuperf", *RUN)
    rec.assert_outcomes(passed=2)
    (line,) = [ln for ln in rec.outlines if "took far longer than their max_time" in ln]
    assert line.startswith("warning: 2 benchmark(s) took far longer")
    assert "test_bench.py::test_loop (" in line and "test_other.py::test_other (" in line


# --------------------------------------------------------------------------------------------
# naming a measurement cannot collide with fn's keyword arguments; the baseline-dir space form
# --------------------------------------------------------------------------------------------


def test_named_measurements_pass_every_keyword_to_fn(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        def model(x, name="default"):
            return f"{name}:{x}"

        @pytest.mark.gpu_bench(device="cpu")
        def test_named(gpu_bench):
            fwd = gpu_bench.named("forward")(model, 1, name="layer")  # name= goes to model
            bwd = gpu_bench.named("backward")(model, 2)
            assert fwd.value == "layer:1" and bwd.value == "default:2"
            assert [fwd.benchmark_id, bwd.benchmark_id] == ["test_named::forward", "test_named::backward"]

        @pytest.mark.gpu_bench(device="cpu")
        def test_name_to_fn_without_it(gpu_bench):
            gpu_bench(lambda x: x, 1, name="forward")
        """
    )
    script_timings(pytester, {"ms": 1.0})
    rec = pytester.runpytest("--gpuperf", "-p", "no:cacheprovider")
    rec.assert_outcomes(passed=1, failed=1)
    rec.stdout.fnmatch_lines(["*passes name= to fn, which does not take it*gpu_bench.named('forward')(fn, ...)*"])


def test_baseline_dir_space_form_outside_the_project_is_a_usage_error(pytester: pytest.Pytester,
                                                                     tmp_path_factory: pytest.TempPathFactory) -> None:
    outside = tmp_path_factory.mktemp("elsewhere")
    pytester.makepyfile("def test_x():\n    pass\n")
    rec = pytester.runpytest("--gpuperf-baseline-dir", str(outside), "-p", "no:cacheprovider")
    assert rec.ret == pytest.ExitCode.USAGE_ERROR
    assert f"write --gpuperf-baseline-dir={outside} (with '=')" in rec.stderr.str()
    ok = pytester.runpytest(f"--gpuperf-baseline-dir={outside}", "-p", "no:cacheprovider")
    ok.assert_outcomes(passed=1)
    inside = pytester.runpytest("--gpuperf-baseline-dir", "bl", "-p", "no:cacheprovider")  # harmless
    inside.assert_outcomes(passed=1)


@pytest.mark.parametrize("flag", ["--gpuperf-history", "--gpuperf-json"])
def test_other_path_flags_in_the_space_form_outside_the_project_are_usage_errors(
        pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory, flag: str) -> None:
    """The bug the real-history study hit: ``--gpuperf-history /abs/store.sqlite`` moved the rootdir,
    every benchmark missed its baseline and the commit was recorded as None, with no error."""
    outside = tmp_path_factory.mktemp("elsewhere") / "store.sqlite"
    outside.write_bytes(b"kept")
    pytester.makepyfile("def test_x():\n    pass\n")
    rec = pytester.runpytest(flag, str(outside), "-p", "no:cacheprovider")
    assert rec.ret == pytest.ExitCode.USAGE_ERROR
    assert f"write {flag}={outside} (with '=')" in rec.stderr.str()
    assert outside.read_bytes() == b"kept"
    # a value that does not exist yet is not read as a test path: no error
    fresh = outside.with_name("new.json")
    pytester.runpytest("--gpuperf-json", str(fresh), "-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_the_space_form_in_pytest_addopts_is_a_usage_error_too(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path_factory: pytest.TempPathFactory) -> None:
    # issue 46: PYTEST_ADDOPTS="--gpuperf-json /abs/r.json" (the file there) moved the rootdir and
    # every benchmark was no-baseline, exit 0: the guard read only the command line
    outside = tmp_path_factory.mktemp("elsewhere") / "r.json"
    outside.write_text("{}")
    pytester.makepyfile("def test_x():\n    pass\n")
    monkeypatch.setenv("PYTEST_ADDOPTS", f"--gpuperf-json {outside}")
    rec = pytester.runpytest("-p", "no:cacheprovider")
    assert rec.ret == pytest.ExitCode.USAGE_ERROR
    assert f"write --gpuperf-json={outside} (with '=') in PYTEST_ADDOPTS" in rec.stderr.str()
    monkeypatch.setenv("PYTEST_ADDOPTS", f"--gpuperf-json={outside}")
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_the_space_form_in_ini_addopts_keeps_the_rootdir_and_the_gate(pytester: pytest.Pytester,
                                                                     tmp_path_factory: pytest.TempPathFactory) -> None:
    # issue 46: ini addopts are read after pytest has chosen the rootdir, so the space form cannot
    # move it (as PYTEST_ADDOPTS and the command line did): the path is the option's value
    outside = tmp_path_factory.mktemp("elsewhere") / "r.json"
    outside.write_text("{}")
    pytester.makeini(f"[pytest]\naddopts = --gpuperf-json {outside}\n")
    pytester.makepyfile("def test_x():\n    pass\n")
    rec = pytester.runpytest("-p", "no:cacheprovider")
    rec.assert_outcomes(passed=1)
    assert f"rootdir: {pytester.path}" in rec.stdout.str()
    assert json.loads(outside.read_text()).get("benchmarks") == {}  # the report went where addopts said


def test_long_calls_under_xdist_give_one_warning_line_in_the_controller(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(test_bench=LOOP, test_other=LOOP.replace("def test_loop", "def test_other"))
    script_timings(pytester, {"ms": 300.0, "cv": 0.0})
    rec = pytester.runpytest_subprocess("--gpuperf", "-n", "2", "--gpuperf-processes=1", *RUN)
    rec.assert_outcomes(passed=2)
    lines = [ln for ln in rec.outlines if "took far longer than their max_time" in ln]
    assert len(lines) == 1 and lines[0].startswith("warning: 2 benchmark(s)"), lines  # merged from both workers
