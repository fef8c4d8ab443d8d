"""The session's terminal summary, as lines (pure: no pytest, no torch).

:func:`summary` turns what a session measured (:class:`SessionSummary`) into the lines pytest's
terminal writer prints after the tests, phase by phase: the header with the mode, the table and
its legend, the baselines or A/B lines, the device keys, the verdicts' notes, the phases of the
device time, the warnings (cannot fail, machine differs, missing baselines, telemetry, the
session's warnings), pytest-xdist, and where the reports went. The plugin's session object
(:class:`~pytest_gpuperf.plugin.session.GpuPerfSession`) builds the input and writes the lines.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

#: One line: ``(kind, text, markup)``; kind ``"sep"`` is a separator line with ``text`` as its title
#: (pytest's ``write_sep("=", text)``), ``"line"`` a plain line; markup: e.g. ``{"yellow": True}``.
Line = tuple[str, str, dict[str, bool]]


@dataclass(frozen=True)
class Row:
    """One measured benchmark: ``name`` (``module::id``), its result, whether its baseline was
    updated this session, and its device key."""

    name: str
    result: Any  # BenchResult
    updated: bool = False
    device_key: str | None = None


@dataclass(frozen=True)
class SessionSummary:
    """What the summary reports. ``measuring``/``updating``/``replicated``/``processes``: the
    session's mode; ``ab_label``/``ab_processes``/``ab_removed``: A/B mode (``ab_label`` None: not
    A/B); ``baselines``: the baseline folder as shown; ``table_options``: keyword arguments of
    :func:`~pytest_gpuperf.reporting.report.summary_lines` (columns, sort, grouping); ``notes``:
    telemetry notes; ``warnings``: the session's warnings (each distinct one printed once);
    ``workers_seen``: pytest-xdist workers merged; ``written``: (label, path) of reports written;
    ``errors``: why a report could not be written; ``width``: the terminal's width (characters; the
    table and its legend fit it; None: no limit); ``world_size``: under torchrun or
    ``--gpuperf-nproc``, the ranks (None: neither)."""

    rows: Sequence[Row]
    measuring: bool = True
    updating: bool = False
    replicated: bool = False
    processes: int = 1
    ab_label: str | None = None
    ab_processes: int = 2
    ab_removed: Sequence[str] = ()
    baselines: str = "baselines"
    table_options: Mapping[str, Any] = field(default_factory=dict)
    notes: Sequence[str] = ()
    warnings: Sequence[str] = ()
    workers_seen: int = 0
    written: Sequence[tuple[str, str]] = ()
    errors: Sequence[str] = ()
    width: int | None = None
    world_size: int | None = None


def summary(s: SessionSummary) -> list[Line]:
    """The summary's lines, in order (see the module doc)."""
    if not s.rows:  # nothing measured: only what went wrong
        return [*_warnings(s.warnings), *_errors(s.errors)]
    if not s.measuring:
        return [_line(f"gpuperf: {len(s.rows)} benchmark(s) ran once (smoke mode); run with --gpuperf to "
                      f"measure and compare them")]
    rest = [*_baselines_or_ab(s), *_device_keys(s), *_notes(s), *_phases(s),
            *_cannot_fail(s), *_machine_differs(s), *_missing(s), *(_line(f"telemetry: {n}") for n in dict.fromkeys(s.notes)),
            *_warnings(s.warnings), *_xdist(s), *_written(s), *_errors(s.errors)]
    return [*_header(s), *_table(s), *_wrapped(rest, s.width)]


def _wrapped(lines: Sequence[Line], width: int | None) -> list[Line]:
    """``lines`` wrapped to ``width`` characters (notes, warnings and the like; the table fits by
    itself): a continuation is indented two spaces more than its line, and words are never split, so
    a path or a node id longer than the width stays whole on its own line."""
    if not width:
        return list(lines)
    out: list[Line] = []
    for kind, text, markup in lines:
        if kind != "line" or len(text) <= width:
            out.append((kind, text, markup))
            continue
        indent = " " * (len(text) - len(text.lstrip(" ")) + 2)
        for part in textwrap.wrap(_code_whole(text), width, subsequent_indent=indent, break_long_words=False,
                                  break_on_hyphens=False):
            out.append((kind, part.replace(_NBSP, " "), markup))
    return out


#: Stands for a space inside a `code span` while a line is wrapped (textwrap breaks at ASCII spaces only).
_NBSP = "\u00a0"


