"""Scaling efficiency of one benchmark recorded at several world sizes (pure; issue 35, item 5).

A distributed benchmark run under ``torchrun`` with ``WORLD_SIZE=N`` stores its baselines in the
folder ``<device key>-wsN`` (a run without torchrun: ``<device key>``, world size 1). Given the
benchmark's median per-call time at each world size (ms), this module computes the **speedup**
and the **efficiency** at each N relative to the smallest world size recorded, ``N0`` (normally
1), with ``T_N`` the median at N ranks (ms, the slowest rank's time of a round: what a
synchronous step costs):

* **strong scaling** (the same whole problem split over the ranks: Amdahl's law, the fixed-size
  speedup of Amdahl 1967 and of Kumar et al., *Introduction to Parallel Computing*, 2003, ch. 5):
  speedup ``S_N = T_N0 / T_N``, efficiency ``E_N = (N0 * T_N0) / (N * T_N)``, which with
  ``N0 = 1`` is the textbook ``T1 / (N * TN)``. Perfect scaling: ``TN = T1 / N``, ``E = 1``.
* **weak scaling** (the same work *per rank*: the problem grows with N, Gustafson's law,
  Gustafson 1988, "Reevaluating Amdahl's law"): efficiency ``E_N = T_N0 / T_N`` (``T1 / TN``), and
  the scaled speedup ``S_N = (N / N0) * T_N0 / T_N`` (N times the work done in ``T_N``). Perfect
  scaling: ``TN = T1``, ``E = 1``.

In both kinds ``E_N = S_N * N0 / N`` (dimensionless; 1 at N0; above 1 is superlinear, e.g. a
problem that fits in cache once split). The kind is the benchmark's ``scaling`` option, and the
optional gate its ``min_scaling_efficiency`` (:class:`ScalingCheck`).

Used by ``gpuperf scaling`` (:func:`scaling_table`, :func:`split_world_size`) and by the plugin's
gate under torchrun (:class:`ScalingCheck`, :func:`reference_world_size`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

#: The kinds of scaling (the ``scaling`` option's values).
KINDS = ("strong", "weak")

_WS_SUFFIX = re.compile(r"^(?P<base>.+)-ws(?P<n>[1-9][0-9]*)$")


def _check(kind: str, world_size: int, median_ms: float) -> None:
    if kind not in KINDS:
        raise ValueError(f"scaling kind {kind!r}: expected one of {', '.join(KINDS)}")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world size {world_size!r}: expected an integer >= 1")
    if not (isinstance(median_ms, (int, float)) and median_ms > 0 and math.isfinite(median_ms)):
        raise ValueError(f"median {median_ms!r} ms at world size {world_size}: expected a positive finite number")


def speedup(kind: str, reference_world_size: int, reference_ms: float, world_size: int, median_ms: float) -> float:
    """The speedup at ``world_size`` ranks (median ``median_ms``, ms) over ``reference_world_size``
    ranks (median ``reference_ms``, ms), dimensionless: strong ``T_N0 / T_N``, weak (scaled speedup)
    ``(N / N0) * T_N0 / T_N``. Raises ``ValueError`` for an unknown kind, a world size below 1 or a
    median that is not a positive finite number."""
    _check(kind, reference_world_size, reference_ms)
    _check(kind, world_size, median_ms)
    ratio = reference_ms / median_ms
    return ratio if kind == "strong" else ratio * world_size / reference_world_size


def efficiency(kind: str, reference_world_size: int, reference_ms: float, world_size: int, median_ms: float) -> float:
    """The scaling efficiency at ``world_size`` ranks relative to ``reference_world_size`` ranks
    (medians in ms), dimensionless: strong ``(N0 * T_N0) / (N * T_N)``, weak ``T_N0 / T_N``; 1 is
    perfect. Raises ``ValueError`` as :func:`speedup`."""
    return (speedup(kind, reference_world_size, reference_ms, world_size, median_ms)
            * reference_world_size / world_size)


def formula(kind: str, reference_world_size: int = 1) -> str:
    """The efficiency's formula in words: ``"T1 / (N·TN)"`` (strong), ``"T1 / TN"`` (weak); with
    another reference world size ``N0``, ``"(2·T2) / (N·TN)"`` and ``"T2 / TN"``."""
    n0 = reference_world_size
    if kind == "weak":
        return f"T{n0} / TN"
    return "T1 / (N·TN)" if n0 == 1 else f"({n0}·T{n0}) / (N·TN)"


@dataclass(frozen=True)
class ScalingPoint:
    """One row of a scaling table: ``world_size`` (ranks), ``median_ms`` (ms), ``speedup`` and
    ``efficiency`` (dimensionless) relative to the table's smallest world size."""

    world_size: int
    median_ms: float
    speedup: float
    efficiency: float


def scaling_table(medians_ms: Mapping[int, float], kind: str = "strong") -> tuple[ScalingPoint, ...]:
    """The scaling table of one benchmark: ``medians_ms`` maps a world size to its median (ms);
    one :class:`ScalingPoint` per world size, ascending, relative to the smallest (its own row has
    speedup and efficiency 1). Raises ``ValueError`` for no medians, an unknown kind, a world size
    below 1 or a median that is not a positive finite number."""
    if not medians_ms:
        raise ValueError("no medians: a scaling table needs at least one world size")
    sizes = sorted(medians_ms)
    n0, t0 = sizes[0], float(medians_ms[sizes[0]])
    return tuple(ScalingPoint(n, float(medians_ms[n]), speedup(kind, n0, t0, n, float(medians_ms[n])),
                              efficiency(kind, n0, t0, n, float(medians_ms[n]))) for n in sizes)


