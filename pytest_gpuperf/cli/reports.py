"""The ``gpuperf`` command line: compare two result files, list stored baselines.

Run as ``gpuperf ...`` (the console script) or ``python -m pytest_gpuperf ...``::

    gpuperf compare BASELINE CURRENT [--threshold F] [--alpha A] [--fail-on regressed|inconclusive]
    gpuperf show [DIR]
    gpuperf bisect GOOD BAD -- PYTEST_ARGS   (added by pytest_gpuperf.cli; see pytest_gpuperf.bisect)

``compare`` accepts, on either side, a baseline file (``baselines/<device key>/<module>.json``)
or a JSON report written by ``pytest --gpuperf-json PATH``; the kind is detected from the
content (a report has ``"kind": "report"``). Benchmarks are matched by their full name
``<module path>::<test id>`` (a report's keys; for a baseline file the file's ``module`` field
plus the entry's id). When no full name is common to both sides (say, two baseline files of
different modules, or a baseline file without a ``module`` field) they are matched by the test
id alone, the part after the ``::`` that follows the module path; an id present in several
modules of one file is then ambiguous and not compared. Each common benchmark goes through
:func:`pytest_gpuperf.verdict.gate.evaluate` exactly as in a pytest run (timing, peak memory and
counts; the baseline side's stored run history included; a report measured by worker processes
is decided over its process medians), so the verdict is the one the plugin gave for those
samples. A report benchmark whose verdict came from an A/B run (``--gpuperf-ab``, or a stored
alarm confirmed by A/B against the baseline's commit) is decided again on the report's own
paired blocks, as the plugin did.

Exit codes: 0 nothing failed; 1 a benchmark regressed in time, peak memory or counts (or, with
``--fail-on inconclusive``, was inconclusive in time); 2 unusable input (a missing or unreadable file, not JSON, not a report or
baseline file, no benchmark in common) or a bad command line; 141 the reader closed the output
early (``gpuperf show | head``), quietly. Nothing here imports torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from pytest_gpuperf.storage.baseline import BaselineEntry
from pytest_gpuperf.core.options import DEFAULTS, options_from_dict
from pytest_gpuperf.reporting.report import format_table

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INPUT = 2


class InputError(Exception):
    """An input file cannot be used; the message names the file and what is wrong with it."""


@dataclass(frozen=True)
class ResultFile:
    """A loaded report or baseline file.

    ``kind`` is ``"report"`` or ``"baseline"``; ``entries`` maps the full benchmark name
    (``<module>::<test id>``, or the bare test id for a baseline file without ``module``) to its
    entry; ``test_ids`` maps the same names to the bare test id. ``ab`` maps the names of a
    report's benchmarks whose verdict came from an A/B run (``--gpuperf-ab``, or a stored alarm
    confirmed by A/B against the baseline's commit) to ``(REF, blocks)``: the report's paired
    blocks (:class:`~pytest_gpuperf.verdict.paired.Block`, one block median each), which decide them again.
    ``op_diffs``: a report's per-op diffs (``op_diff``, "why it got slower") by the same names.
    """

    path: str
    kind: str
    entries: dict[str, BaselineEntry]
    test_ids: dict[str, str]
    ab: dict[str, tuple[str, tuple[Any, ...]]] = dataclasses.field(default_factory=dict)
    op_diffs: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)


def _ab_blocks(raw: Any) -> tuple[str, tuple[Any, ...]] | None:
    """``(REF, blocks)`` of a report entry's A/B comparison (``comparison.ab_ref``/``ab_blocks``), or None."""
    from pytest_gpuperf.verdict.paired import Block

    c = raw.get("comparison") if isinstance(raw, dict) else None
    if not isinstance(c, dict) or not c.get("ab_ref") or not c.get("ab_blocks"):
        return None
    try:
        blocks = tuple(Block(str(side), int(proc), int(pos), (float(ms),)) for side, proc, pos, ms in c["ab_blocks"])
    except (TypeError, ValueError):
        return None
    if not any(b.side == "A" for b in blocks) or any(b.samples_ms[0] <= 0 for b in blocks):
        return None
    return str(c["ab_ref"]), blocks


# ----------------------------------------------------------------------------- loading


