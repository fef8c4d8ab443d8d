"""What a failing benchmark says: the messages of timing, memory, count and bottleneck verdicts
(pure: no torch, no pytest).

The verdict layer decides (:mod:`pytest_gpuperf.verdict`: a
:class:`~pytest_gpuperf.verdict.compare.Comparison`, a
:class:`~pytest_gpuperf.verdict.compare.MemoryComparison`, a
:class:`~pytest_gpuperf.verdict.counts.CountComparison`, and which of them fail a test:
:meth:`~pytest_gpuperf.verdict.result.BenchResult.failing`); this module words them for the
reader: the plugin's test failures, the reports and ``gpuperf compare``.

* :func:`comparison_message`: one paragraph on a timing comparison;
* :func:`gate_messages`: the failure messages of a memory or a count comparison;
* :func:`bottleneck_message`: a misclassified bottleneck;
* :func:`failure_messages`: why a result fails its test, one message per failing check;
* :func:`ab_summary`: the one-line A/B estimate;
* :func:`comparison_note`: a comparison's note with its advice worded (:func:`advice_text`), the one
  form in which a note is shown to people.
"""

from __future__ import annotations

from typing import Any

from pytest_gpuperf.core.units import format_bytes, format_ms, format_pct, format_ratio, size_unit
from pytest_gpuperf.verdict.advice import Advice
from pytest_gpuperf.verdict.compare import (MEMORY_SLACK_BYTES, Comparison, MemoryComparison, Verdict,
                                            processes_decided_on)

#: The end of every regression message (timing and memory): what to do when the change is wanted.
INTENDED_HINT = "if the change is intended, re-record with `pytest --gpuperf-update-baselines`"
#: What to do for a real verdict when the machine differs (:attr:`Advice.UPDATE_OR_AB`; also the end
#: of the summary's "machine differs" line).
MACHINE_DIFFERS_HINT = ("for a real verdict record baselines on this machine kind (`--gpuperf-update-baselines`) "
                        "or compare on one machine with `--gpuperf-ab REF`")
#: Each advice code worded with the option that carries it out (``{now}``: the advice's number, see
#: :func:`advice_text`).
ADVICE_WORDS = {
    Advice.STRICT: "fails with --gpuperf-strict",
    Advice.RUN_MEASURED: "run with --gpuperf",
    Advice.MORE_PROCESSES: "to decide, measure in more worker processes (--gpuperf-max-processes{now})",
    Advice.MORE_AB_PROCESSES: "measure with more --gpuperf-ab-processes",
    Advice.UPDATE_OR_AB: MACHINE_DIFFERS_HINT,
}

#: The longest first line of a failure message (issue 47): pytest's short summary and an 80-column
#: terminal show it whole; what does not fit follows on the evidence lines.
FIRST_LINE_WIDTH = 80

#: The first word of a timing message: the verdict.
_HEADS = {
    Verdict.REGRESSED: "regressed",
    Verdict.IMPROVED: "improved",
    Verdict.UNCHANGED: "unchanged",
    Verdict.INCONCLUSIVE: "inconclusive",
}


def _fmt_p(p: float | None) -> str:
    return "-" if p is None else f"{p:.2g}"


def ab_summary(c: Comparison) -> str | None:
    """``"A/B vs origin/main (3f2a1c9): 1.12x [1.08x, 1.16x]"`` for an A/B comparison, else None."""
    if c.ab is None or c.ratio is None:
        return None
    return f"A/B vs {c.ab.ref}: {ratio_with_ci(c.ratio, c.ratio_ci)}"


def advice_text(a: Advice, c: Comparison | None = None) -> str:
    """What advice ``a`` tells the reader, naming its option (``"to decide, measure in more worker
    processes (--gpuperf-max-processes, now 3)"``); the number comes from the comparison ``c``
    (:attr:`Advice.MORE_PROCESSES`: ``c.processes``) and is left out without one."""
    now = f", now {c.processes}" if a is Advice.MORE_PROCESSES and c is not None and c.processes else ""
    return ADVICE_WORDS[a].format(now=now)


