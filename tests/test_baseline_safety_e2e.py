"""End-to-end safety of baseline files (issue 13) through real inner pytest sessions and the
``gpuperf`` command line: modules whose old file names collided, a file of another module,
wrong-typed fields, symlinked files, per-user lock folders, and ``gpuperf show | head``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from scripted import script_timings

pytest_plugins = ["pytester"]

RUN = ("-p", "no:cacheprovider")
# Timings are scripted (tests/scripted.py): the verdicts below are the same on any machine.
STEADY = {"ms": 1.0, "cv": 0.02, "seed": 1}
BENCH = """
import pytest

@pytest.mark.gpu_bench(threshold=0.3, device="cpu")
def test_loop(gpu_bench):
    gpu_bench.pedantic(sum, args=(range(100),), rounds=20, warmup_rounds=2)
"""
OURS, THEIRS = "x/y/test_perf.py", "x__y/test_perf.py"


@pytest.fixture(autouse=True)
def private_tmpdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The inner sessions (in-process) take their locks under a fresh temp dir."""
    d = tmp_path / "systmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


def _two_modules(pytester: pytest.Pytester) -> None:
    """``x/y/test_perf.py`` and ``x__y/test_perf.py``: one file name under the old mapping."""
    for pkg in ("x", "x/y", "x__y"):
        pytester.mkpydir(pkg)
    pytester.path.joinpath(OURS).write_text(BENCH)
    pytester.path.joinpath(THEIRS).write_text(BENCH)
    script_timings(pytester, STEADY)


def _files(pytester: pytest.Pytester) -> dict[str, Path]:
    return {p.name: p for p in pytester.path.joinpath("baselines").rglob("*.json")}


def test_modules_that_shared_a_file_get_one_each(pytester: pytest.Pytester) -> None:
    _two_modules(pytester)
    pytester.runpytest("--gpuperf-update-baselines", *RUN).assert_outcomes(passed=2)
    files = _files(pytester)
    assert sorted(files) == ["x%5F%5Fy__test_perf.json", "x__y__test_perf.json"]
    assert json.loads(files["x__y__test_perf.json"].read_text())["module"] == OURS
    assert json.loads(files["x%5F%5Fy__test_perf.json"].read_text())["module"] == THEIRS
    rec = pytester.runpytest("--gpuperf", *RUN)
    rec.assert_outcomes(passed=2)
    assert "no baseline" not in rec.stdout.str()


def test_file_of_another_module_errors_and_stays_untouched(pytester: pytest.Pytester) -> None:
    _two_modules(pytester)
    pytester.runpytest("--gpuperf-update-baselines", *RUN).assert_outcomes(passed=2)
    files = _files(pytester)
    # What the old mapping did: the file name of OURS holds THEIRS' baselines.
    ours_file = files["x__y__test_perf.json"]
    ours_file.write_bytes(files["x%5F%5Fy__test_perf.json"].read_bytes())
    before = ours_file.read_bytes()
    for flag in ("--gpuperf", "--gpuperf-update-baselines"):
        rec = pytester.runpytest(flag, *RUN)
        rec.assert_outcomes(passed=1, errors=1)
        rec.stdout.fnmatch_lines([f"ERROR {OURS}::test_loop*"])
        out = rec.stdout.str()
        assert f"holds the baselines of module '{THEIRS}', not of '{OURS}'" in out
        assert "neither compared with nor written over" in out
        assert ours_file.read_bytes() == before