def _code_whole(text: str) -> str:
    """``text`` with the spaces inside each `` `code span` `` (a command: `` `pytest
    --gpuperf-update-baselines` ``) made unbreakable, so that wrapping keeps the command on one line."""
    parts = text.split("`")
    return "`".join(p.replace(" ", _NBSP) if i % 2 else p for i, p in enumerate(parts)) if len(parts) > 2 else text


def wrap(text: str, width: int | None) -> list[str]:
    """One summary line wrapped to ``width`` as notes and warnings are (:func:`_wrapped`)."""
    return [part for _, part, _ in _wrapped([_line(text)], width)]


def wrap_message(text: str, width: int | None) -> str:
    """A failure message wrapped to ``width`` (issue 32): a line that starts a message (the verdict:
    pytest's short summary shows it) stays whole; a longer evidence line is broken after each ``;``,
    one clause per line, indented two spaces more than the line, and a clause still too long is
    wrapped at spaces (a path or a node id is never split)."""
    if not width:
        return text
    out: list[str] = []
    for line in text.split("\n"):
        if len(line) <= width or not line.startswith(" "):
            out.append(line)
            continue
        lead = line[: len(line) - len(line.lstrip(" "))]
        more = lead + "  "
        clauses = [c.strip() for c in line.strip().split("; ")]
        for i, clause in enumerate(clauses):
            clause += ";" if i < len(clauses) - 1 else ""
            out.extend(part.replace(_NBSP, " ") for part in textwrap.wrap(
                _code_whole(clause), width, initial_indent=lead if i == 0 else more, subsequent_indent=more,
                break_long_words=False, break_on_hyphens=False) or [clause])
    return "\n".join(out)


def _line(text: str, **markup: bool) -> Line:
    return ("line", text, markup)


def _mode_detail(s: SessionSummary) -> str:
    """What the header says, in parentheses, after the mode: how the benchmarks were measured."""
    if s.replicated and s.world_size is not None:  # --gpuperf-nproc
        launches = "1 torchrun launch" if s.processes == 1 else f"{s.processes} torchrun launches"
        return f"{launches} of {s.world_size} ranks per benchmark; a round = the slowest rank's"
    if s.replicated:  # the real counts (issue 47): processes added for thin evidence too
        used = [c.processes for c in (r.result.comparison for r in s.rows) if c is not None and c.processes]
        more, fewer = [n for n in used if n > s.processes], [n for n in used if n < s.processes]
        return (f"{s.processes} worker process{'' if s.processes == 1 else 'es'} per benchmark"
                + (f"; {len(fewer)} decided on {max(fewer)}{'' if len(set(fewer)) == 1 else ' or fewer'}"
                   if fewer else "")  # a pass decided before the last process, or a stopped run
                + (f"; {len(more)} measured in up to {max(more)}" if more else ""))
    if s.world_size is not None:
        return f"torchrun: {s.world_size} ranks in step; a round = the slowest rank's"
    return "one process: run-to-run spread not measured, --gpuperf-processes 1"


def _header(s: SessionSummary) -> list[Line]:
    """The separator line with the mode (issue 47: within the width): ``gpuperf: N benchmark(s),
    mode: compare (how it was measured)``; what does not fit in the separator's title (pytest adds
    ``"= "`` and ``" ="`` at least) follows on lines of its own, wrapped."""
    parts = [f"gpuperf: {len(s.rows)} benchmark(s), mode: " + ("update baselines" if s.updating else "compare"),
             f"({_mode_detail(s)})"]
    if s.ab_label is not None:
        workers = "worker processes" if s.world_size is None else f"torchrun launches of {s.world_size} ranks"
        parts = [f"gpuperf: {len(s.rows)} benchmark(s), mode: A/B", f"vs {s.ab_label}",
                 f"({s.ab_processes} pair(s) of {workers}, interleaved ABBA blocks)"]
    fits = len(parts)
    while fits > 1 and s.width and len(" ".join(parts[:fits])) + 4 > s.width:
        fits -= 1
    rest = " ".join(parts[fits:])
    return [("sep", " ".join(parts[:fits]), {}), *_wrapped([_line(rest)] if rest else [], s.width)]


def _table(s: SessionSummary) -> Iterator[Line]:
    from pytest_gpuperf.reporting.report import legend, summary_lines

    lines = summary_lines([(r.name, r.result, r.updated) for r in s.rows], width=s.width, **s.table_options)
    yield from (_line(line) for line in lines)
    ratios = any(r.result.comparison is not None and r.result.comparison.ratio is not None for r in s.rows)
    text = legend("ab" if s.ab_label is not None else "replicates" if s.replicated else "stored", lines,
                  columns=ratios)  # without ratios, the marks' footnotes only
    for line in (textwrap.wrap(_code_whole(text), s.width, break_on_hyphens=False) if s.width else
                 [text] if text else []):
        yield _line(line.replace(_NBSP, " "))