def comparison_note(c: Comparison) -> str:
    """The note of ``c`` as people read it: the verdict layer's note, then each advice worded
    (:func:`advice_text`), joined by ``"; "`` (``""`` when there is neither). The verdict layer
    keeps the command line out of its notes; every place that shows a note shows this. An advice
    whose words the note already holds (a comparison read back from a JSON report, whose ``note``
    is this text) is not worded twice."""
    note = c.note or ""
    words = [w for w in (advice_text(a, c) for a in c.advice if isinstance(a, Advice)) if w not in note]
    return "; ".join(p for p in (note, *words) if p)


def pure_note(c: Comparison) -> str | None:
    """The verdict layer's own note of ``c`` when ``c.note`` is a :func:`comparison_note` (a
    comparison read back from a JSON report): the worded advice taken off its end. The inverse of
    :func:`comparison_note` for the notes the verdict layer writes (they never name an option)."""
    note = c.note or ""
    for w in reversed([advice_text(a, c) for a in c.advice if isinstance(a, Advice)]):
        if note == w:
            note = ""
        elif note.endswith(f"; {w}"):
            note = note[:-len(w) - 2]
    return note or None


def ratio_with_ci(ratio: float | None, ci: tuple[float, float] | None) -> str:
    """``"1.46x [1.39x, 1.52x]"`` (no brackets without a CI; ``-`` without a ratio)."""
    text = format_ratio(ratio)
    return text + (f" [{format_ratio(ci[0])}, {format_ratio(ci[1])}]" if ci else "")


def comparison_message(c: Comparison) -> str:
    """What a timing comparison says, reason first (issue 24): the first line is the verdict, the
    ratio with its 99% CI and the medians (``"regressed 1.46x [1.39x, 1.52x]: median 461.7 µs ->
    693.6 µs (A/B vs main (3f2a9c1))"``), so pytest's short summary shows it at any width; the
    evidence follows on an indented line naming the benchmark: the stored baseline's test
    (Hodges–Lehmann ratio, Mann–Whitney U p, the gate), the worker processes' (Student t over
    process medians) or the A/B one (Wilcoxon signed-rank over paired blocks), then the
    confirmation, the baseline file, the note and what to do when the change is intended."""
    if c.verdict is Verdict.NO_BASELINE:
        where = f" in {c.baseline_file}" if c.baseline_file else ""
        return f"no baseline{where}; record one with `pytest --gpuperf-update-baselines`\n  {c.benchmark_id}"
    assert c.ratio is not None and c.baseline_median_ms is not None
    p = c.p_slower if c.ratio >= 1 else c.p_faster
    head = _HEADS[c.verdict]
    if c.ab is not None:
        return _ab_message(c, head, p)
    if c.processes is not None and c.baseline_processes is not None and c.resolution is not None:
        return _replicates_message(c, head, p)
    median_ratio = c.shown_ratio
    floor = c.floor if c.floor is not None else c.threshold
    gate = f"threshold +{c.threshold * 100:g}%"
    if floor > c.threshold + 1e-12:
        gate = (f"effect floor +{floor * 100:.1f}% (exp(3 x run-to-run SD {c.run_sd * 100:.1f}%) - 1 > threshold "
                f"+{c.threshold * 100:g}%)")
    first = (f"{head} {ratio_with_ci(median_ratio, c.ratio_ci)}: {_median_word(c)} {format_ms(c.baseline_median_ms)} -> "
             f"{format_ms(c.current_median_ms)}")
    ci = f", 99% CI {format_ratio(c.ratio_ci[0])}-{format_ratio(c.ratio_ci[1])}" if c.ratio_ci else ""
    text = (f"{c.benchmark_id}: median {format_ms(c.baseline_median_ms)} -> {format_ms(c.current_median_ms)}, "
            f"median ratio {format_ratio(median_ratio)}{ci}; Hodges-Lehmann ratio {format_ratio(c.ratio)} "
            f"({format_pct(c.ratio - 1)}), Mann-Whitney U p={_fmt_p(p)} (alpha {c.alpha:g}), {gate}; baseline "
            f"history: {c.runs} run(s)")
    if c.prediction_limit is not None:
        text += f", 99% prediction limit {format_ratio(c.prediction_limit)}"
    if c.normalization is not None:
        text += (f"; normalized by machine-speed drift ({c.normalization.by}), raw ratio "
                 f"{format_ratio(c.normalization.raw_ratio)}")
    return f"{first}\n  {text}{_tail(c, INTENDED_HINT)}"


