"""Human-readable units for durations (pure, no dependencies)."""

from __future__ import annotations

import math

_TIME_UNITS = (("s", 1e3), ("ms", 1.0), ("µs", 1e-3), ("ns", 1e-6))


def time_unit_for(ms: float) -> tuple[str, float]:
    """Pick the unit (``s``, ``ms``, ``µs`` or ``ns``) in which ``ms`` reads as >= 1.

    Returns ``(unit, scale_ms)``: a value in that unit is ``ms / scale_ms``.
    """
    if not math.isfinite(ms) or ms == 0:
        return ("ms", 1.0)
    for unit, scale in _TIME_UNITS:
        if abs(ms) >= scale:
            return (unit, scale)
    return _TIME_UNITS[-1]


def format_ms(ms: float | None, digits: int = 4) -> str:
    """Format a duration given in milliseconds with a unit chosen for it: ``1.234 ms``, ``3.10 µs``."""
    if ms is None or (isinstance(ms, float) and math.isnan(ms)):
        return "-"
    unit, scale = time_unit_for(ms)
    return f"{ms / scale:.{digits}g} {unit}"


def format_ratio(ratio: float | None) -> str:
    """Format a current/baseline ratio as ``1.043x``."""
    if ratio is None or math.isnan(ratio):
        return "-"
    return f"{ratio:.3f}x"


def format_pct(fraction: float) -> str:
    """Format a signed relative change ``ratio - 1`` as ``+4.3%``."""
    return f"{fraction * 100:+.1f}%"
