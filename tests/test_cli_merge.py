"""``gpuperf merge`` (issue 34, sharded CI): real shards of a small suite, each run with ``-k`` into
its own baseline folder and JSON report (scripted timings), merged into one report and one
baseline folder that an unsharded run compares every benchmark against; a benchmark measured in
two shards, a corrupt file and a foreign file are named and nothing is written; an empty shard is
fine."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_gpuperf.cli import main
from pytest_gpuperf.storage.merge import continues
from scripted import script_timings, set_timings

pytest_plugins = ["pytester"]

RUN = ("-p", "no:cacheprovider", "--gpuperf-no-history")

SUITE = """
import pytest

def _bench(gpu_bench):
    gpu_bench.pedantic(sum, args=(range(10),), rounds=20, warmup_rounds=2)

@pytest.mark.gpu_bench(device="cpu", counts=False)
def test_add(gpu_bench):
    _bench(gpu_bench)

@pytest.mark.gpu_bench(device="cpu", counts=False)
def test_mul(gpu_bench):
    _bench(gpu_bench)

@pytest.mark.gpu_bench(device="cpu", counts=False)
def test_conv(gpu_bench):
    _bench(gpu_bench)

@pytest.mark.gpu_bench(device="cpu", counts=False)
def test_norm(gpu_bench):
    _bench(gpu_bench)