def _replicates_message(c: Comparison, head: str, p: float | None) -> str:
    assert c.ratio is not None and c.baseline_median_ms is not None and c.ratio_ci is not None
    used, base_used = processes_decided_on(c)  # a process set aside is left out (its note says which)
    cur = f"{used} of {c.processes}" if used != c.processes else f"{c.processes}"
    first = _with_aside(f"{head} {ratio_with_ci(c.ratio, c.ratio_ci)}: {_median_word(c)} "
                        f"{format_ms(c.baseline_median_ms)} -> {format_ms(c.current_median_ms)}", f"{cur} processes",
                        f"{cur} proc.")
    base = f"{base_used} of {c.baseline_processes}" if base_used != c.baseline_processes else f"{c.baseline_processes}"
    text = (f"{c.benchmark_id}: {ratio_with_ci(c.ratio, c.ratio_ci)} ({format_pct(c.ratio - 1)}, 99% CI): geometric "
            f"mean of {cur} process medians {format_ms(c.current_median_ms)} vs "
            f"{format_ms(c.baseline_median_ms)} of the baseline's {base}; Student t over process "
            f"medians p={_fmt_p(p)} (alpha {c.alpha:g}), between-process SD {(c.run_sd or 0) * 100:.1f}%, threshold "
            f"+{c.threshold * 100:g}%; baseline history: {c.runs} run(s)")
    return f"{first}\n  {text}{_tail(c, INTENDED_HINT)}"


def _ab_message(c: Comparison, head: str, p: float | None) -> str:
    assert c.ab is not None
    per = ", ".join(format_ratio(v) for v in (c.ab.process_ratios or ()))
    first = _with_aside(f"{head} {ratio_with_ci(c.ratio, c.ratio_ci)}: {_median_word(c)} "
                        f"{format_ms(c.baseline_median_ms)} -> {format_ms(c.current_median_ms)}", f"A/B vs {c.ab.ref}",
                        "A/B")
    text = (f"{c.benchmark_id}: {ab_summary(c)} (Hodges-Lehmann B/A, 99% CI of the median ratio); median A "
            f"{format_ms(c.baseline_median_ms)} -> B {format_ms(c.current_median_ms)}; Wilcoxon signed-rank "
            f"p={_fmt_p(p)} (alpha {c.alpha:g}) over {c.ab.pairs} paired blocks from {c.runs} pair(s) of worker "
            f"processes (per pair {per}), threshold +{c.threshold * 100:g}%")
    if c.ab_confirmation:  # an A/B confirmation of a stored-baseline comparison: REF is the baseline's commit
        return f"{first}\n  {text}{_tail(c, INTENDED_HINT)}"
    return f"{first}\n  {text}{_tail(c, 'if the change is intended, this A/B comparison passes once REF includes it')}"


def _with_aside(first: str, *asides: str) -> str:
    """A message's first line with `` (aside)`` at its end, the first of ``asides`` (longest first)
    with which the line stays within :data:`FIRST_LINE_WIDTH` (issue 47; the evidence line under
    it says the same), else without."""
    for aside in asides:
        if len(longer := f"{first} ({aside})") <= FIRST_LINE_WIDTH:
            return longer
    return first