def _baselines_or_ab(s: SessionSummary) -> Iterator[Line]:
    if s.ab_label is None:
        yield _line(f"baselines: {s.baselines}")
        return
    from pytest_gpuperf.reporting.messages import ab_summary

    for r in s.rows:
        c = r.result.comparison
        text = ab_summary(c) if c is not None else None
        if text:
            yield _line(f"{r.name}: {text} ({c.verdict.value})")
    for key in s.ab_removed:
        yield _line(f"{key}: removed since {s.ab_label} (measured on side A only; not a failure)")


def _device_keys(s: SessionSummary) -> list[Line]:
    keys = sorted({r.device_key for r in s.rows if r.device_key})
    return [_line(f"device key: {', '.join(keys)}")] if keys else []


def _notes(s: SessionSummary) -> list[Line]:
    from pytest_gpuperf.reporting.messages import comparison_note

    notes = [f"  {r.name}: {note}" for r in s.rows
             if r.result.comparison is not None and (note := comparison_note(r.result.comparison))]
    return [_line("* notes:"), *(_line(n) for n in notes)] if notes else []


def _phases(s: SessionSummary) -> Iterator[Line]:
    for r in s.rows:
        b = r.result.bottleneck
        if b is not None and b.evidence.phases:
            shares = ", ".join(f"{k} {v * 100:.0f}%" for k, v in b.evidence.phases.items())
            yield _line(f"phases of {r.name} (share of device time): {shares}")


def _cannot_fail(s: SessionSummary) -> list[Line]:
    blind = [f"{r.name} (+{(c.resolution if c.resolution is not None else c.floor) * 100:.0f}%)"
             for r in s.rows if (c := r.result.comparison) is not None and c.cannot_fail]
    if not blind or s.updating:
        return []
    return [_line(f"warning: {len(blind)} benchmark(s) cannot fail a slowdown below the figure shown, their "
                  f"baseline's spread is that wide: {', '.join(blind)}; re-record them on a quiet machine (they "
                  f"fail with --gpuperf-strict)", yellow=True)]


def _machine_differs(s: SessionSummary) -> list[Line]:
    from pytest_gpuperf.reporting.report import machine_differs_line

    text = machine_differs_line(r.result for r in s.rows)
    return [_line(text, yellow=True)] if text else []


def _missing(s: SessionSummary) -> list[Line]:
    missing = sum(1 for r in s.rows if r.result.comparison is not None
                  and r.result.comparison.verdict.value == "no-baseline" and not r.updated)
    if not missing or s.updating:
        return []
    return [_line(f"{missing} benchmark(s) have no baseline: record them with `pytest --gpuperf-update-baselines`")]


def _warnings(warnings: Sequence[str]) -> list[Line]:
    return [_line(f"warning: {w}", yellow=True) for w in dict.fromkeys(warnings)]


def _xdist(s: SessionSummary) -> list[Line]:
    if not s.workers_seen:
        return []
    return [_line(f"pytest-xdist: results of {s.workers_seen} worker(s) merged; measurements on the same device "
                  f"were serialized with a file lock (never two benchmarks on one device at once)")]


def _written(s: SessionSummary) -> list[Line]:
    return [_line(f"{label} written to {path}") for label, path in s.written]


def _errors(errors: Sequence[str]) -> list[Line]:
    return [_line(f"error: {e}", red=True) for e in errors]