def world_size_suffix(world_size: int) -> str:
    """What a baseline folder's device key gets under torchrun with ``world_size`` ranks (``-ws4``;
    :func:`split_world_size` reads it back), so that 2-rank and 8-rank baselines never mix."""
    return f"-ws{world_size}"


def split_world_size(device_key: str) -> tuple[str, int]:
    """A baseline folder's device key split into ``(key without the -wsN suffix, N)``:
    ``"cpu-amd-epyc-ws4"`` -> ``("cpu-amd-epyc", 4)``, ``"cpu-amd-epyc"`` -> ``("cpu-amd-epyc", 1)``
    (a run without torchrun is world size 1)."""
    m = _WS_SUFFIX.match(device_key)
    return (m.group("base"), int(m.group("n"))) if m else (device_key, 1)


def reference_world_size(available: Iterable[int], world_size: int) -> int | None:
    """The world size to compare a run at ``world_size`` ranks with: the smallest of ``available``
    (world sizes with a stored baseline) below ``world_size``, normally 1; None when there is none."""
    smaller = [n for n in available if n < world_size]
    return min(smaller) if smaller else None


@dataclass(frozen=True)
class ScalingCheck:
    """This run's scaling efficiency against a stored baseline at a smaller world size.

    ``kind``: ``"strong"`` or ``"weak"``; ``world_size``/``median_ms``: this run (ranks, ms);
    ``reference_world_size``/``reference_ms``/``reference_file``: the baseline's (ranks, ms, the
    file it came from); ``minimum``: the ``min_scaling_efficiency`` option (None: reported, not
    gated). Raises ``ValueError`` (at construction) for an unknown kind, a bad world size or median.
    """

    kind: str
    world_size: int
    median_ms: float
    reference_world_size: int
    reference_ms: float
    reference_file: str = ""
    minimum: float | None = None

    def __post_init__(self) -> None:
        _ = self.efficiency  # raises ValueError for a bad kind, world size or median

    @property
    def efficiency(self) -> float:
        """:func:`efficiency` of this run against the reference (dimensionless)."""
        return efficiency(self.kind, self.reference_world_size, self.reference_ms, self.world_size, self.median_ms)

    @property
    def failed(self) -> bool:
        """Whether the efficiency is below ``minimum`` (never without one)."""
        return self.minimum is not None and self.efficiency < self.minimum

    def message(self) -> str:
        """``scaling efficiency 0.62 at 2 ranks (strong: T1 / (N·TN), T1 = 2.000 ms from F, T2 = 1.613 ms)``
        followed by ``is below min_scaling_efficiency=0.8`` when it fails (else ``meets …`` or nothing)."""
        n0, n = self.reference_world_size, self.world_size
        where = f" from {self.reference_file}" if self.reference_file else ""
        text = (f"scaling efficiency {self.efficiency:.2f} at {n} ranks ({self.kind}: {formula(self.kind, n0)}, "
                f"T{n0} = {self.reference_ms:.3f} ms{where}, T{n} = {self.median_ms:.3f} ms)")
        if self.minimum is None:
            return text
        return f"{text} {'is below' if self.failed else 'meets'} min_scaling_efficiency={self.minimum:g}"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (a report entry's ``scaling``): ``{"kind", "world_size", "median_ms",
        "reference_world_size", "reference_ms", "reference_file", "efficiency", "min_efficiency"}``."""
        return {"kind": self.kind, "world_size": self.world_size, "median_ms": self.median_ms,
                "reference_world_size": self.reference_world_size, "reference_ms": self.reference_ms,
                "reference_file": self.reference_file, "efficiency": self.efficiency,
                "min_efficiency": self.minimum}

    @classmethod
    def from_dict(cls, d: Any) -> "ScalingCheck | None":
        """An entry's ``scaling`` (see :meth:`to_dict`); None when absent or unreadable."""
        if not isinstance(d, Mapping):
            return None
        try:
            minimum = d.get("min_efficiency")
            return cls(str(d["kind"]), int(d["world_size"]), float(d["median_ms"]), int(d["reference_world_size"]),
                       float(d["reference_ms"]), str(d.get("reference_file") or ""),
                       None if minimum is None else float(minimum))
        except (KeyError, TypeError, ValueError):
            return None


def not_applied_note(world_size: int, minimum: float, folder: str) -> str:
    """Why ``min_scaling_efficiency`` could not be applied at ``world_size`` ranks: no baseline of
    the benchmark at a smaller world size (``folder``: the world-size-1 baseline folder,
    ``baselines/<device key>``, as messages show it)."""
    return (f"min_scaling_efficiency={minimum:g} not applied at {world_size} ranks: no baseline at a smaller world "
            f"size (record one in {folder}/ by updating the baselines without torchrun, or in "
            f"{folder}-wsM/ with fewer ranks); the test passes")


def scaling_of(kind: str, minimum: float | None, world_size: int, median_ms: float,
               reference: tuple[int, float, str] | None, folder: str) -> tuple[ScalingCheck | None, str | None]:
    """A run's scaling check and the note to give: ``(check, None)`` with a ``reference`` (``(its
    world size, its stored median in ms, its file)``, from the smallest smaller world size
    recorded); without one ``(None, note)`` when ``minimum`` (``min_scaling_efficiency``) was asked
    for (:func:`not_applied_note`; ``folder``: the world-size-1 baseline folder as shown), else
    ``(None, None)``. ``median_ms``: this run's median at ``world_size`` ranks. Raises
    ``ValueError`` as :class:`ScalingCheck` does."""
    if reference is None:
        return None, (not_applied_note(world_size, minimum, folder) if minimum is not None else None)
    n0, ms0, file = reference
    return ScalingCheck(kind, world_size, median_ms, n0, ms0, file, minimum), None