def fit_first_line(message: str, width: int = FIRST_LINE_WIDTH) -> str:
    """``message`` with its first line within ``width`` characters (issue 47): a longer one is cut
    at its last ``"; "`` outside parentheses within the width, else its last ``", "``, ``" ("``,
    ``": "`` or space (:data:`_CUTS`), and the rest becomes the first evidence line (indented two
    spaces); a first line with no such place stays whole."""
    first, sep, rest = message.partition("\n")
    if len(first) <= width:
        return message
    at = _cut_at(first, width)
    if at is None:
        return message
    tail = first[at:].lstrip(";,: ") if first[at] != " " else first[at + 1:]
    head = first[:at] + (":" if first[at] == ":" else "")
    return f"{head}\n  {tail}" + (f"\n{rest}" if sep else "")


#: Where :func:`fit_first_line` cuts, best first, each with the shortest head it leaves there.
_CUTS = (("; ", 1), (", ", 20), (" (", 20), (": ", 40), (" ", 40), (": ", 20))


def _cut_at(first: str, width: int) -> int | None:
    """Where a first line longer than ``width`` is cut (:data:`_CUTS`): the last place of the best
    kind, outside parentheses, that leaves a head within ``width`` and not too short; None: nowhere."""
    for mark, shortest in _CUTS:
        cuts = [i for i in _find_all(first, mark) if shortest <= i <= width]
        if cuts:
            return max(cuts)
    return None


def labelled(label: str, reason: str) -> str:
    """A failure message whose ``reason`` does not name its benchmark: the reason first, its first
    line within :data:`FIRST_LINE_WIDTH` (:func:`fit_first_line`), then ``label`` on the indented
    line under it, then the rest of the reason (issue 47: the label no longer takes the first line)."""
    head, sep, rest = fit_first_line(reason).partition("\n")
    return f"{head}\n  {label}" + (f"\n{rest}" if sep else "")


def _find_all(text: str, mark: str) -> list[int]:
    """Every index at which ``mark`` starts in ``text`` outside parentheses and brackets (a cut
    there leaves each aside whole)."""
    depth, out = 0, []
    for i, ch in enumerate(text):
        if text.startswith(mark, i) and depth == 0:
            out.append(i)
        depth += (ch in "([") - (ch in ")]")
    return out


def _median_word(c: Comparison) -> str:
    """What the first line calls the medians: ``"CPU time median"`` for a verdict decided on CPU time
    (:mod:`pytest_gpuperf.verdict.cputime`), ``"speed-normalized median"`` on the reference clock
    (:mod:`pytest_gpuperf.verdict.refclock`: an A/B's or the stored stage's), else ``"median"`` (the wall clock,
    or CUDA events)."""
    return {"cpu": "CPU time median", "ref": "speed-normalized median"}.get(c.clock or "", "median")


def _tail(c: Comparison, intended_hint: str) -> str:
    """The end of a timing message: the clock it was decided on (where CPU time was read beside the
    wall clock), confirmation, the baseline file (none in A/B mode), the note with its advice
    (:func:`comparison_note`), and for a regression what to do when the change is intended."""
    # "ref" (the reference clock, A/B or stored stage): its note says so, with the wall clock's reading
    text = {"wall": "; decided on the wall clock", "cpu": "; decided on CPU time (the calling thread's)"}.get(
        c.clock or "", "")
    text += {True: "; confirmed on re-measure", False: "; not confirmed on re-measure (noise)"}.get(c.confirmed, "")
    if c.ab_confirmation:
        text += f"; {c.ab_confirmation}"
    if c.cannot_fail:
        floor = c.resolution if c.resolution is not None else c.floor
        text += (f"; cannot fail: only a slowdown above +{(floor or 0) * 100:.0f}% could (the baseline's spread "
                 f"is that wide; fails with --gpuperf-strict; re-record on a quiet machine)")
    if c.baseline_file:
        text += f"; baseline: {c.baseline_file}"
    note = comparison_note(c)
    if note:
        text += f"; {note}"
    if c.verdict is Verdict.REGRESSED:
        text += f"; {intended_hint}"
    return text