def _read_text(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a report or baseline file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text (expected a JSON report or baseline file)") from None


def _test_id(key: str, entry: BaselineEntry, module: str | None) -> str:
    """The bare test id of a benchmark named ``key``: what follows ``<module path>::``."""
    mod = module if module is not None else entry.data.get("module")
    if isinstance(mod, str) and mod and key.startswith(mod + "::"):
        return key[len(mod) + 2:]
    if module is None and "::" in key:  # a report key whose entry does not say its module
        return key.split("::", 1)[1]
    return key


def load_result_file(path: os.PathLike[str] | str) -> ResultFile:
    """Load a JSON report (``pytest --gpuperf-json``) or a baseline file, detected by content.

    Both are validated with :func:`pytest_gpuperf.storage.baseline.parse` (every entry needs a non-empty
    ``samples_ms`` list of positive ms values, a supported ``schema_version``, a valid
    ``history``). Raises :class:`InputError` naming the file and the problem: missing,
    unreadable, not UTF-8, not JSON, or not shaped like a report or baseline file (for a
    baseline file the message is :class:`~pytest_gpuperf.storage.baseline.BaselineError`'s).
    """
    from pytest_gpuperf.storage.baseline import BaselineError, parse

    p = Path(path)
    text = _read_text(p)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{p}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    what = "expected a pytest-gpuperf JSON report (pytest --gpuperf-json) or a baseline file"
    if not isinstance(data, dict):
        raise InputError(f"{p}: the top level is not a JSON object; {what}")
    kind = data.get("kind")
    if kind is not None and kind != "report":
        raise InputError(f"{p}: unknown 'kind' {kind!r}; {what}")
    if kind is None and "benchmarks" not in data and "schema_version" not in data:
        raise InputError(f"{p}: has neither 'schema_version' nor 'benchmarks'; {what}")
    try:
        parsed = parse(p, text, schema=None if kind == "report" else "baseline")  # reports: hand checks only
    except BaselineError as exc:
        if kind == "report":
            raise InputError(f"report file {p} is unusable: {exc.problem}") from None
        raise InputError(str(exc)) from None
    if kind == "report":
        entries = {str(k): v for k, v in parsed.benchmarks.items()}
        ids = {k: _test_id(k, v, None) for k, v in entries.items()}
        raw = data.get("benchmarks") if isinstance(data.get("benchmarks"), dict) else {}
        ab = {k: found for k in entries if (found := _ab_blocks(raw.get(k))) is not None}
        diffs = {k: d for k in entries if isinstance(raw.get(k), dict) and isinstance(d := raw[k].get("op_diff"), dict)}
        return ResultFile(str(p), "report", entries, ids, ab, diffs)
    module = parsed.module if isinstance(parsed.module, str) and parsed.module else None
    entries, ids = {}, {}
    for bid, entry in parsed.benchmarks.items():
        key = f"{module}::{bid}" if module else str(bid)
        entries[key] = entry
        ids[key] = str(bid)
    return ResultFile(str(p), "baseline", entries, ids)


# ----------------------------------------------------------------------------- matching


@dataclass(frozen=True)
class Matching:
    """Which benchmarks of two files correspond.

    ``pairs`` are ``(name, baseline key, current key)``; ``by_test_id`` is True when the full
    names had nothing in common and the bare test ids were used; ``ambiguous`` lists test ids
    found in several modules of one file (not compared in that mode).
    """

    pairs: list[tuple[str, str, str]]
    only_baseline: list[str]
    only_current: list[str]
    by_test_id: bool = False
    ambiguous: tuple[str, ...] = ()


def match_benchmarks(baseline: ResultFile, current: ResultFile) -> Matching:
    """Pair the benchmarks of two files by full name, else (nothing in common) by test id."""
    common = sorted(set(baseline.entries) & set(current.entries))
    if common:
        return Matching(
            [(k, k, k) for k in common],
            sorted(set(baseline.entries) - set(common)),
            sorted(set(current.entries) - set(common)),
        )

    def by_id(f: ResultFile) -> tuple[dict[str, str], set[str]]:
        out: dict[str, str] = {}
        dup: set[str] = set()
        for key, tid in f.test_ids.items():
            if tid in out:
                dup.add(tid)
            out[tid] = key
        return out, dup

    b_ids, b_dup = by_id(baseline)
    c_ids, c_dup = by_id(current)
    ambiguous = (set(b_ids) & set(c_ids)) & (b_dup | c_dup)
    ids = sorted((set(b_ids) & set(c_ids)) - ambiguous)
    if not ids:
        return Matching([], sorted(baseline.entries), sorted(current.entries))
    used_b = {b_ids[t] for t in ids}
    used_c = {c_ids[t] for t in ids}
    return Matching(
        [(c_ids[t], b_ids[t], c_ids[t]) for t in ids],
        sorted(set(baseline.entries) - used_b),
        sorted(set(current.entries) - used_c),
        by_test_id=True,
        ambiguous=tuple(sorted(ambiguous)),
    )


# ----------------------------------------------------------------------------- output helpers


def _stored_probe(current: Any, base: Any) -> Any:
    """The "machine differs" evidence of two stored entries: the current run's probe median
    against the baseline's stored level of the same probe (only medians are stored, so it never
    normalizes). None when either side has no probe."""
    from pytest_gpuperf.verdict.machine import ProbeEvidence

    run = current.history[-1]
    if run.probe_ms is None or run.probe is None:
        return None
    return ProbeEvidence((run.probe_ms,), base.probe_level_ms(run.probe), run.probe)


def _err(msg: str) -> None:
    print(f"gpuperf: error: {msg}", file=sys.stderr)


def _names(keys: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(keys[:limit])
    return shown + (f", ... ({len(keys)} in all)" if len(keys) > limit else "") if keys else "(none)"


# ----------------------------------------------------------------------------- compare


def cmd_compare(args: argparse.Namespace) -> int:
    """``gpuperf compare``: decide every common benchmark; returns the exit code (0, 1 or 2).

    Phases: load and match the two files, decide each pair through the plugin's pipeline
    (:func:`_decide_pair`), print the table and the details (:func:`_print_comparison`), and
    the exit code (:func:`_exit_code`)."""
    try:
        base = load_result_file(args.baseline)
        cur = load_result_file(args.current)
    except InputError as exc:
        _err(str(exc))
        return EXIT_INPUT
    m = match_benchmarks(base, cur)
    if not m.pairs:
        _err(
            f"{base.path} and {cur.path} have no benchmark in common (matched by "
            f"'<module>::<test id>', then by test id); {base.path} has: {_names(sorted(base.entries))}; "
            f"{cur.path} has: {_names(sorted(cur.entries))}"
        )
        return EXIT_INPUT
    decided: list[_Decided] = []
    for name, bkey, ckey in m.pairs:
        try:
            decided.append(_decide_pair(args, name, base, bkey, cur, ckey))
        except ValueError as exc:  # bad options stored in the current entry, bad stored medians
            _err(f"cannot compare {name} ({cur.path} against {base.path}): {exc}")
            return EXIT_INPUT
    priors = _priors([(base.entries[bkey], cur.entries[ckey]) for _name, bkey, ckey in m.pairs])
    if priors:  # each inconclusive pair read again with the spreads of all it was compared with
        decided = [_decide_pair(args, name, base, bkey, cur, ckey, priors)
                   if d.comparison is not None and d.comparison.verdict.value == "inconclusive" else d
                   for d, (name, bkey, ckey) in zip(decided, m.pairs)]
    _print_comparison(args, base, cur, m, decided)
    return _exit_code(args, decided)


@dataclass(frozen=True)
class _Decided:
    """One compared pair: its timing, count, memory and instruction comparisons (None: not compared),
    and a line saying it was decided on the report's A/B blocks (None: on the stored baseline)."""

    comparison: Any
    counts: Any = None
    memory: Any = None
    ab_line: str | None = None
    op_diff: Any = None  # the current report's per-op diff of this benchmark (verdict.opdiff.OpDiff)
    instructions: Any = None  # the instruction gate (verdict.instructions.InstructionVerdict), when counted


def _decide_pair(args: argparse.Namespace, name: str, base: ResultFile, bkey: str, cur: ResultFile,
                 ckey: str, priors: Any = None) -> _Decided:
    """Decide one pair as the plugin did (:func:`pytest_gpuperf.verdict.gate.evaluate`): on the
    current report's A/B blocks when its verdict came from A/B, else against the baseline entry,
    with the thresholds of the stored options (or the flags) and ``priors``, the spreads of all the
    pairs compared (:func:`_priors`). Raises ``ValueError`` for bad input."""
    from pytest_gpuperf.verdict.gate import Evidence, Reference, evaluate

    b_entry, c_entry = base.entries[bkey], cur.entries[ckey]
    stored = options_from_dict(c_entry.options)
    # no budgets here: they are the test's
    options = dataclasses.replace(
        DEFAULTS, threshold=stored.threshold if args.threshold is None else args.threshold,
        alpha=stored.alpha if args.alpha is None else args.alpha,
        memory_threshold=stored.memory_threshold, count_tolerance=stored.count_tolerance)
    ab = cur.ab.get(ckey)
    if ab is not None:  # the report's verdict came from its paired A/B blocks: decided on them again
        ev = evaluate(Evidence(ab_blocks=ab[1]), Reference.ab(ab[0], measured=True), options, benchmark_id=name)
        from pytest_gpuperf.storage.codec import decode_op_diff

        diff = decode_op_diff(cur.op_diffs.get(ckey))  # None when absent or unreadable: never needed to compare
        return _Decided(ev.comparison, ab_line=f"{name}: decided on the report's A/B blocks against {ab[0]}, as "
                                               f"the plugin did (the stored baseline's timing is not used)",
                        op_diff=diff)
    processes = c_entry.history[-1].process_medians_ms
    replicated = processes is not None and len(processes) >= 2  # measured by worker processes
    busy = c_entry.host_busy
    evidence = Evidence(
        samples_ms=tuple(c_entry.samples_ms),
        process_samples_ms=tuple((m_,) for m_ in processes or ()) if replicated else None,
        peak_memory_bytes=c_entry.peak_memory_bytes if b_entry.peak_memory_bytes is not None else None,
        counts=c_entry.counts if b_entry.count_history else None,
        throttle=busy, host_busy=busy, device=str(c_entry.data.get("device") or ""),
        cpu=_cpu_evidence(c_entry.cpu_time, len(processes) if replicated and processes else None),
        gpu_clock=_clock_evidence(c_entry.gpu_clock, len(processes) if replicated and processes else None),
        ref_medians=c_entry.history[-1].ref_medians, probe=c_entry.history[-1].probe,
        probe_ms=c_entry.history[-1].probe_ms)
    ev = evaluate(evidence, Reference.stored(b_entry, str(base.path)), options, benchmark_id=name,
                  probe=None if replicated else _stored_probe(c_entry, b_entry), priors=priors)
    comparison = ev.comparison
    if replicated:  # no A/B here: a regression is read against the machine's own speed, as the plugin does
        from pytest_gpuperf.verdict.gate import machine_explains
        from pytest_gpuperf.verdict.machine import cpu_drift_ratio, drift_ratios

        comparison = machine_explains(comparison, drift_ratios(c_entry.reference, b_entry.reference),
                                      cpu_drift_ratio(c_entry.reference, b_entry.reference))
    return _Decided(comparison, ev.counts, ev.memory, instructions=_instructions(name, b_entry, c_entry))


def _priors(entries: Sequence[tuple[BaselineEntry, BaselineEntry]]) -> Any:
    """The spreads of every pair compared over worker processes, one prior per clock, as the plugin
    fits a session's (:func:`pytest_gpuperf.verdict.moderation.session_priors` of each (baseline,
    current) pair)."""
    from pytest_gpuperf.verdict.moderation import session_priors

    return session_priors((c.history[-1].process_medians_ms,
                           c.cpu_time.process_medians_ms if c.cpu_time is not None else None, b,
                           (c.history[-1].probe, c.history[-1].ref_medians)) for b, c in entries)


def _clock_evidence(clock: Any, processes: int | None) -> Any:
    """The report's SM clock as evidence (:class:`~pytest_gpuperf.verdict.gpuclock.GpuClock`): per
    round as stored, or, over ``processes`` worker processes (compared by their medians), one reading
    per process, its median clock; None where the report has none or not one per process."""
    if clock is None or processes is None:
        return clock
    pm = clock.process_medians_mhz
    return dataclasses.replace(clock, mhz=tuple(pm)) if pm is not None and len(pm) == processes else None


def _instructions(name: str, b_entry: BaselineEntry, c_entry: BaselineEntry) -> Any:
    """The instruction gate on the two entries' counts (issue 48; None unless the current one has them)."""
    from pytest_gpuperf.verdict.instructions import Instructions, compare_counts

    current = Instructions.from_dict(c_entry.data.get("instructions"))
    if current is None:
        return None
    return compare_counts(current, Instructions.from_dict(b_entry.data.get("instructions")), benchmark_id=name)


def _cpu_evidence(cpu: Any, processes: int | None) -> Any:
    """A stored entry's CPU time as the plugin's CPU-time rule reads it (issue 45): as stored, its
    samples per round aligned with the wall clock's (the rule's share of CPU time in the wall time
    is read from them, as the plugin reads it; over ``processes`` worker processes the decision is
    over each process's median, :func:`pytest_gpuperf.verdict.gate.with_cpu_time`). None when not
    stored, or stored without each process's median when ``processes`` measured it."""
    if cpu is None or processes is None:
        return cpu
    medians = cpu.replicates_ms
    return cpu if medians is not None and len(medians) == processes else None


def _print_pairs_table(decided: list[_Decided]) -> None:
    """One row per compared pair: medians, ratio and 99% CI, and the timing, memory and count verdicts."""
    from pytest_gpuperf.core.units import format_ms, format_ratio
    from pytest_gpuperf.reporting.messages import comparison_note
    from pytest_gpuperf.verdict.compare import Verdict

    rows, starred = [], False
    instr = any(d.instructions is not None for d in decided)
    for d in decided:
        c, cc, mc = d.comparison, d.counts, d.memory
        verdict = c.verdict.value
        if c.verdict is Verdict.UNCHANGED and comparison_note(c):
            verdict += "*"
            starred = True
        ci = f"{format_ratio(c.ratio_ci[0])}-{format_ratio(c.ratio_ci[1])}" if c.ratio_ci else "-"
        rows.append((c.benchmark_id, format_ms(c.baseline_median_ms), format_ms(c.current_median_ms),
                     format_ratio(c.shown_ratio), ci, verdict, mc.verdict.value if mc is not None else "-",
                     cc.verdict.value if cc is not None else "-")
                    + ((d.instructions.verdict.value if d.instructions is not None else "-",) if instr else ()))
    header = ("name", "baseline median", "current median", "ratio", "99% CI", "verdict", "memory", "counts",
              *(("instructions",) if instr else ()))
    for line in format_table(rows, header=header, numeric=header[1:5]):
        print(line)
    if starred:
        print("* unchanged, with a note (significant but inside the effect floor or the prediction limit; -v says)")


def _print_comparison(args: argparse.Namespace, base: ResultFile, cur: ResultFile, m: Matching,
                      decided: list[_Decided]) -> None:
    """The files, the table (one row per pair), the details of what failed or is unsure (all with
    ``-v``), the benchmarks only one file has, and the totals."""
    from pytest_gpuperf.reporting.messages import comparison_message, gate_messages
    from pytest_gpuperf.verdict.compare import Verdict

    print(f"baseline: {base.path} ({base.kind})")
    print(f"current:  {cur.path} ({cur.kind})")
    if m.by_test_id:
        print("no '<module>::<test id>' name in common: matched by test id")
    for d in decided:
        if d.ab_line:
            print(d.ab_line)
    print()
    _print_pairs_table(decided)
    details = [d for d in decided if args.verbose or d.comparison.verdict in (Verdict.REGRESSED, Verdict.INCONCLUSIVE)]
    count_failures = [msg for d in decided if d.counts is not None for msg in gate_messages(d.counts)]
    count_failures += [msg for d in decided if d.memory is not None for msg in gate_messages(d.memory)]
    count_failures += [d.instructions.message for d in decided if d.instructions is not None
                       and (d.instructions.failed or d.instructions.verdict is Verdict.INCONCLUSIVE)]
    if details or count_failures:
        print()
        for d in details:
            print(comparison_message(d.comparison))
            if d.op_diff is not None:  # why it moved, op by op (the report's A/B profiles)
                from pytest_gpuperf.verdict.opdiff import table as op_table, why_lines

                print("\n".join(f"  {line}" for line in why_lines(d.op_diff)))
                print("\n".join(f"  {line}" for line in op_table(d.op_diff).splitlines()))
        for msg in count_failures:
            print(msg)
    if m.only_baseline or m.only_current or m.ambiguous:
        print()
    for key in m.only_baseline:
        print(f"only in baseline {base.path}: {key}")
    for key in m.only_current:
        print(f"only in current {cur.path}: {key}")
    for tid in m.ambiguous:
        print(f"not compared: test id {tid} is in several modules of one file")
    counts = {v: sum(d.comparison.verdict is v for d in decided) for v in Verdict}
    print()
    counted = [d.counts for d in decided if d.counts is not None]
    mems = [d.memory for d in decided if d.memory is not None]
    instr = [d.instructions for d in decided if d.instructions is not None]
    print(f"{counts[Verdict.REGRESSED]} regressed, {counts[Verdict.IMPROVED]} improved, "
          f"{counts[Verdict.INCONCLUSIVE]} inconclusive, {counts[Verdict.UNCHANGED]} unchanged"
          + (f"; counts: {sum(cc.failed for cc in counted)} regressed of {len(counted)} compared" if counted else "")
          + (f"; memory: {sum(mc.failed for mc in mems)} regressed of {len(mems)} compared" if mems else "")
          + (f"; instructions: {sum(i.failed for i in instr)} regressed of {len(instr)} compared" if instr else ""))


def _exit_code(args: argparse.Namespace, decided: list[_Decided]) -> int:
    """1 when a timing verdict fails (regressed; inconclusive too with ``--fail-on inconclusive``) or
    a count, memory or instruction comparison regressed, else 0."""
    from pytest_gpuperf.verdict.compare import Verdict

    failing = {Verdict.REGRESSED}
    if args.fail_on == "inconclusive":
        failing.add(Verdict.INCONCLUSIVE)
    failed = any(d.comparison.verdict in failing or (d.counts is not None and d.counts.failed)
                 or (d.memory is not None and d.memory.failed)
                 or (d.instructions is not None and d.instructions.failed) for d in decided)
    return EXIT_FAILED if failed else EXIT_OK


# ----------------------------------------------------------------------------- show


def _show_rows(benchmarks: dict[str, BaselineEntry]) -> list[tuple[str, ...]]:
    from pytest_gpuperf.core.units import format_bytes, format_ms

    rows = []
    for bid in sorted(benchmarks):
        entry = benchmarks[bid]
        last = entry.history[-1]
        stamp = last.timestamp_utc or entry.data.get("timestamp_utc")
        peak = last.peak_memory_bytes if last.peak_memory_bytes is not None else entry.peak_memory_bytes
        rows.append((
            str(bid),
            str(len(entry.history)),
            format_ms(last.estimate_ms),
            stamp[:10] if isinstance(stamp, str) and stamp else "-",
            format_bytes(peak) if isinstance(peak, (int, float)) and not isinstance(peak, bool) else "-",
            _show_counts(last.counts, entry.count_history),
        ))
    return rows


#: The columns of ``gpuperf show --runs``: one row per stored run.
RUN_HEADER = ("date (UTC)", "commit", "machine", "median", "CPU", "IQR", "rounds", "processes")


def _run_rows(entry: BaselineEntry) -> list[tuple[str, ...]]:
    """One row per stored run of ``entry``, oldest first: when it was recorded, its git commit
    (``*`` when recorded from uncommitted changes), the machine (CPU model or GPU name), its median
    (:attr:`~pytest_gpuperf.verdict.history.RunRecord.estimate_ms`: over worker processes the
    geometric mean of their medians, as the verdicts and the terminal give it), its CPU time per
    call (the calling thread's, the same statistic; ``-`` where not read), its IQR as a share of the
    pooled median (the run's spread), its rounds, and its worker processes."""
    from pytest_gpuperf.core.units import format_ms

    rows = []
    for run in entry.history:
        env = run.environment or {}
        machine = env.get("device_name") or env.get("cpu_model") or "-"
        commit = (run.git_commit or "-")[:7] + ("*" if run.dirty else "")
        stamp = run.timestamp_utc.replace("T", " ")[:16] if isinstance(run.timestamp_utc, str) else "-"
        iqr = f"{run.iqr_ms / run.median_ms * 100:.1f}%" if run.iqr_ms is not None and run.median_ms > 0 else "-"
        processes = str(len(run.process_medians_ms)) if run.process_medians_ms else "1"
        cpu = format_ms(run.cpu_estimate_ms) if run.cpu_median_ms else "-"
        rows.append((stamp, commit, str(machine), format_ms(run.estimate_ms), cpu, iqr,
                     str(run.rounds) if run.rounds is not None else "-", processes))
    return rows


def _show_counts(newest: Any, history: Sequence[Any]) -> str:
    """``ops 212, syncs 0`` of the newest run (``kernels`` too on CUDA), ``(variable)`` when the
    stored runs disagree on one of them; ``-`` without counts."""
    if not newest:
        return "-"
    parts = []
    for name in ("ops", "kernels", "syncs"):
        if name in newest:
            values = {h[name] for h in history if name in h}
            parts.append(f"{name} {newest[name]}" + (" (variable)" if len(values) > 1 else ""))
    return ", ".join(parts) or "-"


def _format_age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s old"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min old"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.0f} h old"
    return f"{seconds / 86400:.0f} days old"


def _show_temp_files(root: Path) -> None:
    """List the temporary files of interrupted baseline writes under ``root`` (see ``write_atomic``)."""
    from pytest_gpuperf.core.files import STALE_TEMP_SECONDS, find_temp_files
    from pytest_gpuperf.core.units import format_bytes

    temps = find_temp_files(root)
    if temps:
        print()
    for path, size, age in temps:
        what = f"({format_bytes(size)}, {_format_age(age)})"
        if age >= STALE_TEMP_SECONDS:
            print(f"stale temporary file {path} {what}: safe to delete (left by an interrupted write)")
        else:
            print(f"temporary file {path} {what}: a write may be in progress; if none is, safe to delete")


def cmd_show(args: argparse.Namespace) -> int:
    """``gpuperf show``: list the baselines under a folder; returns the exit code (0 or 2)."""
    from pytest_gpuperf.storage.baseline import BaselineError, load, module_file_name

    root = Path(args.dir)
    if not root.exists():
        _err(f"baseline folder {root} does not exist")
        return EXIT_INPUT
    if not root.is_dir():
        _err(f"{root} is not a folder (expected <dir>/<device key>/<module>.json)")
        return EXIT_INPUT
    devices = sorted(d for d in root.iterdir() if d.is_dir())
    files = [(d, sorted(f for f in d.glob("*.json") if f.is_file())) for d in devices]
    if not any(fs for _, fs in files):
        print(f"no baseline files under {root} (expected {root}/<device key>/<module>.json)")
        _show_temp_files(root)
        return EXIT_OK
    bad = 0
    header = ("benchmark", "runs", "latest median", "date", "peak memory", "counts (latest run)")
    first = True
    for device, fs in files:
        if not fs:
            continue
        if not first:
            print()
        first = False
        print(f"device {device.name}:")
        for f in fs:
            try:
                bf = load(f)
            except BaselineError as exc:
                bad += 1
                print(f"  {f}: UNREADABLE: {exc.problem}")
                continue
            if bf is None:  # removed while listing
                continue
            rows = _show_rows(bf.benchmarks)
            module = f" ({bf.module})" if bf.module else ""
            print(f"  {f}{module}: {len(bf.benchmarks)} benchmark(s)")
            if isinstance(bf.module, str) and bf.module and module_file_name(bf.module) != f.name:
                print(f"    note: the baselines of {bf.module} are looked up in {module_file_name(bf.module)}, "
                      f"not in this file (named by an older pytest-gpuperf): rename it to use them")
            if rows:
                for line in format_table(rows, header=header, numeric=(header[1], header[2], header[4])):
                    print(f"    {line}")
            if getattr(args, "runs", False):
                for bid in sorted(bf.benchmarks):
                    print(f"    runs of {bid} (oldest first):")
                    for line in format_table(_run_rows(bf.benchmarks[bid]), header=RUN_HEADER,
                                             numeric=("median", "IQR", "rounds", "processes")):
                        print(f"      {line}")
    _show_temp_files(root)
    if bad:
        _err(f"{bad} unreadable baseline file(s) under {root} (listed above)")
        return EXIT_INPUT
    return EXIT_OK


# ----------------------------------------------------------------------------- parser


def _option_type(name: str) -> Any:
    """An argparse type that validates like the plugin's ``gpu_bench`` option ``name``."""
    from pytest_gpuperf.core.options import OptionError, convert

    def parse(value: str) -> float:
        try:
            return convert(name, value)
        except OptionError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


_COMPARE_EPILOG = """\
examples:
  {prog} compare baselines/cpu-amd-epyc/tests__perf__test_workloads.json results.json
  pytest --gpuperf --gpuperf-json main.json; ...; pytest --gpuperf --gpuperf-json pr.json
  {prog} compare main.json pr.json --threshold 0.1 --fail-on inconclusive

Benchmarks are matched by '<module>::<test id>' (a report's keys; for a baseline file its
'module' field plus the id); when no such name is common, by the test id alone. Threshold and
alpha default to the current entry's options (else the plugin's defaults).
exit codes: 0 ok, 1 regressed (or inconclusive with --fail-on inconclusive), 2 unusable input
or no benchmark in common.
"""

_SHOW_EPILOG = """\
example:
  {prog} show baselines

Lists DIR/<device key>/*.json: per benchmark the runs stored, the latest run's median, its date
and peak memory; then any temporary files of interrupted writes (.<name>.<random>.tmp) found
under DIR. exit codes: 0 ok, 2 missing DIR or an unreadable baseline file (still listed).
"""


def build_parser(prog: str = "gpuperf", extra: Sequence[Callable[[Any, str], None]] = ()) -> argparse.ArgumentParser:
    """The ``argparse`` parser of the command line (subcommands ``compare`` and ``show``, plus those
    that each ``extra`` callable adds with ``extra(subparsers, prog)``: ``bisect``, from
    :mod:`pytest_gpuperf.cli.bisect`, added by :mod:`pytest_gpuperf.cli`)."""
    parser = argparse.ArgumentParser(
        prog=prog, description="pytest-gpuperf's command line: see each command's --help.",
    )
    sub = parser.add_subparsers(dest="command")  # argparse lists the commands, those of `extra` too
    fmt = argparse.RawDescriptionHelpFormatter

    c = sub.add_parser(
        "compare", help="compare two reports or baseline files with the regression gate",
        description="Compare CURRENT against BASELINE, benchmark by benchmark, with the same "
                    "statistical decision as a pytest run. Each may be a JSON report "
                    "(pytest --gpuperf-json) or a baseline file; the kind is detected from the content.",
        epilog=_COMPARE_EPILOG.format(prog=prog), formatter_class=fmt,
    )
    c.add_argument("baseline", metavar="BASELINE", help="report or baseline file to compare against")
    c.add_argument("current", metavar="CURRENT", help="report or baseline file of the run under test")
    c.add_argument("--threshold", type=_option_type("threshold"), default=None, metavar="F",
                   help="smallest relative slowdown that counts as a regression (0.05 = 5%%); "
                        f"default: the current entry's option, else {DEFAULTS.threshold:g}")
    c.add_argument("--alpha", type=_option_type("alpha"), default=None, metavar="A",
                   help="significance level of the Mann-Whitney U tests; default: the current entry's option, "
                        f"else {DEFAULTS.alpha:g}")
    c.add_argument("--fail-on", choices=("regressed", "inconclusive"), default="regressed",
                   help="exit 1 on a regression (default), or also on an inconclusive comparison")
    c.add_argument("-v", "--verbose", action="store_true",
                   help="print the full explanation of every verdict, not only regressed/inconclusive ones")
    c.set_defaults(func=cmd_compare)

    s = sub.add_parser(
        "show", help="list the stored baselines", description="List the baseline files under DIR.",
        epilog=_SHOW_EPILOG.format(prog=prog), formatter_class=fmt,
    )
    s.add_argument("dir", metavar="DIR", nargs="?", default="baselines",
                   help="baseline folder (default: baselines)")
    s.add_argument("--runs", action="store_true",
                   help="also list every stored run of each benchmark: date, commit, machine, median, spread "
                        "(IQR), rounds and worker processes")
    s.set_defaults(func=cmd_show)
    for add in extra:
        add(sub, prog)
    return parser


def _prog() -> str:
    argv0 = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return "python -m pytest_gpuperf" if argv0 == "__main__.py" else "gpuperf"


#: Exit code when the reader of the output went away (``gpuperf show | head``): 128 + SIGPIPE,
#: what a shell reports for a program that SIGPIPE ended.
EXIT_BROKEN_PIPE = 141


def _stdout_to_devnull() -> None:
    """Point the stdout file descriptor at the null device, so that the interpreter's last flush
    of the unread output does not fail again (the recipe of the ``signal`` module's docs)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
    except (AttributeError, OSError, ValueError):  # no real stdout (an in-process caller's capture)
        pass


def main(argv: Sequence[str] | None = None, extra: Sequence[Callable[[Any, str], None]] = ()) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit code.

    0: nothing failed (or ``--help``); 1: a benchmark regressed (``--fail-on inconclusive``:
    or was inconclusive); 2: unusable input or a bad command line; 141: the reader of the output
    closed it early (``gpuperf show | head``; nothing is printed about it). Never raises ``SystemExit``.
    """
    try:
        code = _main(argv, extra)
        sys.stdout.flush()  # inside the try: a closed pipe often shows only at the last flush
    except BrokenPipeError:
        _stdout_to_devnull()
        return EXIT_BROKEN_PIPE
    return code


def _main(argv: Sequence[str] | None, extra: Sequence[Callable[[Any, str], None]] = ()) -> int:
    parser = build_parser(_prog(), extra)
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
    except SystemExit as exc:  # --help (0) or a usage error (2)
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else EXIT_INPUT)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return EXIT_INPUT
    return int(args.func(args))
