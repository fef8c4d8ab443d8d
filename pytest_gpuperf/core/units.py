"""Human-readable units for durations (pure, no dependencies)."""

from __future__ import annotations

import re

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


# ----------------------------------------------------------------------------- sizes

#: Accepted size units and their multipliers: SI (powers of 10^3) and IEC (powers of 2^10).
SIZE_UNITS = {
    "B": 1,
    "kB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
}

#: A size written as text: sign, number, exponent, unit (groups 1-4), spaces allowed around.
_SIZE_RE = re.compile(r"\s*([+-]?)(\d+(?:\.\d*)?|\.\d+)(?:[eE]([+-]?\d+))?\s*([A-Za-z]*)\s*")

_SIZE_HELP = (
    "a size is an int number of bytes or a string with a unit: '512 B', '1.5 GiB', '800MB'; "
    "units: B, kB, MB, GB, TB (powers of 1000) and KiB, MiB, GiB, TiB (powers of 1024)"
)


def parse_size(value: "int | str") -> int:
    """Parse a memory size into bytes (int).

    Accepts an ``int`` (bytes, >= 0) or a string of a non-negative decimal number and a unit,
    with an optional space: ``"1.5 GiB"``, ``"800MB"``, ``"64 KiB"``, ``"12 B"``. SI units
    (``kB``, ``MB``, ``GB``, ``TB``) are powers of 10^3, IEC units (``KiB``, ``MiB``, ``GiB``,
    ``TiB``) powers of 2^10; units are case-sensitive. Fractional byte counts round to the
    nearest byte. Raises ``ValueError`` listing the accepted forms for a string without a unit,
    an unknown unit, a negative size, a float, a bool, or anything else.
    """
    import numbers

    if isinstance(value, bool):
        raise ValueError(f"invalid size {value!r}: {_SIZE_HELP}")
    if isinstance(value, numbers.Integral):
        if value < 0:
            raise ValueError(f"invalid size {value!r}: negative; {_SIZE_HELP}")
        return int(value)
    if not isinstance(value, str):
        raise ValueError(f"invalid size {value!r} ({type(value).__name__}): {_SIZE_HELP}")
    m = _SIZE_RE.fullmatch(value)
    if not m:
        raise ValueError(f"invalid size {value!r}: {_SIZE_HELP}")
    sign, number, exponent, unit = m.groups()
    if sign == "-":
        raise ValueError(f"invalid size {value!r}: negative; {_SIZE_HELP}")
    if not unit:
        raise ValueError(f"invalid size {value!r}: no unit; {_SIZE_HELP}")
    if unit not in SIZE_UNITS:
        raise ValueError(f"invalid size {value!r}: unknown unit {unit!r}; {_SIZE_HELP}")
    from decimal import Decimal, localcontext

    try:
        with localcontext() as ctx:
            ctx.prec = 60
            amount = Decimal(number) * (Decimal(10) ** int(exponent or 0)) * SIZE_UNITS[unit]
            return int(amount.to_integral_value())
    except ArithmeticError:
        raise ValueError(f"invalid size {value!r}: too large; {_SIZE_HELP}") from None


_IEC = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def byte_unit_for(n: float) -> tuple[str, int]:
    """The IEC unit in which ``n`` bytes reads as >= 1 (``B`` below 1 KiB): ``(unit, bytes per unit)``."""
    for unit, scale in _IEC:
        if abs(n) >= scale:
            return unit, scale
    return "B", 1


_SI = (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3))


def si_scaled(value: float) -> "tuple[float, str]":
    """``(value / scale, prefix)`` with the largest decimal SI prefix (k, M, G, T, P) not above
    ``abs(value)``; ``(value, "")`` below 1000."""
    for prefix, scale in _SI:
        if abs(value) >= scale:
            return value / scale, prefix
    return value, ""


def format_si(value: float, unit: str) -> str:
    """``1.23 GFLOP``: ``value`` with a decimal SI prefix (k, M, G, T, P) and 3 significant digits."""
    scaled, prefix = si_scaled(value)
    return f"{scaled:.3g} {prefix}{unit}"


def format_bytes(n: "int | float | None", unit: "str | None" = None) -> str:
    """Format a byte count in IEC units: ``812 MiB``, ``1.72 GiB``, ``512 B``.

    ``unit`` forces a unit from :data:`SIZE_UNITS` (used to print several sizes alike).
    Three significant digits, at most two decimals.
    """
    if n is None:
        return "-"

    def render(u: str, scale: int) -> tuple[str, float]:
        v = n / scale
        if u == "B":
            return f"{round(n)} B", float(round(n))
        digits = 0 if abs(v) >= 99.95 else 1 if abs(v) >= 9.995 else 2
        return f"{v:.{digits}f} {u}", round(v, digits)

    if unit is not None:
        return render(unit, SIZE_UNITS[unit])[0]
    unit, scale = byte_unit_for(n)
    text, shown = render(unit, scale)
    if abs(shown) >= 1024 and unit != "TiB":  # rounding reached the next unit: 1024 KiB -> 1.00 MiB
        bigger = {"B": "KiB", "KiB": "MiB", "MiB": "GiB", "GiB": "TiB"}[unit]
        text = render(bigger, SIZE_UNITS[bigger])[0]
    return text


def size_unit(value: "int | str | None") -> "str | None":
    """The unit a size was written in: ``"100 kB"`` -> ``"kB"``; None for an int or an unparsable value.

    Used to report a budget in the unit its author chose (``max_memory="100 kB"`` reads ``100 kB``,
    not ``97.66 KiB``).
    """
    if not isinstance(value, str):
        return None
    m = _SIZE_RE.fullmatch(value)
    return m.group(4) if m and m.group(1) != "-" and m.group(4) in SIZE_UNITS else None


def shorten_middle(text: str, width: int = 70) -> str:
    """``text`` cut in the middle to at most ``width`` characters (``"tests/a...b[case]"``), else unchanged."""
    if len(text) <= width:
        return text
    keep = width - 3
    return text[: (keep + 1) // 2] + "..." + text[len(text) - keep // 2:]


#: Where :func:`shorten_name` may cut a benchmark's name: after one of these characters.
_NAME_SEPARATORS = "/:._-[]"


def shorten_name(text: str, width: int = 70) -> str:
    """A benchmark's name (``path::test_id[case]``) cut to at most ``width`` characters at its
    separators (``/ : . _ - [ ]``), not in the middle of a word: the test's id kept whole where it
    fits (the notes and messages name it so), as much of the path before it as fits, ``...``
    between (``"tests/perf...::test_tmul_chain"``); a name whose separators leave too little falls
    back to :func:`shorten_middle`."""
    if len(text) <= width:
        return text
    keep = width - 3
    cuts = [i for i in range(1, len(text)) if text[i - 1] in _NAME_SEPARATORS]
    tails = [i for i in cuts if len(text) - i <= keep and text[i - 1] != "." and text[i] != ":"]
    if keep < 8 or not tails:
        return shorten_middle(text, width)
    test_id = text.rfind("::") + 2 if "::" in text else len(text)
    whole = [i for i in tails if i <= test_id]
    tail = max(whole) if whole else min(tails)
    head = max([i for i in cuts if i <= keep - (len(text) - tail)], default=0)
    tail = min(i for i in tails if i >= head and len(text) - i <= keep - head)
    out = text[:head] + "..." + text[tail:]
    return out if len(out) >= width - width // 4 else shorten_middle(text, width)
