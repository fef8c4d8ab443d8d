"""The verdict layer returns advice codes, ``reporting`` words them with the options' names.

The pure core (:mod:`pytest_gpuperf.verdict`) does not know the command line: a decision step with
advice for the reader puts an :class:`~pytest_gpuperf.verdict.advice.Advice` code in
``Comparison.advice`` and keeps flag names out of ``Comparison.note``;
:func:`pytest_gpuperf.reporting.messages.comparison_note` words the codes (the text users read
stays as before); the codec round-trips the codes.
"""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest

from pytest_gpuperf.core.options import BenchOptions
from pytest_gpuperf.reporting.messages import (ADVICE_WORDS, advice_text, comparison_message, comparison_note,
                                               pure_note)
from pytest_gpuperf.verdict.advice import Advice, advice_of, merge_advice
from pytest_gpuperf.verdict.compare import Comparison, Verdict, decide, downgrade_throttled

VERDICT = Path(__file__).resolve().parents[2] / "pytest_gpuperf" / "verdict"
THROTTLE = "throttled: HW thermal 34% of samples"


def regressed(**kw) -> Comparison:
    return Comparison(Verdict.REGRESSED, "m.py::t", 1.4, baseline_median_ms=1.0, ratio=1.4, ratio_ci=(1.3, 1.5),
                      floor=0.05, **kw)


# ----------------------------------------------------------------------------- the cases that give each advice


def _too_few() -> Comparison:
    return decide([1.0], [1.0, 1.1])


def _throttled() -> Comparison:
    return downgrade_throttled(regressed(note="confirmed by re-measure"), THROTTLE)


def _machine_differs() -> Comparison:
    from pytest_gpuperf.verdict.gate import machine_rule
    from pytest_gpuperf.verdict.machine import ProbeEvidence

    return machine_rule(regressed(), ProbeEvidence((1.3,), 1.0, "compute"), downgrade=True)


def _replicates_inconclusive() -> Comparison:
    from pytest_gpuperf.storage.baseline import BaselineEntry
    from pytest_gpuperf.verdict.gate import judge_replicates

    base = BaselineEntry.from_samples("m.py::t", [1.0] * 10, run_medians_ms=[1.0, 1.3, 0.8, 1.2])
    groups = [[m * (1 + 0.001 * i) for i in range(20)] for m in (1.1, 0.95, 1.3)]
    return judge_replicates(groups, base, BenchOptions(), benchmark_id="m.py::t")


def _ab_too_few_pairs() -> Comparison:
    from pytest_gpuperf.verdict.paired import PairedRatio, decide_ab

    return decide_ab([PairedRatio(0, 0.1)] * 3, a_median_ms=1.0, b_median_ms=1.1, ref="main (abc1234)")


def _ab_pairs_disagree() -> Comparison:
    from pytest_gpuperf.verdict.paired import PairedRatio, decide_ab

    ratios = [PairedRatio(0, 0.40 + 0.01 * i) for i in range(8)] + [PairedRatio(1, 0.001 * i) for i in range(8)]
    return decide_ab(ratios, a_median_ms=1.0, b_median_ms=1.2, ref="main (abc1234)")


