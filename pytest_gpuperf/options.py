"""Benchmark options: names, defaults, validation, and marker > CLI > ini > default resolution.

Pure: knows nothing of pytest or torch. The plugin feeds it the three sources as dicts.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping


class OptionError(ValueError):
    """A benchmark option has an unknown name or an invalid value (the message names both)."""


@dataclass(frozen=True)
class BenchOptions:
    """Resolved options of one benchmark. Times are in seconds, fractions are dimensionless.

    ``device`` is ``None`` for auto (CUDA when available), else ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
    ``memory_threshold`` is the relative growth of peak memory that fails a test (on top of 1 MiB of
    slack); ``max_memory`` a hard budget in bytes for the benchmarked call (``None``: no budget).
    ``expect_bottleneck`` the accepted bottleneck classes (``None``: no expectation).
    ``history`` the number of baseline runs kept per benchmark; ``confirm`` the number of extra
    measurements (from a fresh warmup) made when a first measurement says regressed.
    """

    group: str | None = None
    warmup_time: float = 0.025
    min_rounds: int = 10
    max_rounds: int = 10_000
    max_time: float = 1.0
    target_precision: float = 0.005
    threshold: float = 0.05
    alpha: float = 0.01
    flush_l2: bool = False
    cuda_graph: bool = False
    device: str | None = None
    memory_threshold: float = 0.02
    max_memory: int | None = None
    expect_bottleneck: tuple[str, ...] | None = None
    history: int = 10
    confirm: int = 1

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


OPTION_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(BenchOptions))

#: Options that also have a command-line flag ``--gpuperf-<name with dashes>``.
CLI_OPTIONS: tuple[str, ...] = ("threshold", "alpha", "max_time", "device", "confirm")

_DEVICE_RE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def _num(kind: type, check: Callable[[float], bool], accepted: str) -> Callable[[str, Any], Any]:
    def convert(name: str, value: Any) -> Any:
        if isinstance(value, bool):
            raise OptionError(f"{name}={value!r}: expected {accepted}")
        try:
            v = kind(value) if not isinstance(value, str) else kind(value.strip())
        except (TypeError, ValueError, OverflowError):
            raise OptionError(f"{name}={value!r}: expected {accepted}") from None
        if kind is int and not isinstance(value, str) and v != value:
            raise OptionError(f"{name}={value!r}: expected {accepted}")
        if not math.isfinite(v) or not check(v):  # inf would silently disable a gate or a budget
            raise OptionError(f"{name}={value!r}: expected {accepted}")
        return v

    return convert


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("0", "false", "no", "off"):
        return False
    raise OptionError(f"{name}={value!r}: expected true or false")


def _group(name: str, value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value or None
    raise OptionError(f"{name}={value!r}: expected a group name (string)")


def _device(name: str, value: Any) -> str | None:
    if value is None:
        return None
    s = str(value).strip().lower()
    if not _DEVICE_RE.match(s):
        raise OptionError(f"{name}={value!r}: expected auto, cpu, cuda or cuda:N")
    return None if s == "auto" else s


def _size(name: str, value: Any) -> int | None:
    if value is None:
        return None
    from .units import parse_size

    try:
        return parse_size(value)
    except ValueError as exc:
        raise OptionError(f"{name}={value!r}: {exc}") from None


def _expect(name: str, value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    from .bottleneck import check_expected

    try:
        return check_expected(value, name)
    except ValueError as exc:
        raise OptionError(str(exc)) from None


_CONVERTERS: dict[str, Callable[[str, Any], Any]] = {
    "group": _group,
    "warmup_time": _num(float, lambda v: v >= 0, "a number of seconds >= 0"),
    "min_rounds": _num(int, lambda v: v >= 1, "an integer >= 1"),
    "max_rounds": _num(int, lambda v: v >= 1, "an integer >= 1"),
    "max_time": _num(float, lambda v: v > 0, "a number of seconds > 0"),
    "target_precision": _num(float, lambda v: 0 <= v < 1, "a fraction in [0, 1), 0 disables"),
    "threshold": _num(float, lambda v: v >= 0, "a fraction >= 0 (0.05 = 5%)"),
    "alpha": _num(float, lambda v: 0 < v < 1, "a significance level in (0, 1)"),
    "flush_l2": _bool,
    "cuda_graph": _bool,
    "device": _device,
    "memory_threshold": _num(float, lambda v: v >= 0, "a fraction >= 0 (0.02 = 2%)"),
    "max_memory": _size,
    "expect_bottleneck": _expect,
    "history": _num(int, lambda v: v >= 1, "an integer >= 1"),
    "confirm": _num(int, lambda v: v >= 0, "an integer >= 0"),
}
assert set(_CONVERTERS) == set(OPTION_NAMES)


def check_names(options: Mapping[str, Any], where: str) -> None:
    """Raise :class:`OptionError` naming the first unknown option and listing the valid ones."""
    for key in options:
        if key not in _CONVERTERS:
            raise OptionError(
                f"{where}: unknown gpu_bench option {key!r}; valid options are: "
                + ", ".join(OPTION_NAMES)
            )


def convert(name: str, value: Any, where: str = "") -> Any:
    """Validate and convert one option value (strings from ini files are accepted)."""
    if name not in _CONVERTERS:
        check_names({name: value}, where or "option")
    try:
        return _CONVERTERS[name](name, value)
    except OptionError as exc:
        raise OptionError(f"{where}: {exc}" if where else str(exc)) from None


def resolve(
    marker: Mapping[str, Any] | None = None,
    cli: Mapping[str, Any] | None = None,
    ini: Mapping[str, Any] | None = None,
    *,
    where: str = "gpu_bench marker",
) -> BenchOptions:
    """Merge option sources; the first that sets an option wins: marker, CLI, ini, default.

    ``None`` values in ``cli`` and ``ini`` mean "not set". Raises :class:`OptionError` for an
    unknown name (in ``marker``) or a bad value, naming the source.
    """
    marker = dict(marker or {})
    check_names(marker, where)
    values: dict[str, Any] = {}
    for source, label in ((ini or {}, "ini"), (cli or {}, "command line"), (marker, where)):
        for name, value in source.items():
            if value is None and source is not marker:
                continue
            values[name] = convert(name, value, label if source is marker else f"{label} {name}")
    opts = BenchOptions(**values)
    if opts.max_rounds < opts.min_rounds:
        raise OptionError(
            f"{where}: max_rounds={opts.max_rounds} is smaller than min_rounds={opts.min_rounds}"
        )
    return opts
