"""Issue 48: ``--gpuperf-instructions`` in the session, on scripted counts and synthetic callgrind dumps
(no valgrind): the gate's verdicts on a result, the why from the kept dump, another build not
compared, a count that failed, the update keeping the baseline's dump, valgrind missing said once,
the worker's role, and the JSON entry (codec and schema)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_gpuperf.core.containment import INSTRUCTIONS
from pytest_gpuperf.plugin.instructions import KEPT, InstructionMode, safe_name
from pytest_gpuperf.verdict.compare import Verdict
from pytest_gpuperf.verdict.instructions import Instructions
from pytest_gpuperf.verdict.result import BenchResult

KEY = "test_m.py::test_chain"
TOOL = "valgrind-3.19.0 callgrind, CPython 3.11.7, torch 2.13.0+cpu"
LOOP = 1_000  # the empty loop's instructions per call in every dump below

DUMP = """# callgrind format
version: 1
creator: callgrind-3.19.0
desc: Trigger: Client Request: {key}
events: Ir
summary: {total}

fn=(1) bench
0 {loop}
cfn=(2) work
calls={calls} 0
0 {work}

fn=(2)
0 {work}
cfn=(3) at::_ops::add_Tensor::call
calls={adds} 0
0 {add}

fn=(3)
0 {add}