CASES = {  # case -> (how to make it, the advice it carries, what its worded note says)
    "too few samples": (_too_few, (Advice.RUN_MEASURED,), "run with --gpuperf"),
    "throttled": (_throttled, (Advice.STRICT,), "fails with --gpuperf-strict"),
    "machine differs": (_machine_differs, (Advice.STRICT, Advice.UPDATE_OR_AB), "`--gpuperf-update-baselines`"),
    "replicates inconclusive": (_replicates_inconclusive, (Advice.MORE_PROCESSES,),
                                "to decide, measure in more worker processes (--gpuperf-max-processes, now 3)"),
    "A/B, too few pairs": (_ab_too_few_pairs, (Advice.MORE_AB_PROCESSES,), "measure with more --gpuperf-ab-processes"),
    "A/B, pairs disagree": (_ab_pairs_disagree, (Advice.MORE_AB_PROCESSES,),
                            "measure with more --gpuperf-ab-processes"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_verdict_layer_gives_codes_and_its_notes_name_no_flag(case: str) -> None:
    make, advice, worded = CASES[case]
    c = make()
    assert c.advice == advice
    assert c.note and "--" not in c.note and "gpuperf" not in c.note
    note = comparison_note(c)
    assert note.startswith(c.note) and worded in note
    assert worded in comparison_message(c) or c.verdict is Verdict.UNCHANGED and c.ratio_ci is None


def test_every_advice_is_reached_by_a_case() -> None:
    assert {a for _, advice, _ in CASES.values() for a in advice} == set(Advice)


def test_machine_differs_is_the_update_or_ab_advice() -> None:
    c = _machine_differs()
    assert c.verdict is Verdict.INCONCLUSIVE and c.machine_differs
    assert c.note.startswith("machine differs: probe +30% (compute, now/baseline): the regression (x1.40) is not trusted")
    assert not regressed().machine_differs
    assert not dataclasses.replace(c, advice=(Advice.STRICT,)).machine_differs


def test_no_strict_advice_where_the_run_cannot_fail() -> None:
    from pytest_gpuperf.verdict.gate import machine_rule
    from pytest_gpuperf.verdict.machine import ProbeEvidence

    assert downgrade_throttled(regressed(), THROTTLE, strict_hint=False).advice == ()
    c = machine_rule(regressed(), ProbeEvidence((1.3,), 1.0, "compute"), downgrade=True, strict_hint=False)
    assert c.advice == (Advice.UPDATE_OR_AB,) and "--gpuperf-strict" not in comparison_note(c)


def test_a_step_puts_its_advice_before_the_advice_already_there() -> None:
    c = downgrade_throttled(regressed(advice=(Advice.MORE_AB_PROCESSES, Advice.STRICT)), THROTTLE)
    assert c.advice == (Advice.STRICT, Advice.MORE_AB_PROCESSES)
    assert merge_advice((Advice.STRICT,), (Advice.RUN_MEASURED, Advice.STRICT)) == (Advice.STRICT, Advice.RUN_MEASURED)


# ----------------------------------------------------------------------------- reporting words the codes


@pytest.mark.parametrize("advice", list(Advice))
def test_messages_word_each_code_with_its_flag(advice: Advice) -> None:
    flag = {Advice.STRICT: "--gpuperf-strict", Advice.RUN_MEASURED: "--gpuperf",
            Advice.MORE_PROCESSES: "--gpuperf-max-processes", Advice.MORE_AB_PROCESSES: "--gpuperf-ab-processes",
            Advice.UPDATE_OR_AB: "--gpuperf-ab REF"}[advice]
    assert flag in advice_text(advice)
    assert set(ADVICE_WORDS) == set(Advice)


def test_the_words_of_today() -> None:
    c = regressed(processes=3)
    assert advice_text(Advice.STRICT) == "fails with --gpuperf-strict"
    assert advice_text(Advice.MORE_PROCESSES, c) == ("to decide, measure in more worker processes "
                                                     "(--gpuperf-max-processes, now 3)")
    assert advice_text(Advice.MORE_PROCESSES) == "to decide, measure in more worker processes (--gpuperf-max-processes)"
    assert advice_text(Advice.UPDATE_OR_AB) == (
        "for a real verdict record baselines on this machine kind (`--gpuperf-update-baselines`) "
        "or compare on one machine with `--gpuperf-ab REF`")


def test_comparison_note_joins_the_note_and_the_worded_advice() -> None:
    assert comparison_note(regressed()) == ""
    assert comparison_note(regressed(note="a")) == "a"
    assert comparison_note(regressed(advice=(Advice.STRICT,))) == "fails with --gpuperf-strict"
    c = regressed(note="a; b", advice=(Advice.STRICT, Advice.UPDATE_OR_AB))
    worded = comparison_note(c)
    assert worded == f"a; b; fails with --gpuperf-strict; {advice_text(Advice.UPDATE_OR_AB)}"
    # a note that already holds the words (read back from a JSON report) is not worded twice ...
    assert comparison_note(dataclasses.replace(c, note=worded)) == worded
    # ... and pure_note takes them off again
    assert pure_note(dataclasses.replace(c, note=worded)) == "a; b"
    assert pure_note(dataclasses.replace(c, note="fails with --gpuperf-strict", advice=(Advice.STRICT,))) is None
    assert pure_note(c) == "a; b"


def test_the_terminal_notes_show_the_worded_note() -> None:
    from pytest_gpuperf.reporting.terminal import _notes

    row = type("Row", (), {"name": "m.py::t", "result": type("R", (), {"comparison": _throttled()})()})()
    summary = type("S", (), {"rows": [row]})()
    (head, line) = [text for _, text, _ in _notes(summary)]
    assert "fails with --gpuperf-strict" in line and THROTTLE in line


# ----------------------------------------------------------------------------- the codec and the report


def test_the_codec_round_trips_the_advice() -> None:
    from pytest_gpuperf.storage.codec import _comparison_from, comparison_to_dict

    for make, _, _ in CASES.values():
        c = make()
        d = json.loads(json.dumps(comparison_to_dict(c)))
        assert d["advice"] == [a.value for a in c.advice] and d["note"] == c.note
        assert d["machine_differs"] is c.machine_differs
        assert _comparison_from(d) == c


def test_the_codec_ignores_unknown_codes_and_reads_old_entries() -> None:
    from pytest_gpuperf.storage.codec import _comparison_from, comparison_to_dict

    d = comparison_to_dict(regressed(advice=(Advice.STRICT,)))
    assert _comparison_from(dict(d, advice=["strict", "some-future-advice", 3, "strict"])).advice == (Advice.STRICT,)
    assert _comparison_from(dict(d, advice=None)).advice == ()
    old = {k: v for k, v in d.items() if k != "advice"}
    assert _comparison_from(old).advice == ()
    # written before the codes: machine_differs was a field of its own
    back = _comparison_from(dict(old, machine_differs=True))
    assert back.machine_differs and back.advice == (Advice.UPDATE_OR_AB,)
    assert advice_of("strict") == () and advice_of(["more-processes"]) == (Advice.MORE_PROCESSES,)


def test_a_report_carries_the_worded_note_and_reads_back_the_comparison() -> None:
    from pytest_gpuperf.reporting import report
    from pytest_gpuperf.storage.schema import validate
    from pytest_gpuperf.verdict.result import BenchResult

    c = _machine_differs()
    r = BenchResult.from_samples((1.4,) * 10, name="t", device="cpu", rounds=10, calls_per_round=1, warmup_calls=0,
                                 comparison=c, benchmark_id="m.py::t")
    entry = json.loads(json.dumps(report.result_entry(r, environment={}, git_commit=None, timestamp_utc="x",
                                                      with_comparison=True)))
    assert entry["comparison"]["note"] == comparison_note(c)  # what people read, as before the codes
    assert "(`--gpuperf-update-baselines`)" in entry["comparison"]["note"]
    assert entry["comparison"]["advice"] == ["strict", "update-or-ab"] and entry["comparison"]["machine_differs"]
    assert report.result_from_entry(entry).comparison == c
    assert report.comparison_dict(c)["note"] == comparison_note(c)
    validate({"schema_version": entry["schema_version"], "kind": "report", "created_utc": "x", "git_commit": None,
              "environments": {}, "benchmarks": {"m.py::t": dict(entry, module="m.py", baseline_file=None,
                                                                 smoke=False)}, "warnings": []})


# ----------------------------------------------------------------------------- the contract


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def test_the_verdict_layer_names_no_command_line_flag() -> None:
    """No string of ``pytest_gpuperf/verdict/`` but a docstring names a ``--gpuperf`` option: advice
    is an :class:`Advice` code, worded in ``reporting``."""
    found = []
    for path in sorted(VERDICT.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        found += [f"{path.name}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                  and "--gpuperf" in node.value]
    assert not found, "flag names in the verdict layer (give an Advice code instead):\n" + "\n".join(found)