"""
NAMES = ("test_add", "test_mul", "test_conv", "test_norm")
TIMINGS = {name: {"ms": 1.0 + i, "cv": 0.02, "seed": i} for i, name in enumerate(NAMES)}
SHARDS = {"s1": "test_add or test_mul", "s2": "test_conv or test_norm", "s3": "nothing_matches"}


def _shard(pytester: pytest.Pytester, shard: str, expr: str, *extra: str) -> pytest.RunResult:
    """One CI job: ``-k expr`` into ``<shard>/baselines`` and ``<shard>/perf.json``."""
    return pytester.runpytest("-k", expr, "--gpuperf-baseline-dir", f"{shard}/baselines",
                              "--gpuperf-json", f"{shard}/perf.json", *extra, *RUN)


def _run_shards(pytester: pytest.Pytester, mode: str = "--gpuperf-update-baselines") -> None:
    for shard, expr in SHARDS.items():
        result = _shard(pytester, shard, expr, mode)
        if shard == "s3":
            assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED  # everything deselected
        else:
            result.assert_outcomes(passed=2)


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def _history_lengths(folder: Path) -> dict[str, int]:
    (f,) = folder.rglob("*.json")
    return {bid: len(e["history"]) for bid, e in _load(f)["benchmarks"].items()}


@pytest.fixture
def sharded(pytester: pytest.Pytester) -> Path:
    """The suite, recorded in three shards (the third selects nothing); returns the folder."""
    pytester.makepyfile(test_bench=SUITE)
    script_timings(pytester, None, **TIMINGS)
    _run_shards(pytester)
    return pytester.path


def test_merged_shards_are_the_unsharded_run(sharded: Path, pytester: pytest.Pytester, capsys) -> None:
    from pytest_gpuperf.storage.schema import validate

    p = sharded
    reports = [p / s / "perf.json" for s in SHARDS]
    assert _load(reports[2])["benchmarks"] == {}  # the empty shard wrote an empty report
    # shard 2 ran on another machine of the same device key: its environment differs
    s2 = _load(reports[1])
    for env in [*s2["environments"].values(), *(e["environment"] for e in s2["benchmarks"].values())]:
        env["torch_num_threads"] = 99
    reports[1].write_text(json.dumps(s2))
    assert main(["merge", *map(str, reports), "--out", str(p / "perf.json")]) == 0
    merged = _load(p / "perf.json")
    validate(merged, "report")
    union = {k: v for r in reports for k, v in _load(r)["benchmarks"].items()}
    assert merged["benchmarks"] == union and sorted(union) == sorted(f"test_bench.py::{n}" for n in NAMES)
    assert [m["benchmarks"] for m in merged["merged_from"]] == [2, 2, 0]
    assert merged["git_commit"] == _load(reports[0])["git_commit"]
    assert main(["compare", str(reports[0]), str(p / "perf.json")]) == 0  # readable by compare

    db = p / "h.sqlite"
    assert main(["history", "import", str(p / "perf.json"), "--history", str(db)]) == 0
    capsys.readouterr()
    assert main(["history", "export", "--history", str(db)]) == 0
    rows = json.loads(capsys.readouterr().out)["results"]
    assert sorted(r["benchmark"] for r in rows) == sorted(union)
    assert all(r["device_key"] and r["device_key"].startswith("cpu-") for r in rows)

    (p / "s3" / "baselines").mkdir(exist_ok=True)  # an empty shard's folder, if it makes one
    dirs = [str(p / s / "baselines") for s in SHARDS]
    assert main(["merge", "--baselines", *dirs, "--out", str(p / "baselines")]) == 0
    assert _history_lengths(p / "baselines") == dict.fromkeys(NAMES, 1)
    assert main(["show", str(p / "baselines")]) == 0
    # the unsharded run compares every benchmark with the merged baselines
    result = pytester.runpytest("--gpuperf", "--gpuperf-json", "all.json", *RUN)
    result.assert_outcomes(passed=4)
    verdicts = {k: e["verdict"] for k, e in _load(p / "all.json")["benchmarks"].items()}
    assert verdicts == {f"test_bench.py::{n}": "unchanged" for n in NAMES}
    assert "no baseline" not in result.stdout.str()


def test_shards_updating_the_committed_baselines_merge_into_them(sharded: Path, pytester: pytest.Pytester) -> None:
    """The CI update: each shard starts from the committed baselines and appends its benchmarks'
    runs; merged into the committed folder, every benchmark has its new run (the copies a shard
    did not touch yield to the copies that continue them)."""
    p = sharded
    committed = p / "baselines"
    assert main(["merge", "--baselines", str(p / "s1/baselines"), str(p / "s2/baselines"), "--out",
                 str(committed)]) == 0
    before = {f: f.read_text() for f in committed.rglob("*.json")}
    for shard in SHARDS:  # each job checks out the committed baselines
        shutil.rmtree(p / shard, ignore_errors=True)
        shutil.copytree(committed, p / shard / "baselines")
    set_timings(pytester, None, **{n: dict(t, seed=t["seed"] + 10) for n, t in TIMINGS.items()})
    _run_shards(pytester)
    dirs = [str(p / s / "baselines") for s in SHARDS]
    assert main(["merge", "--baselines", *dirs, "--out", str(committed)]) == 0
    assert _history_lengths(committed) == dict.fromkeys(NAMES, 2)
    assert {f: f.read_text() for f in committed.rglob("*.json")} != before
    # merging again changes nothing: the folder's entries are the newest copies
    assert main(["merge", "--baselines", *dirs, "--out", str(committed)]) == 0
    assert _history_lengths(committed) == dict.fromkeys(NAMES, 2)


def test_a_benchmark_in_two_shards_is_named_and_nothing_is_written(sharded: Path, pytester: pytest.Pytester,
                                                                   capsys) -> None:
    p = sharded
    set_timings(pytester, None, **{n: dict(t, seed=t["seed"] + 20) for n, t in TIMINGS.items()})
    _shard(pytester, "s4", "test_mul", "--gpuperf-update-baselines").assert_outcomes(passed=1)
    capsys.readouterr()
    assert main(["merge", str(p / "s1/perf.json"), str(p / "s4/perf.json"), "--out", str(p / "m.json")]) == 2
    err = capsys.readouterr().err
    assert "test_bench.py::test_mul" in err and "s1/perf.json" in err and "s4/perf.json" in err
    assert not (p / "m.json").exists()
    assert main(["merge", "--baselines", str(p / "s1/baselines"), str(p / "s4/baselines"), "--out",
                 str(p / "merged")]) == 2
    err = capsys.readouterr().err
    assert "'test_mul'" in err and "s1/baselines" in err and "s4/baselines" in err and "nothing written" in err
    assert not (p / "merged").exists() and not list(p.glob(".merged*"))
    # the same report twice: identical entries, no conflict
    assert main(["merge", str(p / "s1/perf.json"), str(p / "s1/perf.json"), "--out", str(p / "m.json")]) == 0


def test_corrupt_and_foreign_files_are_named_and_nothing_is_written(sharded: Path, capsys) -> None:
    p = sharded
    out = p / "m.json"
    out.write_text("old")
    (p / "bad.json").write_text("{not json")
    baseline = next((p / "s1/baselines").rglob("*.json"))
    for bad in (p / "bad.json", baseline, p / "missing.json"):
        assert main(["merge", str(p / "s1/perf.json"), str(bad), "--out", str(out)]) == 2
        assert str(bad) in capsys.readouterr().err and out.read_text() == "old"
    other = _load(p / "s2/perf.json")
    other["git_commit"] = "f" * 40
    (p / "other.json").write_text(json.dumps(other))
    assert main(["merge", str(p / "s1/perf.json"), str(p / "other.json"), "--out", str(out)]) == 2
    assert "different commits" in capsys.readouterr().err and out.read_text() == "old"
    shutil.copytree(p / "s2/baselines", p / "s5")
    broken = next((p / "s5").rglob("*.json"))
    broken.write_text('{"schema_version": 2, "benchmarks": {"x": {"samples_ms": []}}}')
    assert main(["merge", "--baselines", str(p / "s1/baselines"), str(p / "s5"), "--out", str(p / "merged")]) == 2
    assert str(broken) in capsys.readouterr().err and not (p / "merged").exists()
    device_folder = next((p / "s1/baselines").iterdir())
    assert main(["merge", "--baselines", str(device_folder), "--out", str(p / "merged")]) == 2
    assert "give the baseline folder" in capsys.readouterr().err
    assert main(["merge", "--out", str(out)]) == 2 and main(["merge", str(out)]) == 2


def _entry(*medians: float) -> dict:
    runs = [{"median_ms": m, "timestamp_utc": f"2025-01-0{i + 1}T00:00:00Z"} for i, m in enumerate(medians)]
    return {"samples_ms": [medians[-1]], "stats": {"median_ms": medians[-1]}, "history": runs}


def test_continues_reads_the_stored_runs() -> None:
    base = _entry(1.0, 2.0)
    assert continues(_entry(1.0, 2.0, 3.0), base)  # one run appended
    assert continues({**_entry(1.0, 2.0, 3.0), "history": _entry(1.0, 2.0, 3.0)["history"][1:]}, base)  # kept 2
    assert not continues(base, base) and not continues(base, _entry(1.0, 2.0, 3.0))
    assert not continues(_entry(1.0, 2.5, 3.0), base)  # another line of runs
    one = {**_entry(5.0), "history": _entry(1.0, 2.0, 5.0)["history"][2:]}  # history=1: no way to tell
    assert not continues(one, base)