class ProgressLine:
    """Progress of long work (replicate worker processes, A/B pairs, the A/B confirmation), written
    with pytest's terminal reporter ``tr``. On a terminal (``tr.isatty()``) a step rewrites one line
    in place, as pytest's own "collecting ..." line does (``tr.rewrite``), cut to ``width`` characters
    so that it never wraps; in CI logs and pipes each step is a plain line.

    - :meth:`line`: a line that stays (what starts or ends a phase), wrapped to ``width``;
    - :meth:`step`: a step, rewritten on a terminal, a plain line (wrapped) elsewhere;
    - :meth:`tick`: a finer step (e.g. each benchmark a worker process finished), shown only on a
      terminal, where it costs no line;
    - :meth:`close`: ends the rewritten line (it stays visible).

    The object itself is callable as :meth:`step`, so it is the ``progress`` callback of
    :func:`~pytest_gpuperf.plugin.replicates.run_workers` and of the A/B coordinator.
    """

    def __init__(self, tr: Any, width: int | None = None) -> None:
        self.tr = tr
        self.live = tr is not None and bool(tr.isatty())
        self.width = width or 80
        self._shown = False  # a rewritten line is on screen, not yet ended

    def line(self, text: str) -> None:
        if self.tr is None:
            return
        self.close()
        for part in wrap(text, self.width):  # within the width, as the summary's lines (issue 47)
            self.tr.write_line(part)

    def step(self, text: str) -> None:
        if self.tr is None:
            return
        if not self.live:
            for part in wrap(text, self.width):
                self.tr.write_line(part)
            return
        self.tick(text)

    __call__ = step

    def tick(self, text: str) -> None:
        if not self.live:
            return
        if not self._shown:
            self.tr.ensure_newline()
        text = cut_end(text, self.width - 1)
        self.tr.rewrite(text + " " * max(0, self.width - 1 - len(text)))
        self.tr.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self.tr.write("\n")
            self._shown = False


def cut_end(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, cut at the end with an ellipsis."""
    return text if len(text) <= width else text[:max(0, width - 1)] + "…"


def whole_time_line(total_s: float, before_tests_s: float, *, ab: bool = False,
                    phases_s: Mapping[str, float] | None = None) -> str:
    """The session's whole wall time (s), with the part spent measuring in worker processes (or the
    A/B run) before the tests: pytest's closing ``in N s`` counts from its own session start, after
    that measuring, so it leaves it out. ``phases_s``: where that part went (step -> seconds, in
    order; the coordinator's ``phases_s``), shown when there is more than one step, e.g. ``(3 worker
    processes 66 s, A/B confirmation 152 s)``."""
    what = "the A/B measurement" if ab else "worker processes"
    steps = ""
    if phases_s and len(phases_s) > 1:
        steps = ": " + ", ".join(f"{step} {s:.0f} s" for step, s in phases_s.items())
    return (f"gpuperf: the session took {total_s:.1f} s in all, {before_tests_s:.1f} s of it in {what} before the "
            f"tests{steps} (pytest's closing time counts the tests only)")


def more_processes_line(used: Mapping[str, int], processes: int, not_escalated: int = 0,
                        max_processes: int | None = None, updating: bool = False) -> str:
    """The benchmarks decided on more worker processes than the session's ``processes`` (their
    evidence was thin: ``--gpuperf-max-processes``), each with the number its decision used; then,
    with ``not_escalated`` > 0, how many thin ones got no more because even ``max_processes``
    could not decide them (:func:`not_escalated_line`)."""
    parts = []
    if used:
        listed = ", ".join(f"{name} ({n})" for name, n in sorted(used.items()))
        parts.append(f"gpuperf: {len(used)} benchmark(s) were measured in more than {processes} worker processes, "
                     f"where the evidence was thin; processes each decision used: {listed}")
    if not_escalated:
        line = not_escalated_line(not_escalated, max_processes, updating)
        parts.append(line if not parts else line.removeprefix("gpuperf: "))
    return "; ".join(parts)


def not_escalated_line(count: int, max_processes: int | None, updating: bool = False, after: int | None = None,
                       by_time: bool = False) -> str:
    """How many benchmarks with thin evidence (inconclusive; updating, too imprecise a baseline)
    were measured in no more worker processes because, by the spread of their processes so far,
    even ``max_processes`` could not decide them (each verdict's note says why); ``after``: the
    processes measured so far, for the progress line; ``by_time``: ``max_processes`` is what the time
    left for more allowed (``--gpuperf-more-processes-time``), none when it is at most ``after``."""
    what = "too imprecise a baseline" if updating else "inconclusive"
    when = f" after {after} worker processes" if after is not None else ""
    decide = "make them precise enough" if updating else "decide them"
    head = f"gpuperf: {count} benchmark(s) {what}{when} not measured in more worker processes: "
    if by_time and max_processes is not None and after is not None and max_processes <= after:
        return head + "the time for them (--gpuperf-more-processes-time) had run out (each verdict's note says why)"
    if by_time:
        return (head + f"by their spread so far, the {max_processes} processes the time left allows "
                f"(--gpuperf-more-processes-time) could not {decide} (each verdict's note says why)")
    at = f"{max_processes} processes" if max_processes is not None else "the most processes allowed"
    return (head + f"by their spread so far, even {at} (--gpuperf-max-processes, within --gpuperf-more-processes-time) "
            f"could not {decide} (each verdict's note says why)")