def gate_messages(comparison: Any, *, include_regression: bool = True) -> list[str]:
    """The failure messages of a :class:`~pytest_gpuperf.verdict.compare.MemoryComparison` or a
    :class:`~pytest_gpuperf.verdict.counts.CountComparison` (empty when it passes).

    ``include_regression=False`` reports the hard budgets only (``max_memory``, ``max_syncs``...:
    what still fails while baselines are being updated). Raises ``TypeError`` for another object.
    """
    from pytest_gpuperf.verdict.counts import CountComparison

    if isinstance(comparison, MemoryComparison):
        return _memory_messages(comparison, include_regression)
    if isinstance(comparison, CountComparison):
        return _count_messages(comparison, include_regression)
    raise TypeError(f"gate_messages: expected a MemoryComparison or a CountComparison, got {type(comparison).__name__}")


def _memory_messages(m: MemoryComparison, include_regression: bool) -> list[str]:
    out = []
    if m.verdict is Verdict.REGRESSED and include_regression:
        assert m.baseline_bytes is not None
        change = format_pct(m.change) if m.change is not None else "(the baseline allocated nothing)"
        out.append(
            f"memory regressed {change}: {format_bytes(m.baseline_bytes)} -> {format_bytes(m.current_bytes)}, "
            f"allowed +{m.threshold * 100:g}% + {format_bytes(MEMORY_SLACK_BYTES)}"
            + (f" + 2 x {format_bytes(m.spread_bytes)} (the peak varies between calls)" if m.spread_bytes else "")
            + f"\n  {m.benchmark_id}"
            + (f"; baseline: {m.baseline_file}" if m.baseline_file else "")
            + f"; {INTENDED_HINT}"
        )
    if m.over_budget:
        assert m.max_memory_bytes is not None
        unit = size_unit(m.max_memory_text)  # the budget's own unit: "peak 123 kB > max_memory 100 kB"
        out.append(
            f"memory budget exceeded: peak {format_bytes(m.current_bytes, unit)} > "
            f"max_memory {format_bytes(m.max_memory_bytes, unit)} on {m.device}\n  {m.benchmark_id}"
        )
    if out and m.snapshot:
        out.append(m.snapshot)
    return out


def _count_messages(cc: Any, include_regression: bool) -> list[str]:
    from pytest_gpuperf.verdict.counts import FAMILY

    out = []
    regressed = cc.regressions()
    if regressed and include_regression:
        families = "/".join(dict.fromkeys(FAMILY[c.name] for c in regressed))
        where = f"; baseline: {cc.baseline_file}" if cc.baseline_file else ""
        out.append(f"{families} counts regressed: " + "; ".join(c.text() for c in regressed)
                   + f"\n  {cc.benchmark_id}{where}")
    prefix = f"{cc.benchmark_id}: "  # the reason first, the benchmark under it (issue 47)
    out.extend(labelled(cc.benchmark_id, m[len(prefix):]) if m.startswith(prefix) else m for m in cc.over_budget)
    return out


def bottleneck_message(r: Any) -> str | None:
    """The misclassification message of a :class:`~pytest_gpuperf.verdict.result.BenchResult`
    (``expect_bottleneck`` given and the measured class not among them), or None."""
    if not r.misclassified:
        return None
    from pytest_gpuperf.verdict.bottleneck import mismatch_message

    text = mismatch_message(r.options.expect_bottleneck or (), r.bottleneck)
    if r.host_busy:
        text += f"; measured while {r.host_busy}"
    if r.trace_path:
        text += f"; trace: {r.trace_path}"
    return text


