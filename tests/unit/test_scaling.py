"""Scaling efficiency across world sizes (issue 35, item 5) without torchrun: the pure formulas
(pytest_gpuperf.verdict.scaling), the ``scaling``/``min_scaling_efficiency`` options, the gate's
message and JSON form, the plugin's lookup of a smaller world size's baseline, and ``gpuperf
scaling`` on hand-made baseline folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gpuperf.cli import main
from pytest_gpuperf.core.options import OptionError, resolve
from pytest_gpuperf.verdict.result import BenchResult
from pytest_gpuperf.verdict.scaling import (ScalingCheck, efficiency, formula, reference_world_size, scaling_table,
                                            speedup, split_world_size)

# ----------------------------------------------------------------------------- the formulas


def test_strong_scaling_is_t1_over_n_tn() -> None:
    rows = scaling_table({1: 8.0, 2: 5.0, 4: 2.5}, "strong")
    assert [r.world_size for r in rows] == [1, 2, 4]
    assert [r.speedup for r in rows] == [1.0, 1.6, 3.2]
    assert [r.efficiency for r in rows] == [1.0, 0.8, 0.8]  # 8 / (2 * 5), 8 / (4 * 2.5)


def test_weak_scaling_is_t1_over_tn_with_the_scaled_speedup() -> None:
    rows = scaling_table({4: 2.5, 1: 2.0, 2: 2.0}, "weak")
    assert [r.efficiency for r in rows] == [1.0, 1.0, 0.8]  # 2 / 2, 2 / 2.5
    assert [r.speedup for r in rows] == [1.0, 2.0, 3.2]  # N * T1 / TN


def test_without_world_size_1_the_smallest_recorded_is_the_reference() -> None:
    strong = scaling_table({2: 4.0, 8: 1.25}, "strong")
    assert strong[1].efficiency == 0.8 and strong[1].speedup == 3.2  # (2 * 4) / (8 * 1.25)
    weak = scaling_table({2: 4.0, 8: 5.0}, "weak")
    assert weak[1].efficiency == 0.8 and weak[1].speedup == 3.2  # 4 / 5; (8 / 2) * 4 / 5
    assert efficiency("strong", 2, 4.0, 8, 1.25) == 0.8 and speedup("weak", 2, 4.0, 8, 5.0) == 3.2
    assert formula("strong") == "T1 / (N·TN)" and formula("weak") == "T1 / TN"
    assert formula("strong", 2) == "(2·T2) / (N·TN)" and formula("weak", 2) == "T2 / TN"


@pytest.mark.parametrize("call, match", [
    (lambda: scaling_table({}, "strong"), "no medians"),
    (lambda: scaling_table({1: 2.0, 2: 1.0}, "linear"), "scaling kind 'linear'"),
    (lambda: scaling_table({0: 2.0, 2: 1.0}), "world size 0"),
    (lambda: scaling_table({1: 2.0, 2: 0.0}), "median 0.0 ms at world size 2"),
    (lambda: ScalingCheck("strong", 2, float("nan"), 1, 2.0), "median nan ms"),
])
def test_unusable_inputs_are_refused(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


def test_world_size_suffix_and_reference() -> None:
    assert split_world_size("cpu-amd-epyc-ws4") == ("cpu-amd-epyc", 4)
    assert split_world_size("cpu-amd-epyc") == ("cpu-amd-epyc", 1)
    assert split_world_size("cuda-x-ws0") == ("cuda-x-ws0", 1)  # not a world size
    assert reference_world_size([4, 1, 2], 4) == 1
    assert reference_world_size([2, 8], 8) == 2
    assert reference_world_size([4, 8], 4) is None and reference_world_size([], 2) is None


# ----------------------------------------------------------------------------- the gate


def test_the_gate_fails_below_the_minimum_naming_the_formula_and_the_file() -> None:
    check = ScalingCheck("strong", 2, 1.6129, 1, 2.0, "baselines/cpu-x/test_d.json", 0.8)
    assert check.efficiency == pytest.approx(0.62, abs=1e-4) and check.failed
    assert check.message() == (
        "scaling efficiency 0.62 at 2 ranks (strong: T1 / (N·TN), T1 = 2.000 ms from baselines/cpu-x/test_d.json, "
        "T2 = 1.613 ms) is below min_scaling_efficiency=0.8")
    ok = ScalingCheck("weak", 4, 2.2, 1, 2.0, "f.json", 0.9)
    assert not ok.failed and ok.message().endswith("meets min_scaling_efficiency=0.9")
    assert not ScalingCheck("strong", 2, 5.0, 1, 2.0).failed  # no minimum: reported only


def test_the_gate_fails_the_result_and_travels_in_the_report_entry() -> None:
    from pytest_gpuperf.reporting.messages import failure_messages
    from pytest_gpuperf.storage.codec import decode_result, encode_result

    check = ScalingCheck("strong", 4, 1.0, 1, 2.0, "b.json", 0.8)  # 2 / (4 * 1) = 0.5
    r = BenchResult.from_samples([1.0], name="t", device="cpu", rounds=1, calls_per_round=1, warmup_calls=0,
                                 benchmark_id="t", scaling=check)
    assert r.failing() == ("scaling",) and r.failing(updating=True) == ("scaling",)  # a hard check
    head, aside = check.message().split(" (", 1)  # the reason first, within 80 columns (issue 47)
    assert failure_messages(r, label="m.py::t") == [f"{head}\n  m.py::t\n  ({aside}"]
    entry = encode_result(r, environment={}, git_commit=None, timestamp_utc="", with_comparison=True)
    assert entry["scaling"] == {"kind": "strong", "world_size": 4, "median_ms": 1.0, "reference_world_size": 1,
                                "reference_ms": 2.0, "reference_file": "b.json", "efficiency": 0.5,
                                "min_efficiency": 0.8}
    assert decode_result(entry).scaling == check
    assert "scaling" not in encode_result(r, environment={}, git_commit=None, timestamp_utc="")  # not in baselines
    assert ScalingCheck.from_dict({"kind": "strong"}) is None and ScalingCheck.from_dict(None) is None


# ----------------------------------------------------------------------------- the options


def test_scaling_options_default_and_validate() -> None:
    o = resolve()
    assert o.scaling == "strong" and o.min_scaling_efficiency is None
    o = resolve({"scaling": "Weak", "min_scaling_efficiency": 0.8})
    assert o.scaling == "weak" and o.min_scaling_efficiency == 0.8
    assert resolve({"min_scaling_efficiency": 1}).min_scaling_efficiency == 1.0
    assert resolve(ini={"min_scaling_efficiency": "none"}).min_scaling_efficiency is None


@pytest.mark.parametrize("marker, message", [
    ({"scaling": "linear"}, r"scaling='linear': expected 'strong' \(the same problem split over the ranks\) or 'weak'"),
    ({"scaling": 2}, "scaling=2: expected 'strong'"),
    ({"min_scaling_efficiency": 0}, r"min_scaling_efficiency=0: expected a fraction in \(0, 1\]"),
    ({"min_scaling_efficiency": 1.2}, r"min_scaling_efficiency=1.2: expected a fraction in \(0, 1\]"),
    ({"min_scaling_efficiency": "80%"}, r"min_scaling_efficiency='80%': expected a fraction in \(0, 1\]"),
])
def test_bad_scaling_options_name_the_option_and_what_is_accepted(marker: dict, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        resolve(marker)


# ----------------------------------------------------------------------------- baseline folders


def write(root: Path, key: str, entries: dict[str, float], module: str = "test_d.py",
          options: dict | None = None) -> Path:
    """A baseline file of ``module`` under ``root/key``: each benchmark id with one stored run of that median (ms)."""
    benchmarks = {bid: {"schema_version": 2, "id": bid, "name": bid, "device": "cpu", "stats": {"median_ms": ms},
                        "samples_ms": [ms], "rounds": 1, "options": dict(options or {}),
                        "history": [{"median_ms": ms, "timestamp_utc": "2026-11-27T00:00:00Z"}]}
                  for bid, ms in entries.items()}
    path = root / key / (module.replace("/", "__").removesuffix(".py") + ".json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema_version": 2, "device_key": key, "module": module, "benchmarks": benchmarks}))
    return path


def test_the_plugin_finds_the_smallest_smaller_world_size_with_the_benchmark(tmp_path: Path) -> None:
    from pytest_gpuperf.storage.scaling import ScalingReference
    from pytest_gpuperf.storage.baseline import load

    write(tmp_path, "cpu-x", {"test_a": 8.0})
    write(tmp_path, "cpu-x-ws2", {"test_a": 5.0, "test_b": 3.0})
    write(tmp_path, "cpu-x-ws8", {"test_a": 1.0, "test_b": 1.0})
    write(tmp_path, "cpu-y", {"test_b": 9.0})  # another device
    write(tmp_path, "cpu-x", {"test_c": 9.0}, module="other.py")
    lookup = ScalingReference(load, tmp_path, "cpu-x", "test_d.py", 4, lambda p: p.relative_to(tmp_path).as_posix())
    assert lookup.folder == "cpu-x"  # where a world-size-1 reference would be recorded
    assert lookup("test_a") == (1, 8.0, "cpu-x/test_d.json")
    assert lookup("test_b") == (2, 3.0, "cpu-x-ws2/test_d.json")
    assert lookup("test_c") is None
    assert ScalingReference(load, tmp_path / "none", "cpu-x", "test_d.py", 4, str)("test_a") is None


def test_gpuperf_scaling_prints_a_table_per_benchmark_at_several_world_sizes(tmp_path: Path, capsys) -> None:
    write(tmp_path, "cpu-x", {"test_strong": 8.0, "test_weak": 2.0, "test_once": 1.0})
    write(tmp_path, "cpu-x-ws2", {"test_strong": 5.0})
    write(tmp_path, "cpu-x-ws2", {"test_weak": 2.0}, module="test_w.py", options={"scaling": "weak"})
    write(tmp_path, "cpu-x", {"test_weak": 2.0}, module="test_w.py", options={"scaling": "weak"})
    write(tmp_path, "cpu-x-ws4", {"test_strong": 2.5})
    write(tmp_path, "cpu-x-ws4", {"test_weak": 2.5}, module="test_w.py", options={"scaling": "weak"})
    assert main(["scaling", "--baseline-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "test_d.py::test_strong  [cpu-x]  strong scaling, efficiency T1 / (N·TN)" in out
    lines = [line.split() for line in out.splitlines()]
    assert ["1", "8.000", "ms", "1.00x", "100.0%", "strong"] in lines
    assert ["2", "5.000", "ms", "1.60x", "80.0%", "strong"] in lines
    assert ["4", "2.500", "ms", "3.20x", "80.0%", "strong"] in lines
    assert "test_w.py::test_weak  [cpu-x]  weak scaling, efficiency T1 / TN" in out
    assert ["4", "2.500", "ms", "3.20x", "80.0%", "weak"] in lines
    assert "test_d.py::test_weak" not in out and "test_once" not in out
    assert "2 benchmark(s) recorded at one world size only" in out

    assert main(["scaling", "--baseline-dir", str(tmp_path), "-k", "test_w.py", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (bench,) = data["benchmarks"]
    assert (bench["module"], bench["benchmark"], bench["kind"], bench["device_key"]) == (
        "test_w.py", "test_weak", "weak", "cpu-x")
    assert [(p["world_size"], p["efficiency"], p["speedup"]) for p in bench["points"]] == [
        (1, 1.0, 1.0), (2, 1.0, 2.0), (4, 0.8, 3.2)]
    assert data["single_world_size"] == 0


def test_gpuperf_scaling_errors_are_clear(tmp_path: Path, capsys) -> None:
    assert main(["scaling", "--baseline-dir", str(tmp_path / "missing")]) == 2
    assert f"baseline folder {tmp_path / 'missing'} does not exist" in capsys.readouterr().err
    (tmp_path / "f").write_text("x")
    assert main(["scaling", "--baseline-dir", str(tmp_path / "f")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    write(tmp_path / "b", "cpu-x", {"test_a": 1.0})
    assert main(["scaling", "--baseline-dir", str(tmp_path / "b")]) == 0
    assert "no benchmark under" in capsys.readouterr().out
    bad = tmp_path / "b" / "cpu-x-ws2" / "test_d.json"
    bad.parent.mkdir()
    bad.write_text("{not json")
    assert main(["scaling", "--baseline-dir", str(tmp_path / "b")]) == 2
    assert f"{bad}: unreadable: " in capsys.readouterr().err


def test_the_folder_suffix_reads_back() -> None:
    from pytest_gpuperf.verdict.scaling import split_world_size, world_size_suffix

    assert split_world_size("cpu-x" + world_size_suffix(8)) == ("cpu-x", 8)


def test_a_result_decided_from_torchrun_launches_gets_its_scaling_and_its_communications_change() -> None:
    """``--gpuperf-nproc``: the coordinator adds what a rank of a launch the user started adds."""
    from types import SimpleNamespace

    from pytest_gpuperf.core.options import BenchOptions
    from pytest_gpuperf.verdict.communication import Communication
    from pytest_gpuperf.verdict.distributed import launched_result

    now = Communication.from_dict({"backend": "gloo", "share": [0.4, 0.42], "per_call_ms": [1.0, 1.1],
                                   "overlap": [None, None], "collectives": {}})
    options = BenchOptions(min_scaling_efficiency=0.8)
    r = BenchResult.from_samples([1.0, 1.0, 1.0], name="t", device="cpu", rounds=3, calls_per_round=1,
                                 warmup_calls=0, benchmark_id="t", communication=now, options=options)
    then = SimpleNamespace(data={"communication": {"backend": "gloo", "share": [0.1, 0.12], "per_call_ms": [1.0, 1.0],
                                                   "overlap": [None, None], "collectives": {}}})
    got, note = launched_result(r, then, (1, 1.5, "baselines/cpu-x/m.json"), "baselines/cpu-x", 2)
    assert note is None
    assert got.scaling == ScalingCheck("strong", 2, 1.0, 1, 1.5, "baselines/cpu-x/m.json", 0.8)  # 1.5/(2*1) = 0.75
    assert got.failing() == ("scaling",)
    assert got.communication.change.startswith("communication share 11% -> 41% of the step")
    alone, note = launched_result(r, None, None, "baselines/cpu-x", 2)  # no smaller world size, no baseline
    assert alone.scaling is None and alone.communication.change is None
    assert note.startswith("min_scaling_efficiency=0.8 not applied at 2 ranks: no baseline at a smaller world size")
