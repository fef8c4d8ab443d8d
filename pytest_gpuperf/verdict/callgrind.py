"""A reader of callgrind's output files (issue 48): totals and per-function counts of one dump.

Pure: text in, :class:`Profile` out; no torch, pytest, numpy. The format is valgrind's "Callgrind
Format Specification" (docs/cl-format.html in valgrind's manual): header lines (``events:``,
``summary:``, ``totals:``, ``desc: Trigger: ...``), then cost lines grouped under ``fn=``. A cost
line under ``fn=`` is the function's own (exclusive) cost; ``calls=<n> <target>`` followed by one
cost line is a call of ``cfn=`` (``n`` times) and that cost is the call's inclusive cost. Names are
compressed: ``fn=(12) name`` defines id 12, a later ``fn=(12)`` refers to it (the same for ``cfn``,
which shares the ``fn`` ids).

The inclusive count of a function here is its own cost plus the inclusive costs of the calls it
makes, as ``callgrind_annotate --inclusive=yes`` computes it: a function that calls itself
(recursion through C, e.g. ``_PyEval_EvalFrameDefault`` via a C call back into Python) counts its
nested part more than once, so inclusive counts can exceed the total; the diff of two dumps of
the same code is still meaningful, since both over-count alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

_NAME = re.compile(r"^\((\d+)\)(?:\s(.*))?$")


@dataclass(frozen=True)
class Profile:
    """One callgrind dump, in instructions (``Ir``) over everything counted in it.

    ``total``: the dump's ``totals:`` (else ``summary:``, else the sum of all own costs);
    ``trigger``: its ``desc: Trigger:`` text (``Client Request: <name>`` for a named dump);
    ``self_cost`` / ``inclusive``: per function name, own and inclusive instructions; ``calls``:
    per function name, how many calls into it were counted (calls from uncounted code are not).
    """

    total: int
    trigger: str = ""
    self_cost: dict[str, int] = field(default_factory=dict)
    inclusive: dict[str, int] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The dump's name: what ``CALLGRIND_DUMP_STATS_AT`` was given, else the trigger text."""
        prefix = "Client Request: "
        return self.trigger[len(prefix):] if self.trigger.startswith(prefix) else self.trigger


def _resolve(value: str, table: dict[str, str]) -> str:
    """A compressed name ``(id) name`` / ``(id)`` to its name (defining the id when given)."""
    m = _NAME.match(value.strip())
    if not m:
        return value.strip()
    ident, name = m.group(1), m.group(2)
    if name is not None:
        table[ident] = name
        return name
    if ident not in table:
        raise ValueError(f"callgrind output refers to name id ({ident}) before defining it")
    return table[ident]


def _first_cost(line: str) -> int:
    """The first event's cost (``Ir``) of a cost line ``<position(s)> <cost>...`` (0 when absent)."""
    parts = line.split()
    return int(parts[1]) if len(parts) > 1 else 0


def parse_callgrind(text: str | Iterable[str]) -> Profile:
    """Parse one callgrind output file's text into a :class:`Profile` (counts in ``Ir``, instructions).

    Expects one position column (``positions: line``, callgrind's default, or ``instr`` alone)
    and ``Ir`` as the first event. Raises ``ValueError`` for a file that is not callgrind output
    (no ``events:`` line), whose first event is not ``Ir``, or that refers to an undefined name id.
    """
    lines = text.splitlines() if isinstance(text, str) else [ln.rstrip("\n") for ln in text]
    fn_names: dict[str, str] = {}
    own: dict[str, int] = {}
    incl: dict[str, int] = {}
    calls: dict[str, int] = {}
    events, total, summary, trigger = None, None, None, ""
    fn, callee, pending_calls = None, None, 0
    for line in lines:
        if not line or line[0] == "#":
            continue
        if line[0].isdigit() or line[0] in "+-*":
            if fn is None:
                continue
            cost = _first_cost(line)
            if pending_calls:
                incl[fn] = incl.get(fn, 0) + cost
                calls[callee] = calls.get(callee, 0) + pending_calls  # type: ignore[index]
                pending_calls = 0
            else:
                own[fn] = own.get(fn, 0) + cost
                incl[fn] = incl.get(fn, 0) + cost
            continue
        key, _, value = line.partition("=") if "=" in line.split(":", 1)[0] else line.partition(":")
        key = key.strip()
        if key == "fn":
            fn = _resolve(value, fn_names)
        elif key == "cfn":
            callee = _resolve(value, fn_names)
        elif key == "calls":
            pending_calls = int(value.split()[0])
        elif key == "events":
            events = value.split()
        elif key == "totals":
            total = int(value.split()[0])
        elif key == "summary":
            summary = int(value.split()[0])
        elif key == "desc" and value.strip().startswith("Trigger:"):
            trigger = value.strip()[len("Trigger:"):].strip()
    if events is None:
        raise ValueError("not callgrind output: no 'events:' line")
    if events[0] != "Ir":
        raise ValueError(f"callgrind output's first event is {events[0]!r}, expected 'Ir'")
    counted = total if total is not None else summary if summary is not None else sum(own.values())
    return Profile(counted, trigger, own, incl, calls)