@pytest.mark.parametrize("field, value, message", [
    ("stats", None, "benchmarks['test_loop'].stats: None is not of type 'object'"),
    ("options", "x", "entry 'test_loop' has 'options' that is not a JSON object: 'x'"),
    ("peak_memory_bytes", "lots", "'peak_memory_bytes' that is not a whole number of bytes >= 0: 'lots'"),
])
def test_wrong_typed_field_errors_naming_it(pytester: pytest.Pytester, field: str, value: object,
                                            message: str) -> None:
    pytester.makepyfile(test_bench=BENCH)
    script_timings(pytester, STEADY)
    pytester.runpytest("--gpuperf-update-baselines", *RUN).assert_outcomes(passed=1)
    (path,) = _files(pytester).values()
    data = json.loads(path.read_text())
    data["benchmarks"]["test_loop"][field] = value
    path.write_text(json.dumps(data, indent=2))
    before = path.read_bytes()
    for flag in ("--gpuperf", "--gpuperf-update-baselines"):
        rec = pytester.runpytest(flag, *RUN)
        rec.assert_outcomes(errors=1)
        assert message in rec.stdout.str()
        assert path.read_bytes() == before
    assert sorted(os.listdir(path.parent)) == [path.name]


def test_written_baselines_follow_the_schema_and_leave_no_locks(pytester: pytest.Pytester,
                                                                 private_tmpdir: Path) -> None:
    from pytest_gpuperf.storage.schema import validate

    _two_modules(pytester)
    for _ in range(2):
        pytester.runpytest("--gpuperf-update-baselines", *RUN).assert_outcomes(passed=2)
    for path in _files(pytester).values():
        validate(json.loads(path.read_text()), "baseline")  # the full schema, every field required
    (folder,) = private_tmpdir.iterdir()
    if hasattr(os, "getuid"):
        assert folder.name == f"gpuperf-locks-{os.getuid()}"
        assert folder.stat().st_mode & 0o777 == 0o700 and folder.stat().st_uid == os.getuid()
    assert list(folder.iterdir()) == []


@pytest.mark.skipif(not hasattr(os, "symlink") or os.name != "posix", reason="POSIX symbolic links")
def test_symlinked_baseline_file_stays_a_link(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=BENCH)
    script_timings(pytester, STEADY)
    pytester.runpytest("--gpuperf-update-baselines", *RUN).assert_outcomes(passed=1)
    (path,) = _files(pytester).values()
    shared = pytester.path / "shared" / "bench.json"
    shared.parent.mkdir()
    path.rename(shared)
    path.symlink_to(shared)
    pytester.runpytest("--gpuperf-update-baselines", *RUN).assert_outcomes(passed=1)
    assert path.is_symlink() and path.resolve() == shared.resolve()
    assert len(json.loads(shared.read_text())["benchmarks"]["test_loop"]["history"]) == 2
    assert sorted(os.listdir(path.parent)) == [path.name]
    assert sorted(os.listdir(shared.parent)) == ["bench.json"]


def _many_benchmarks(root: Path, n: int = 4000) -> None:
    benchmarks = {
        f"test_number_{i:05d}": {"schema_version": 2, "id": f"test_number_{i:05d}", "samples_ms": [1.0, 1.5],
                                 "stats": {"median_ms": 1.25}, "timestamp_utc": "2026-01-01T00:00:00Z"}
        for i in range(n)
    }
    path = root / "cpu-test" / "tests__perf__test_many.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"schema_version": 2, "module": "tests/perf/test_many.py", "benchmarks": benchmarks}))


def test_show_piped_into_head_exits_quietly(tmp_path: Path) -> None:
    """``gpuperf show | head -1``: the reader closes the pipe after one line while the command
    still has a few hundred KiB to print (more than a pipe holds)."""
    _many_benchmarks(tmp_path / "bl")
    proc = subprocess.Popen([sys.executable, "-m", "pytest_gpuperf", "show", str(tmp_path / "bl")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode("utf-8", "replace")
    code = proc.wait(120)
    proc.stderr.close()
    assert first.startswith(b"device cpu-test:")
    assert "Traceback" not in err and "BrokenPipeError" not in err and "Exception ignored" not in err, err
    assert err == ""
    assert code == 141


def test_show_to_a_reader_that_reads_all_still_exits_0(tmp_path: Path) -> None:
    _many_benchmarks(tmp_path / "bl", n=50)
    proc = subprocess.run([sys.executable, "-m", "pytest_gpuperf", "show", str(tmp_path / "bl")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "test_number_00049" in proc.stdout and proc.stderr == ""