totals: {total}
"""


def dump(path: Path, adds: int, calls: int = 20) -> Path:
    """A dump of ``calls`` calls of a chain of ``adds`` adds (500 Ir each) in a 4,000 Ir frame."""
    add, work = 500 * adds * calls, 4_000 * calls + 500 * adds * calls
    path.write_text(DUMP.format(key=KEY, loop=LOOP * calls, calls=calls, work=work, adds=adds * calls, add=add,
                                total=LOOP * calls + work), encoding="utf-8")
    return path


def counted(path: Path, adds: int, tool: str = TOOL) -> Instructions:
    return Instructions(4_000 + 500 * adds, 20, 5, tool, str(dump(path, adds)))


def mode(tmp_path: Path, updating: bool = False) -> tuple[InstructionMode, list[str]]:
    warned: list[str] = []
    settings = SimpleNamespace(rootpath=tmp_path, updating=updating, artifacts_dir=tmp_path / "artifacts",
                               nproc=None, processes=3)
    return InstructionMode(settings, lambda line: None, warned.append), warned


def result() -> BenchResult:
    return BenchResult.from_samples((1.0, 1.1, 0.9), name="test_chain", device="cpu", rounds=3, calls_per_round=1,
                                    warmup_calls=0, benchmark_id=KEY)


def baseline(per_call: float, tool: str = TOOL) -> SimpleNamespace:
    return SimpleNamespace(data={"instructions": {"per_call": per_call, "calls": 20, "warmup": 5, "tool": tool}})


def test_an_unchanged_count_passes_and_is_carried(tmp_path: Path) -> None:
    m, _ = mode(tmp_path)
    m.counted[KEY] = counted(tmp_path / "run", 20)
    r = m.judge(KEY, result(), baseline(14_000 * 1.01))  # 1% fewer than stored: within the 3% tolerance
    assert r.instructions.per_call == 14_000 and r.instruction_comparison.verdict is Verdict.UNCHANGED
    assert "instructions" not in r.failing()


def test_a_timing_verdict_the_count_does_not_explain_says_the_host_work_is_the_same(tmp_path: Path) -> None:
    from pytest_gpuperf.verdict.compare import decide

    m, _ = mode(tmp_path)
    m.counted[KEY] = counted(tmp_path / "run", 20)
    slower = decide([1.3 + i * 1e-3 for i in range(40)], [1.0 + i * 1e-3 for i in range(40)], benchmark_id=KEY)
    r = m.judge(KEY, result().replace(comparison=slower), baseline(14_000 * 1.001))
    assert r.comparison.verdict is Verdict.REGRESSED  # never changed: a slowdown with the same host work
    assert r.comparison.note.startswith("host instructions per call unchanged (x0.9990, callgrind): the same host work")
    same = decide([1.0 + i * 1e-3 for i in range(40)], [1.0 + i * 1e-3 for i in range(40)], benchmark_id=KEY)
    assert m.judge(KEY, result().replace(comparison=same), baseline(14_000)).comparison.note == same.note


def test_a_regression_fails_and_its_why_names_the_function_that_grew(tmp_path: Path) -> None:
    from pytest_gpuperf.reporting.messages import failure_messages

    m, _ = mode(tmp_path)
    kept = tmp_path / KEPT / safe_name(KEY)
    kept.parent.mkdir(parents=True)
    dump(kept, 20)  # the baseline's run: 20 adds, 14,000 Ir per call
    m.counted[KEY] = counted(tmp_path / "run", 22)  # two more adds: 15,000 Ir per call, +7.1%
    r = m.judge(KEY, result(), baseline(14_000))
    v = r.instruction_comparison
    assert v.verdict is Verdict.REGRESSED and r.failing() == ("instructions",)
    assert "the function that grew: at::_ops::add_Tensor::call" in v.why
    assert [Path(p).parent for p in v.dumps] == [tmp_path / "artifacts" / "instructions"] * 2
    assert all(Path(p).is_file() for p in v.dumps)
    (text,) = failure_messages(r)
    assert text.startswith("host instructions per call regressed: 14,000 -> 15,000 (x1.0714)\n"
                           f"  {KEY} (callgrind; tolerance 3.0%)")
    assert KEY in text and "why: the function that grew" in text
    assert r.failing(updating=True) == ()  # an update never fails on a regression


def test_without_the_baselines_dump_or_with_another_runs_the_regression_still_fails(tmp_path: Path) -> None:
    m, _ = mode(tmp_path)
    m.counted[KEY] = counted(tmp_path / "run", 22)
    r = m.judge(KEY, result(), baseline(14_000))
    assert r.failing() == ("instructions",) and "no dump of the baseline's run kept here" in r.instruction_comparison.why
    kept = tmp_path / KEPT / safe_name(KEY)
    kept.parent.mkdir(parents=True)
    dump(kept, 10)  # a dump of some other run: its count is not the stored one
    r = m.judge(KEY, result(), baseline(14_000))
    assert "is not the baseline's run" in r.instruction_comparison.why and not r.instruction_comparison.dumps


def test_counts_of_another_build_are_not_compared(tmp_path: Path) -> None:
    m, _ = mode(tmp_path)
    m.counted[KEY] = counted(tmp_path / "run", 40)  # +71%, but counted by another torch
    r = m.judge(KEY, result(), baseline(14_000, tool=TOOL.replace("2.13.0", "2.12.0")))
    v = r.instruction_comparison
    assert v.verdict is Verdict.INCONCLUSIVE and "not compared" in v.message and "torch 2.12.0" in v.message
    assert r.failing() == ()


def test_no_baseline_and_a_count_that_failed(tmp_path: Path) -> None:
    m, _ = mode(tmp_path)
    m.counted[KEY] = counted(tmp_path / "run", 20)
    assert m.judge(KEY, result(), None).instruction_comparison.verdict is Verdict.NO_BASELINE
    m.counted[KEY] = "its test raised RuntimeError: boom in the instruction worker"
    r = m.judge(KEY, result(), baseline(14_000))
    assert r.instructions is None and r.unavailable[INSTRUCTIONS].error.startswith("its test raised RuntimeError")
    assert r.failing() == ()  # the timing and the other checks stand
    assert m.judge("other.py::test_x", result(), None) == result()  # nothing counted: unchanged


def test_an_update_keeps_the_baselines_dump_and_decides_nothing(tmp_path: Path) -> None:
    m, _ = mode(tmp_path, updating=True)
    m.counted[KEY] = counted(tmp_path / "run", 20)
    r = m.judge(KEY, result(), baseline(9_000))
    assert r.instructions.per_call == 14_000 and r.instruction_comparison is None
    assert (tmp_path / KEPT / safe_name(KEY)).read_text() == (tmp_path / "run").read_text()


def test_valgrind_missing_is_said_once_and_the_session_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_gpuperf.measure import instructions as measure

    monkeypatch.setattr(measure.shutil, "which", lambda name: None)
    m, warned = mode(tmp_path)
    runs = [SimpleNamespace(entries={KEY: {"nodeid": "test_m.py::test_chain", "options": {"instructions": True}},
                                     "b.py::t": {"nodeid": "b.py::t", "options": {}}})]
    assert InstructionMode.wanted(runs) == {KEY: "test_m.py::test_chain"}
    assert m.run([], tmp_path, tmp_path / "logs", runs) is None
    assert warned == ["--gpuperf-instructions: instruction counts need valgrind, which is not on PATH (e.g. apt-get "
                      "install valgrind); the session goes on without instruction counts"]
    assert m.counted == {} and m.judge(KEY, result(), None) == result()
    assert m.run([], tmp_path, tmp_path / "logs", [SimpleNamespace(entries={})]) is None and len(warned) == 1


def test_the_instruction_workers_role_on_its_command_line() -> None:
    from pytest_gpuperf.plugin.replicates import INSTRUCTION_WORKER as SLOT, WorkerRole, worker_role

    role = WorkerRole((SLOT, 3), "/l/instructions.jsonl", "/l/callgrind")
    assert '"replicate": "i/3"' in role.argument() and '"dumps": "/l/callgrind"' in role.argument()
    assert worker_role(role.argument().partition("=")[2]) == role
    assert worker_role('{"replicate": "0/3", "out": null}').dumps is None


def test_the_json_entry_carries_the_count_and_the_verdict(tmp_path: Path) -> None:
    pytest.importorskip("jsonschema")
    from pytest_gpuperf.storage.codec import decode_result, encode_result
    from pytest_gpuperf.storage.schema import validate

    m, _ = mode(tmp_path)
    m.counted[KEY] = counted(tmp_path / "run", 22)
    r = m.judge(KEY, result(), baseline(14_000))
    entry = encode_result(r, environment={}, git_commit=None, timestamp_utc="", with_comparison=True)
    assert entry["instructions"]["per_call"] == 15_000 and entry["instruction_comparison"]["verdict"] == "regressed"
    back = decode_result(entry)
    assert back.instructions == r.instructions and back.instruction_comparison.ratio == r.instruction_comparison.ratio
    assert back.failing() == ("instructions",)
    import json

    from pytest_gpuperf.reporting import report

    entry = json.loads(json.dumps(report.result_entry(r, environment={}, git_commit=None, timestamp_utc="x",
                                                      with_comparison=True)))
    validate({"schema_version": entry["schema_version"], "kind": "report", "created_utc": "x", "git_commit": None,
              "environments": {}, "benchmarks": {KEY: dict(entry, module="test_m.py", baseline_file=None,
                                                          smoke=False)}, "warnings": []})
