"""The instruction-count gate and its "why" (issue 48): pure, on callgrind :class:`Profile` s.

Instructions per call (``Ir``, counted by valgrind's callgrind, see
:mod:`pytest_gpuperf.measure.instructions`) do not depend on the machine's load or clock: the
A/A study (docs/instructions.md, ``benchmarks/instructions_study.py``) found them within
:data:`DEFAULT_TOLERANCE` across processes, quiet and with a core kept busy. So the gate is a
plain relative threshold, like the count gate (:mod:`pytest_gpuperf.verdict.counts`): more than
``stored * (1 + tolerance)`` fails, less than ``stored * (1 - tolerance)`` is an improvement.

The why of a host-cost regression is :func:`function_diff`: the per-function inclusive counts of
the two dumps, per call, the functions that grew most, and one named as *the* function that grew
(:func:`grown_function`). Callgrind sees C functions only: Python frames are all
``_PyEval_EvalFrameDefault``; what it names are the C entry points Python code reaches
(``THPVariable_add``, ``at::_ops::add_Tensor::call``, ``builtin_sorted``, ``list_append``...).

Sources: CodSpeed's simulation mode (a CPU benchmark's instructions under callgrind, gated on a
small relative change); torch.utils.benchmark's ``CallgrindStats.delta`` (per-function diff of two
``collect_callgrind`` results); PyTorch's ``benchmarks/instruction_counts``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from pytest_gpuperf.verdict.callgrind import Profile
from pytest_gpuperf.verdict.compare import Verdict

#: Relative change in instructions per call beyond which the gate decides (docs/instructions.md,
#: 2026-11-27): across worker processes, quiet and with a core kept busy, 14 benchmarks agreed
#: within 2.86% (glibc malloc paths that differ with what was allocated before measuring, up to
#: ~300 instructions per call on ops of ~11,000; within one launch command 0.13%); one more add in a
#: chain of 20 measured x1.0335..x1.073. 3% passes every A/A comparison and catches every such 5%
#: change; at 1%, 8-10 of 140 A/A comparisons failed or "improved".
DEFAULT_TOLERANCE = 0.03
#: functions listed in a diff
DIFF_FUNCTIONS = 5


def per_call(benchmark: Profile | int, loop: Profile | int, number: int) -> float:
    """Instructions per call: (the benchmark's dump minus the empty loop's dump) / ``number``.

    Both dumps counted ``number`` calls (:func:`pytest_gpuperf.measure.instructions.measure_many`);
    Profiles or their totals (instructions). Raises ``ValueError`` for ``number < 1``.
    """
    if number < 1:
        raise ValueError(f"number={number!r}: expected >= 1")
    b = benchmark.total if isinstance(benchmark, Profile) else benchmark
    lo = loop.total if isinstance(loop, Profile) else loop
    return max(0.0, (b - lo) / number)


def spread(values: Sequence[float]) -> float:
    """A/A spread: ``max / min - 1`` of instructions per call (0.0 for fewer than two values or all 0)."""
    vals = [v for v in values if v > 0]
    return max(vals) / min(vals) - 1 if len(vals) > 1 else 0.0


@dataclass(frozen=True)
class Instructions:
    """One benchmark's instruction count under callgrind, as results, reports and baselines carry it.

    ``per_call``: instructions per call (the empty loop's subtracted, :func:`per_call`); ``calls``:
    the calls counted; ``warmup``: the uncounted calls before them; ``tool``: what counted them
    (``"valgrind-3.19.0 callgrind, CPython 3.11.7, torch 2.13.0+cpu"``: counts compare only between
    the same builds); ``dump``: the callgrind file of this run (an artifact; not stored in baselines).
    """

    per_call: float
    calls: int
    warmup: int = 0
    tool: str = ""
    dump: str | None = None

    def to_dict(self, *, with_dump: bool = True) -> dict[str, Any]:
        """JSON-ready (``with_dump=False``: without the run's local dump path, as a baseline keeps it)."""
        d: dict[str, Any] = {"per_call": self.per_call, "calls": self.calls, "warmup": self.warmup, "tool": self.tool}
        if with_dump and self.dump:
            d["dump"] = self.dump
        return d

    @classmethod
    def from_dict(cls, d: Any) -> "Instructions | None":
        """From :meth:`to_dict`'s form; None for anything else (an entry without instructions)."""
        if not isinstance(d, Mapping):
            return None
        try:
            return cls(float(d["per_call"]), int(d["calls"]), int(d.get("warmup") or 0), str(d.get("tool") or ""),
                       str(d["dump"]) if d.get("dump") else None)
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class InstructionVerdict:
    """The gate's decision for one benchmark (see :func:`decide_instructions`).

    ``current``/``stored``: instructions per call now and in the baseline (the largest stored
    value when several runs were stored); ``ratio``: current / stored; ``limit``: the count
    above which it fails; ``verdict``: ``REGRESSED``, ``IMPROVED``, ``UNCHANGED`` or
    ``NO_BASELINE``; ``message``: one line naming the counts and the ratio.
    """

    benchmark_id: str
    verdict: Verdict
    current: float
    stored: float | None
    ratio: float | None
    limit: float | None
    tolerance: float
    message: str

    #: the per-function diff against the baseline's dump, when both dumps were there (:func:`diff_text`)
    why: str = ""
    #: the baseline's dump and this run's, kept as artifacts for the diff (paths; empty when not kept)
    dumps: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        """True when the instructions per call regressed."""
        return self.verdict is Verdict.REGRESSED

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (the report's ``instruction_comparison``)."""
        return {"verdict": self.verdict.value, "current": self.current, "stored": self.stored, "ratio": self.ratio,
                "limit": self.limit, "tolerance": self.tolerance, "message": self.message, "why": self.why,
                "dumps": list(self.dumps)}

    @classmethod
    def from_dict(cls, d: Any, benchmark_id: str = "benchmark") -> "InstructionVerdict | None":
        """From :meth:`to_dict`'s form; None for anything else."""
        if not isinstance(d, Mapping):
            return None
        try:
            return cls(benchmark_id, Verdict(d["verdict"]), float(d["current"]),
                       None if d.get("stored") is None else float(d["stored"]),
                       None if d.get("ratio") is None else float(d["ratio"]),
                       None if d.get("limit") is None else float(d["limit"]), float(d["tolerance"]),
                       str(d.get("message") or ""), str(d.get("why") or ""), tuple(d.get("dumps") or ()))
        except (KeyError, TypeError, ValueError):
            return None


def decide_instructions(current: float, stored: Sequence[float] | float | None, *, tolerance: float = DEFAULT_TOLERANCE,
                        benchmark_id: str = "benchmark") -> InstructionVerdict:
    """Gate ``current`` instructions per call against the baseline's ``stored`` value(s).

    Regressed when ``current > max(stored) * (1 + tolerance)``, improved when
    ``current < min(stored) * (1 - tolerance)``, else unchanged; no stored value: ``NO_BASELINE``.
    Several stored values (an A/A set) widen the band by their own spread. ``tolerance``:
    relative (0.01 = 1%). Raises ``ValueError`` for a negative tolerance or a negative count.
    Deterministic.
    """
    if not tolerance >= 0:
        raise ValueError(f"instruction tolerance={tolerance!r}: expected a fraction >= 0")
    if current < 0:
        raise ValueError(f"instructions per call {current!r}: expected >= 0")
    values = [stored] if isinstance(stored, (int, float)) else list(stored or ())
    if not values:
        return InstructionVerdict(benchmark_id, Verdict.NO_BASELINE, current, None, None, None, tolerance,
                                  f"{benchmark_id}: {current:,.0f} instructions per call (no baseline)")
    high, low = max(values), min(values)
    limit = high * (1 + tolerance)
    ratio = current / high if high else float("inf")
    if current > limit:
        verdict, word = Verdict.REGRESSED, "regressed"
    elif current < low * (1 - tolerance):
        verdict, word, ratio = Verdict.IMPROVED, "improved", current / low if low else 0.0
    else:
        verdict, word = Verdict.UNCHANGED, "unchanged"
    then = f"{high:,.0f}" if high == low else f"{low:,.0f}..{high:,.0f}"
    message = (f"{benchmark_id}: instructions per call {then} -> {current:,.0f} (x{ratio:.4f}, "
               f"{word}; tolerance {tolerance:.1%})")
    return InstructionVerdict(benchmark_id, verdict, current, high, ratio, limit, tolerance, message)


def compare_counts(current: Instructions, stored: Instructions | None, *, benchmark_id: str = "benchmark",
                   tolerance: float = DEFAULT_TOLERANCE) -> InstructionVerdict:
    """The instruction gate on two counts as results and baselines carry them: counts of another
    build (their ``tool`` texts differ: valgrind, Python or torch) are not compared (``INCONCLUSIVE``,
    the message names both builds); else :func:`decide_instructions` (no stored count:
    ``NO_BASELINE``). Raises ``ValueError`` as :func:`decide_instructions`."""
    if stored is not None and stored.tool and current.tool and stored.tool != current.tool:
        return InstructionVerdict(benchmark_id, Verdict.INCONCLUSIVE, current.per_call, stored.per_call, None, None,
                                  tolerance, f"{benchmark_id}: instructions per call not compared: the baseline was "
                                  f"counted by {stored.tool}, this run by {current.tool}")
    return decide_instructions(current.per_call, stored.per_call if stored is not None else None,
                               tolerance=tolerance, benchmark_id=benchmark_id)


def with_host_work(timing: Any, v: InstructionVerdict | None) -> Any:
    """The timing comparison ``timing`` with what the instruction count says of it, as a note: where
    the time moved or could not be decided and the host's instructions per call did not change
    (``v`` unchanged), ``host instructions per call unchanged (x1.0004, callgrind): the same host
    work`` — the code's host side did not change, so a slowdown is the memory, the caches, the
    device or the machine. Never changes the verdict. ``timing`` unchanged otherwise."""
    if timing is None or v is None or v.verdict is not Verdict.UNCHANGED or v.ratio is None:
        return timing
    if timing.verdict not in (Verdict.REGRESSED, Verdict.INCONCLUSIVE, Verdict.IMPROVED):
        return timing
    from pytest_gpuperf.verdict.compare import with_note

    return with_note(timing, f"host instructions per call unchanged (x{v.ratio:.4f}, callgrind): the same host work")


@dataclass(frozen=True)
class FunctionChange:
    """One function's change between two dumps, per call: inclusive and own instructions, calls."""

    name: str
    before: float
    after: float
    self_delta: float
    calls_delta: float

    @property
    def delta(self) -> float:
        """Inclusive instructions per call gained (negative: lost)."""
        return self.after - self.before


def function_diff(before: Profile, after: Profile, number_before: int, number_after: int | None = None,
                  *, limit: int = DIFF_FUNCTIONS) -> list[FunctionChange]:
    """The ``limit`` functions whose inclusive instructions per call grew most, largest first.

    ``before``/``after``: the baseline's and the current dump of one benchmark; ``number_*``: the
    calls each dump counted (per-call figures). Functions that only shrank are left out. Raises
    ``ValueError`` for a number below 1.
    """
    nb, na = number_before, number_after or number_before
    if nb < 1 or na < 1:
        raise ValueError(f"numbers of calls {nb!r}, {na!r}: expected >= 1")
    changes = []
    for name in set(before.inclusive) | set(after.inclusive):
        b, a = before.inclusive.get(name, 0) / nb, after.inclusive.get(name, 0) / na
        if a > b:
            changes.append(FunctionChange(name, b, a, after.self_cost.get(name, 0) / na - before.self_cost.get(name, 0) / nb,
                                          after.calls.get(name, 0) / na - before.calls.get(name, 0) / nb))
    changes.sort(key=lambda c: (-c.delta, c.name))
    return changes[:limit] if limit else changes


def grown_function(before: Profile, after: Profile, number_before: int, number_after: int | None = None,
                   *, share: float = 0.5) -> FunctionChange | None:
    """The function that grew: the most specific one carrying at least ``share`` of the growth.

    Among functions whose inclusive instructions per call grew by at least ``share`` of the whole
    dump's growth per call (the callers on the path to the change all qualify), the one with the
    smallest inclusive count now (the deepest on that path), preferring functions called at least
    half a time more per call (a structural change: the allocator's internal paths, which differ
    between processes, rarely are). None when the total did not grow. Raises ``ValueError`` as :func:`function_diff`.
    """
    na = number_after or number_before
    growth = after.total / na - before.total / number_before
    if growth <= 0:
        return None
    changes = [c for c in function_diff(before, after, number_before, na, limit=0) if c.delta >= share * growth]
    if not changes:
        return None
    return min(changes, key=lambda c: (c.calls_delta < 0.5, c.after, c.name))


def diff_text(changes: Sequence[FunctionChange], named: FunctionChange | None = None) -> str:
    """One line for a failure message: ``grew: at::add (+1,234 Ir/call, +1 call); ...``."""
    def one(c: FunctionChange) -> str:
        calls = f", {c.calls_delta:+g} calls" if c.calls_delta else ""
        return f"{c.name} (+{c.delta:,.0f} Ir/call{calls})"

    head = f"the function that grew: {one(named)}; " if named else ""
    return head + "grew most (inclusive): " + "; ".join(one(c) for c in changes)


def per_call_counts(profiles: Mapping[str, Profile], number: int, loop_name: str = "__loop__") -> dict[str, float]:
    """Instructions per call of every named dump of one worker, its empty loop subtracted.

    ``profiles``: dump name -> :class:`Profile` (the loop's dump included). Raises ``KeyError``
    when the loop's dump is missing.
    """
    loop = profiles[loop_name]
    return {name: per_call(p, loop, number) for name, p in profiles.items() if name != loop_name}
