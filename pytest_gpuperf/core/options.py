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
    ``counts`` switches the count gate (ops, kernels, syncs, copies, FLOPs, bytes, recompiles
    per call; see :mod:`pytest_gpuperf.verdict.counts`) on or off; ``count_tolerance`` is the relative
    slack above a stored count before it fails (0: exact); ``max_ops``/``max_kernels``/
    ``max_syncs``/``max_recompiles`` are declared budgets (``None``: none). ``items_per_call`` is
    the work one call does in ``items`` (e.g. 64 "samples"), reported as items/s. ``processes``:
    how many of the session's worker processes measure this benchmark (None: all of them, see
    ``--gpuperf-processes``; at most the session's number). ``scaling``: how the benchmark's work
    changes with the ranks under ``torchrun`` (``"strong"``: the same problem split over them;
    ``"weak"``: the same work per rank), for its scaling efficiency; ``min_scaling_efficiency``: the
    lowest efficiency (a fraction in (0, 1]) a run at N ranks may have against the baseline at a
    smaller world size (None: no gate; see :mod:`pytest_gpuperf.verdict.scaling`). ``collective`` (one of
    :data:`COLLECTIVES`) and ``bytes_per_call`` (bytes, nccl-tests' size S) declare a benchmark of
    a bare collective: under torchrun its algorithm and bus bandwidth (GB/s) are reported.
    ``instructions``: also count the host's instructions per call under valgrind's callgrind and
    gate them against the baseline's (:mod:`pytest_gpuperf.verdict.instructions`; one valgrind
    worker process per session, after the timed ones). ``steady_clock``: on CUDA, after the warmup,
    call on for at most this many seconds until the GPU's SM clock stops moving (sustained rather
    than burst speed; 0: off; see :mod:`pytest_gpuperf.measure.gpuclock`).
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
    counts: bool = True
    count_tolerance: float = 0.0
    max_ops: int | None = None
    max_kernels: int | None = None
    max_syncs: int | None = None
    max_recompiles: int | None = None
    items_per_call: float | None = None
    items: str = "items"
    processes: int | None = None
    scaling: str = "strong"
    min_scaling_efficiency: float | None = None
    collective: str | None = None
    bytes_per_call: int | None = None
    instructions: bool = False
    steady_clock: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


OPTION_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(BenchOptions))

#: The defaults, from the one place they are written (the dataclass above).
DEFAULTS = BenchOptions()

#: Worker processes per benchmark when nothing says otherwise (``--gpuperf-processes``; the
#: marker's ``processes`` takes at most that many).
DEFAULT_PROCESSES = 3

#: The accepted values of ``collective`` (nccl-tests' collectives; the bus-bandwidth factors are
#: :data:`pytest_gpuperf.verdict.communication.BUS_FACTORS`).
COLLECTIVES: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
                                "send_recv")

#: The default ``threshold`` of a benchmark measured on the CPU (issue 45), where none of the marker,
#: the command line and the ini file sets one (:func:`for_device`); CUDA keeps :data:`DEFAULTS`'
#: 0.05. asv's ``--factor`` defaults to 1.1 for the same reason: a CPU shared with other jobs moves
#: by more than 5% between processes, and a gate at 5% there mostly answers "inconclusive"
#: (measured on three real suites in docs/verdicts.md, "The CPU's default threshold").
CPU_THRESHOLD = 0.10

