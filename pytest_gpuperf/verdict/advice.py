"""What to do for a firmer verdict, as codes (pure: stdlib only).

The verdict layer decides; it does not know the command line. A decision step that has advice
for the reader (measure in more worker processes, record baselines on this machine kind...) puts
an :class:`Advice` code in :attr:`Comparison.advice <pytest_gpuperf.verdict.compare.Comparison>`
and leaves it out of :attr:`~pytest_gpuperf.verdict.compare.Comparison.note`;
:func:`pytest_gpuperf.reporting.messages.comparison_note` words each code with the option that
carries it out. A number that belongs to an advice is a field of the comparison itself (see
:attr:`Advice.MORE_PROCESSES`). The JSON form stores the codes by value
(:func:`pytest_gpuperf.storage.codec.comparison_to_dict`); a value this version does not know is
ignored when read back (:func:`advice_of`).
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Iterable


class Advice(str, Enum):
    """One piece of advice a verdict carries, for the reader to act on."""

    #: The verdict passes, but strict mode fails it: a regression that is not trusted (measured while
    #: the device throttled, or on a machine slower than the baselines') became inconclusive.
    STRICT = "strict"
    #: Too few samples for a statistical test: run a measuring session (not a smoke run).
    RUN_MEASURED = "run-measured"
    #: Inconclusive over the worker processes' medians: measure in more worker processes. How many
    #: measured it now is :attr:`Comparison.processes <pytest_gpuperf.verdict.compare.Comparison>`.
    MORE_PROCESSES = "more-processes"
    #: An A/B verdict that is inconclusive for want of paired blocks, or because the pairs of
    #: worker processes disagree: measure with more pairs of A/B worker processes.
    MORE_AB_PROCESSES = "more-ab-processes"
    #: The machine differs from the one that recorded the baselines: for a real verdict record
    #: baselines on this machine kind, or compare A/B on one machine.
    UPDATE_OR_AB = "update-or-ab"

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.value


def advice_of(values: Any) -> tuple[Advice, ...]:
    """The known :class:`Advice` codes among ``values`` (their JSON form: a list of strings), in
    order, without repeats; anything else (None, an unknown code from a newer version) is left out."""
    if not isinstance(values, (list, tuple)):
        return ()
    known = {a.value: a for a in Advice}
    return merge_advice(known[v] for v in values if isinstance(v, str) and v in known)


def merge_advice(*groups: Iterable[Advice]) -> tuple[Advice, ...]:
    """The codes of ``groups`` in order, each once."""
    return tuple(dict.fromkeys(a for g in groups for a in g))