def failure_messages(r: Any, *, strict: bool = False, updating: bool = False, label: str | None = None) -> list[str]:
    """Why a :class:`~pytest_gpuperf.verdict.result.BenchResult` fails its test, one message per
    failing check (empty: it passes); which checks fail is decided by
    :meth:`~pytest_gpuperf.verdict.result.BenchResult.failing` (``strict``, ``updating``).
    ``label`` names the benchmark in messages that do not carry its full id (default
    ``benchmark_id``)."""
    label = label or r.benchmark_id
    out: list[str] = []
    missing = r.missing_requested()
    for check in r.failing(strict=strict, updating=updating):
        part = {"memory": "peak memory"}.get(check, check)
        if part in missing:  # asked for by an option, and could not be measured
            out.append(unavailable_message(part, r.unavailable[part], label, asked_by=missing[part]))
            if not _also_failing(r, check, strict, updating):
                continue
        if check == "timing":
            out.append(with_communication(with_why(with_straggler(comparison_message(r.comparison), r), r), r))
            if r.trace_path and not r.misclassified:
                out.append(f"trace of the profiled calls: {r.trace_path}\n  {label}")  # the reason first
        elif check == "memory":
            out.extend(gate_messages(r.memory_comparison, include_regression=not updating))
        elif check == "counts":
            out.extend(gate_messages(r.count_comparison, include_regression=not updating))
        elif check == "bottleneck":
            out.append(labelled(label, bottleneck_message(r)))
        elif check == "scaling":
            out.append(labelled(label, r.scaling.message()))
        elif check == "instructions":
            out.append(instruction_message(r.instruction_comparison, label))
    return [fit_first_line(m) for m in out]


def instruction_message(v: Any, label: str) -> str:
    """The instruction gate's failure (:class:`~pytest_gpuperf.verdict.instructions.InstructionVerdict`):
    its verdict line, the per-function diff (``why: the function that grew: ...``) when both dumps
    were kept, and where they are."""
    ratio = f" (x{v.ratio:.4f})" if v.ratio is not None else ""
    text = (f"host instructions per call {v.verdict.value}: {v.stored or 0:,.0f} -> {v.current:,.0f}{ratio}"
            f"\n  {label} (callgrind; tolerance {v.tolerance:.1%})")
    if v.why:
        text += f"\n  why: {v.why}"
    if v.dumps:
        text += "\n  callgrind dumps (baseline, this run): " + ", ".join(v.dumps)
    return text


def straggler_text(ranks: Any) -> str | None:
    """``"rank 1 is the straggler (median 3.1 ms vs 2.2 ms on the others)"`` when one rank of a
    distributed benchmark (:class:`~pytest_gpuperf.verdict.distributed.RankTiming`) is well slower
    than the others (:meth:`~pytest_gpuperf.verdict.distributed.RankTiming.straggler`), else None."""
    s = ranks.straggler() if ranks is not None else None
    if s is None:
        return None
    return f"rank {s.rank} is the straggler (median {format_ms(s.median_ms)} vs {format_ms(s.others_ms)} on the others)"


def with_straggler(message: str, r: Any) -> str:
    """A timing message whose first line ends with the straggler rank, when one rank carries it (issue 35)."""
    text = straggler_text(getattr(r, "ranks", None))
    if text is None:
        return message
    head, sep, rest = message.partition("\n")
    if len(f"{head}: {text}") > FIRST_LINE_WIDTH:  # issue 47: the first line within 80 columns
        return f"{head}\n  {text}" + (f"\n{rest}" if sep else "")
    return f"{head}: {text}{sep}{rest}"