#: One line of help per option (plain text: ``%`` is literal), with the default from :data:`DEFAULTS`.
OPTION_HELP: dict[str, str] = {
    "group": "group name shown in the summary table",
    "warmup_time": f"seconds of warmup before timing (at least 3 calls; default {DEFAULTS.warmup_time:g})",
    "min_rounds": f"minimum timed rounds (default {DEFAULTS.min_rounds})",
    "max_rounds": f"maximum timed rounds (default {DEFAULTS.max_rounds})",
    "max_time": f"seconds of timed rounds per benchmark (default {DEFAULTS.max_time:g})",
    "target_precision": "stop early when the 95% CI half-width of the median is below this fraction "
                        f"(default {DEFAULTS.target_precision:g}; 0 disables)",
    "threshold": f"smallest relative slowdown that fails a test (default {DEFAULTS.threshold:g} = "
                 f"{DEFAULTS.threshold * 100:g}% on CUDA, {CPU_THRESHOLD:g} = {CPU_THRESHOLD * 100:g}% on the CPU)",
    "alpha": f"significance level of the one-sided Mann-Whitney U test (default {DEFAULTS.alpha:g})",
    "flush_l2": "CUDA: overwrite a buffer of twice the L2 size before each timed call (default false)",
    "cuda_graph": "CUDA: capture the call in a CUDA graph and time replays (default false)",
    "device": "auto, cpu, cuda or cuda:N (default auto: CUDA when available)",
    "memory_threshold": f"relative growth of peak memory (plus 1 MiB) that fails a test (default {DEFAULTS.memory_threshold:g})",
    "max_memory": "hard budget for the benchmarked call's peak memory, e.g. '2 GiB' (default none)",
    "expect_bottleneck": "expected bottleneck class(es): compute, memory, overhead, sync, transfer, data",
    "history": f"baseline runs kept per benchmark (default {DEFAULTS.history})",
    "confirm": f"extra measurements when a first one says regressed (default {DEFAULTS.confirm})",
    "counts": "count ops, kernels, syncs, copies, FLOPs, bytes and recompiles per call in one extra call "
              "and gate them against the baseline's (default true)",
    "count_tolerance": f"relative slack above a stored count before it fails (default {DEFAULTS.count_tolerance:g}: exact)",
    "max_ops": "budget: most aten ops per call (default none)",
    "max_kernels": "budget: most CUDA kernel launches per call (default none)",
    "max_syncs": "budget: most host-device synchronisations per call, e.g. 0 (default none)",
    "max_recompiles": "budget: most torch.compile recompilations after the first call (default none)",
    "items_per_call": "work one call does, e.g. 64 (reported as items/s; default none)",
    "items": f"name of the items_per_call unit, e.g. samples or tokens (default {DEFAULTS.items!r})",
    "processes": f"worker processes that measure a benchmark (at most --gpuperf-processes, default {DEFAULT_PROCESSES}; "
                 "1: one process, which cannot see run-to-run spread)",
    "scaling": "under torchrun: strong (the same problem split over the ranks: efficiency T1 / (N·TN)) or weak "
               "(the same work per rank: T1 / TN) (default strong)",
    "min_scaling_efficiency": "under torchrun: fail when the scaling efficiency against the baseline at a smaller "
                              "world size is below this fraction in (0, 1], e.g. 0.8 (default none)",
    "collective": "under torchrun, a benchmark of one bare collective: " + ", ".join(COLLECTIVES)
                  + " (reports algbw and busbw with bytes_per_call; default none)",
    "bytes_per_call": "bytes one call of the collective moves, e.g. '64 MiB' (nccl-tests' size; default none)",
    "instructions": "count the host's instructions per call under valgrind's callgrind, in one valgrind worker "
                    "process after the timed ones, and gate them against the baseline's (default false)",
    "steady_clock": "CUDA: after the warmup, call on for at most this many seconds until the SM clock stops moving "
                    f"(sustained rather than burst speed; default {DEFAULTS.steady_clock:g}: off)",
}

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
    from pytest_gpuperf.core.units import parse_size

    try:
        return parse_size(value)
    except ValueError as exc:
        raise OptionError(f"{name}={value!r}: {exc}") from None


def _budget(name: str, value: Any) -> int | None:
    if value is None or (isinstance(value, str) and value.strip().lower() == "none"):
        return None
    return _num(int, lambda v: v >= 0, "an integer >= 0 (or none)")(name, value)


def _items_per_call(name: str, value: Any) -> float | None:
    if value is None:
        return None
    return _num(float, lambda v: v > 0, "a number > 0 (the work one call does)")(name, value)


def _items(name: str, value: Any) -> str:
    if isinstance(value, str) and value.strip() and "/" not in value:
        return value.strip()
    raise OptionError(f"{name}={value!r}: expected the name of a unit, e.g. 'samples' or 'tokens'")


def _scaling(name: str, value: Any) -> str:
    if isinstance(value, str) and value.strip().lower() in ("strong", "weak"):
        return value.strip().lower()
    raise OptionError(f"{name}={value!r}: expected 'strong' (the same problem split over the ranks) or "
                      f"'weak' (the same work per rank)")


def _min_efficiency(name: str, value: Any) -> float | None:
    if value is None or (isinstance(value, str) and value.strip().lower() == "none"):
        return None
    return _num(float, lambda v: 0 < v <= 1, "a fraction in (0, 1], e.g. 0.8 (or none)")(name, value)
def _bytes_per_call(name: str, value: Any) -> int | None:
    size = _size(name, value)
    if size == 0:
        raise OptionError(f"{name}={value!r}: expected a size > 0, e.g. 1048576 or '64 MiB'")
    return size


def _collective(name: str, value: Any) -> str | None:
    if value is None:
        return None
    s = str(value).strip().lower().replace("-", "_") if isinstance(value, str) else None
    if s not in COLLECTIVES:
        raise OptionError(f"{name}={value!r}: expected one of {', '.join(COLLECTIVES)}")
    return s