def with_communication(message: str, r: Any) -> str:
    """A timing message with ``communication share 12% -> 41% of the step (gloo all_reduce)`` as
    an evidence line after the verdict line, when the share of communication or its overlap with
    computation moved against the baseline's (:func:`pytest_gpuperf.verdict.communication.change_text`,
    set while measuring under torchrun; issue 35)."""
    text = getattr(getattr(r, "communication", None), "change", None)
    if not text:
        return message
    head, sep, rest = message.partition("\n")
    return f"{head}\n  {text}" + (f"\n{rest}" if sep else "")


def with_why(message: str, r: Any) -> str:
    """A timing message with the per-op diagnosis (``why: …``, issue 32) as its first evidence line,
    after the verdict line, then where A's and B's chrome traces were saved; when the profiles could
    not be taken, why the diagnosis is missing."""
    from pytest_gpuperf.core.containment import OP_DIFF
    from pytest_gpuperf.verdict.opdiff import why_lines

    missing = (r.unavailable or {}).get(OP_DIFF)
    lines = why_lines(r.op_diff, missing.text() if missing is not None else "")
    if not lines:
        return message
    line = "\n  ".join(lines)
    head, sep, rest = message.partition("\n")
    return f"{head}\n  {line}" + (f"\n{rest}" if sep else "")


def _also_failing(r: Any, check: str, strict: bool, updating: bool) -> bool:
    """Whether ``check`` fails on its own verdict too (not only because its extra is missing)."""
    if check == "memory":
        m = r.memory_comparison
        return m is not None and ((m.verdict.value == "regressed" and not updating) or m.over_budget)
    if check == "counts":
        cc = r.count_comparison
        return cc is not None and ((bool(cc.regressions()) and not updating) or bool(cc.over_budget))
    if check == "bottleneck":
        return bool(r.misclassified)
    return True


def unavailable_message(part: str, why: Any, label: str, *, asked_by: str | None = None) -> str:
    """``counts unavailable: FLOP counter ... (RuntimeError: ...)``: an extra that could not be
    measured (``why``: a :class:`~pytest_gpuperf.core.containment.Unavailable`). With ``asked_by``
    (the option that asks for it, ``"max_ops=12"``) the message says the check cannot be made and
    fails; without it, that the part is left out of the comparison and the baseline."""
    head = f"{part} unavailable: {why.text()}"
    if asked_by:
        return f"{head}; {asked_by} needs it, so this check fails ({label})"
    return f"{label}: {head}; the timing and the other checks stand; this part is neither compared nor stored"


def overrun_warning(overruns: Any) -> str | None:
    """One line, for the suite's author, naming every benchmark whose measurement took far longer
    than its ``max_time`` because one call is long (``overruns``: ``(name,``
    :class:`~pytest_gpuperf.verdict.result.Overrun` ``)`` pairs), with the options that change it;
    None when there is none."""
    overruns = list(overruns)
    if not overruns:
        return None
    listed = "; ".join(f"{name} ({o.elapsed_s:.1f} s for max_time {o.max_time_s:g} s: one call takes "
                       f"{format_ms(o.call_ms)}, min_rounds={o.min_rounds} and {o.warmup_calls} warmup "
                       f"call{'s' if o.warmup_calls != 1 else ''})"
                       for name, o in overruns)
    return (f"{len(overruns)} benchmark(s) took far longer than their max_time because one call is long: {listed}. "
            f"For the suite's author: min_rounds rounds and the warmup always run, so lower min_rounds/warmup_time "
            f"or raise max_time in their @pytest.mark.gpu_bench(...)")


def inconclusive_warning(names: Any) -> str | None:
    """One line naming every benchmark whose inconclusive verdict passed (``names``: ``module::id``,
    repeats counted once); each one's note, in the summary's notes, says why. None when there is none."""
    names = list(dict.fromkeys(names))
    if not names:
        return None
    return (f"{len(names)} benchmark(s) inconclusive, which passes (fails with --gpuperf-strict): "
            f"{', '.join(names)}; each one's note says why and how to decide")