def _expect(name: str, value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
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
    "counts": _bool,
    "count_tolerance": _num(float, lambda v: v >= 0, "a fraction >= 0 (0 = exact, 0.01 = 1%)"),
    "max_ops": _budget,
    "max_kernels": _budget,
    "max_syncs": _budget,
    "max_recompiles": _budget,
    "items_per_call": _items_per_call,
    "items": _items,
    "processes": lambda name, v: None if v is None else _num(int, lambda x: x >= 1, "an integer >= 1")(name, v),
    "scaling": _scaling,
    "min_scaling_efficiency": _min_efficiency,
    "collective": _collective,
    "bytes_per_call": _bytes_per_call,
    "instructions": _bool,
    "steady_clock": _num(float, lambda v: v >= 0, "a number of seconds >= 0 (0: off)"),
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


def _checked(opts: BenchOptions, where: str) -> BenchOptions:
    if opts.max_rounds < opts.min_rounds:
        raise OptionError(
            f"{where}: max_rounds={opts.max_rounds} is smaller than min_rounds={opts.min_rounds}"
        )
    return opts


def resolve_session(cli: Mapping[str, Any] | None = None, ini: Mapping[str, Any] | None = None) -> BenchOptions:
    """The session's defaults: command line over ini over :data:`DEFAULTS` (resolved once).

    ``None`` values mean "not set". Raises :class:`OptionError` naming the source of a bad value.
    """
    values: dict[str, Any] = {}
    for source, label in ((ini or {}, "ini"), (cli or {}, "command line")):
        for name, value in source.items():
            if value is not None:
                values[name] = convert(name, value, f"{label} {name}")
    return _checked(BenchOptions(**values), "command line/ini")


def with_marker(session: BenchOptions, marker: Mapping[str, Any] | None, *,
                where: str = "gpu_bench marker") -> BenchOptions:
    """The options of one test: its marker's values over the session's (see :func:`resolve_session`).

    Raises :class:`OptionError` for an unknown name or a bad value, naming ``where``.
    """
    marker = dict(marker or {})
    check_names(marker, where)
    values = {name: convert(name, value, where) for name, value in marker.items()}
    return _checked(dataclasses.replace(session, **values), where)


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
    return with_marker(resolve_session(cli, ini), marker, where=where)


def for_device(options: BenchOptions, device_type: str, *, threshold_given: bool) -> BenchOptions:
    """``options`` for a benchmark measured on a device of ``device_type`` (``torch.device.type``:
    ``"cpu"``, ``"cuda"``): on the CPU, :data:`CPU_THRESHOLD` (10%) where ``threshold_given`` is
    False (no marker, command line or ini value set ``threshold``); otherwise ``options`` as they
    are. The one place the backend's default threshold is chosen: every verdict, report and
    baseline of the benchmark then carries the value used ("threshold +10%")."""
    if device_type == "cpu" and not threshold_given:
        return dataclasses.replace(options, threshold=CPU_THRESHOLD)
    return options


def options_from_dict(stored: Mapping[str, Any] | None) -> BenchOptions:
    """The :class:`BenchOptions` a result or baseline entry stored (its ``options``, as JSON).

    The one codec of stored options, shared by the ``gpuperf compare`` command line, the A/B
    results and the replicate workers' results. Unknown keys (from a newer version) and values
    an option does not accept (a hand-edited file) are left out: those options keep their
    defaults. Never raises for a mapping; ``None`` gives :data:`DEFAULTS`.
    """
    values: dict[str, Any] = {}
    for name, value in (stored or {}).items():
        if name in _CONVERTERS:
            try:
                values[name] = _CONVERTERS[name](name, value)
            except OptionError:
                continue
    return BenchOptions(**values)


#: The bottleneck classes (``expect_bottleneck`` values; :mod:`pytest_gpuperf.verdict.bottleneck`
#: classifies into them).
CLASSES = ("compute", "memory", "overhead", "sync", "transfer", "data")


def check_expected(value: Any, where: str = "expect_bottleneck") -> tuple[str, ...]:
    """Normalise ``expect_bottleneck`` (a class name or a tuple/list of them) to a tuple.

    Raises ``ValueError`` naming the value and listing the classes.
    """
    if isinstance(value, str):
        items: tuple = tuple(value.split(","))
    elif isinstance(value, (list, tuple)):
        items = tuple(value)
    else:
        raise ValueError(f"{where}={value!r}: expected one of {', '.join(CLASSES)} or a tuple of them")
    out = []
    for item in items:
        name = str(item).strip().lower().removesuffix("-bound")
        if name not in CLASSES:
            raise ValueError(f"{where}={value!r}: unknown class {item!r}; expected one of {', '.join(CLASSES)}")
        out.append(name)
    if not out:
        raise ValueError(f"{where}={value!r}: expected one of {', '.join(CLASSES)} or a tuple of them")
    return tuple(out)
