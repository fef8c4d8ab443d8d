"""The object behind the ``gpu_bench`` fixture (no pytest imports; the plugin wires it up).

:class:`GpuBench` is the fixture's API (calls, names, ``pedantic``, ``extra_info``, phases); how a
call is measured is one strategy chosen from its :class:`BenchContext` when it is made
(:mod:`pytest_gpuperf.plugin.measuring`: in-process, a replay of a result finished by worker
processes, an A/B worker, the extras process, or smoke mode).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Mapping

from pytest_gpuperf.core.options import BenchOptions
from pytest_gpuperf.measure.timing import Measurer, Progress
from pytest_gpuperf.plugin.measuring import GpuBenchUsageError, _lazy_kind, _sampler, strategy_for  # noqa: F401
from pytest_gpuperf.storage.baseline import BaselineFile
from pytest_gpuperf.verdict.result import BenchResult


def _accepts_keyword(fn: Callable[..., Any], keyword: str) -> bool:
    """True when ``fn`` takes ``keyword`` (or ``**kwargs``), or when its signature is unknown."""
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature: let fn decide
        return True
    return any(p.name == keyword and p.kind is not p.POSITIONAL_ONLY or p.kind is p.VAR_KEYWORD for p in params)


def assign_extra_info(target: dict[str, Any], value: Mapping[str, Any], name: str) -> None:
    """``obj.extra_info = value``: replace the contents of ``target`` in place (the same dict object,
    so results already made keep seeing it). Raises ``TypeError`` naming ``name`` for a non-mapping."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a dict, got {type(value).__name__}")
    new = dict(value)
    target.clear()
    target.update(new)


@dataclass(frozen=True)
class BenchContext:
    """Everything one test's ``gpu_bench`` needs, resolved once by the plugin (frozen).

    ``options``: its resolved options;
    ``device``: a ``torch.device``; ``measuring``: ``--gpuperf`` (else smoke mode); ``baseline``:
    the module's :class:`~pytest_gpuperf.storage.baseline.BaselineFile` (None: none stored) and
    ``baseline_file`` its path for messages; ``snapshot_dir``/``artifacts_dir``: where CUDA memory
    snapshots and chrome traces go (None: nowhere); ``classify``: classify every benchmark;
    ``thresholds``: classification thresholds; ``confirm_regressions``: re-measure a regression
    (off while updating baselines); ``reference``/``normalize``: this device's reference-workload
    medians and ``--gpuperf-normalize``; ``device_lock``: a context manager factory that serializes
    measurements on the device (pytest-xdist); ``progress``: verbose progress callback;
    ``measurer``: the timing backend (tests inject a scripted one); ``max_memory_text``: the
    ``max_memory`` option as written (``"100 kB"``), to report the budget in its own unit;
    ``group_of``: maps the ``group`` option to the group a result is shown under (the summary's
    grouping, e.g. ``--benchmark-group-by``; None: the option as it is). A/B mode
    (``--gpuperf-ab``): in a worker process ``ab_worker`` is its
    :class:`~pytest_gpuperf.ab.run.WorkerClient` (measure only when the coordinator says so); in the
    user's session ``ab_results`` maps a benchmark's full id to its finished result, measured by
    the A/B workers or by the replicate workers (:mod:`pytest_gpuperf.plugin.replicates`), or to a string
    saying why it has none (the test then fails with it through ``fail``); the benchmark is not
    measured again. ``nodeid``: the test's pytest node id (:attr:`test_id` and :attr:`module` are its parts). ``fail``: fails the test with a message
    (the plugin passes ``pytest.fail``). ``extras``: where the auxiliary measurements (peak memory,
    counts, bottleneck) are made: ``"inline"`` after this benchmark's timed rounds (one process),
    ``"none"`` (a timed replicate worker: the extras process makes them), ``"only"`` (the extras
    process: nothing timed, each extra from :data:`~pytest_gpuperf.plugin.replicates.EXTRA_CALLS` calls),
    ``"instructions"`` (the instruction worker under valgrind: its
    :class:`~pytest_gpuperf.measure.instructions.InstructionCounting` counts each call's instructions).
    ``op_profile``: where the extras are made, also profile the ops (why it got slower, issue 32):
    for the baseline while updating, or to diff a stored regression against its baseline's profile;
    the number of processes that share the profile's cycles (0: no profile; issue 45: an update's
    two extras processes each profile half, :func:`~pytest_gpuperf.measure.opprofile.cycles_for`).
    ``ranks``: under ``torchrun``, this process's :class:`~pytest_gpuperf.measure.distributed.Ranks`
    (the rounds are aligned across ranks and their samples combined; None: one process).
    ``scaling_reference``: under ``torchrun``, the :class:`~pytest_gpuperf.storage.scaling.ScalingReference`
    of the test's module (a benchmark id -> its baseline at a smaller world size, for its scaling
    efficiency); None outside torchrun.
    """

    options: BenchOptions
    device: Any
    measuring: bool
    baseline: BaselineFile | None = None
    baseline_file: str | None = None
    snapshot_dir: str | None = None
    classify: bool = False
    thresholds: Any = None
    artifacts_dir: str | None = None
    confirm_regressions: bool = True
    reference: Mapping[str, Any] | None = None
    normalize: bool = False
    host_load: bool = True
    device_lock: Callable[[], ContextManager[Any]] | None = None
    progress: Progress | None = None
    measurer: Measurer = field(default_factory=Measurer)
    max_memory_text: str | None = None
    group_of: Callable[[str | None], str | None] | None = None
    ab_worker: Any = None
    ab_results: Mapping[str, Any] | None = None
    nodeid: str = ""
    fail: Callable[[str], Any] | None = None
    extras: str = "inline"
    op_profile: int = 0
    ranks: Any = None
    scaling_reference: Any = None

    @property
    def test_id(self) -> str:
        """The test's id within its module (from ``nodeid``: ``test_f[1]`` of ``m.py::test_f[1]``)."""
        module, _, rest = self.nodeid.partition("::")
        return rest or module

    @property
    def module(self) -> str:
        """The test's module path, from its node id (``""`` without one)."""
        return self.nodeid.partition("::")[0] if "::" in self.nodeid else ""


class GpuBench:
    """Measures callables for one test: ``gpu_bench(fn, *args, **kwargs) -> BenchResult``.

    ``device`` is the ``torch.device`` the benchmark should allocate its tensors on. With
    ``--gpuperf`` each call warms up, times rounds (CUDA events on a GPU, the CPU clock
    otherwise) and compares with the stored baseline; without it, ``fn`` runs exactly once
    (smoke mode). A test may measure several things when each has a distinct ``name=``.
    ``extra_info`` is a dict of the test's own data (JSON-ready values), stored with its results in
    the JSON report and the baselines.
    """

    def __init__(self, context: BenchContext, on_result: Callable[[BenchResult], None] = lambda _r: None) -> None:
        self.context = context  # also chooses the measuring strategy (see the setter)
        self._on_result = on_result
        self.results: list[BenchResult] = []
        self._extra_info: dict[str, Any] = {}

    @property
    def context(self) -> BenchContext:
        """The test's :class:`BenchContext`; setting it chooses the measuring strategy again
        (:func:`~pytest_gpuperf.plugin.measuring.strategy_for`)."""
        return self._context

    @context.setter
    def context(self, value: BenchContext) -> None:
        self._context = value
        self._strategy = strategy_for(value)
        self._strategy.lazy_value = getattr(self, "_lazy_value", None)

    @property
    def lazy_value(self) -> Callable[[str], Any] | None:
        """Where a call that returned a generator or coroutine (only its creation timed) is
        reported: None (``gpu_bench``) fails the test; pytest-benchmark's ``benchmark`` fixture sets
        the session's warning, since pytest-benchmark times the creation alone and a suite may mean
        just that (issue 46)."""
        return getattr(self, "_lazy_value", None)

    @lazy_value.setter
    def lazy_value(self, report: Callable[[str], Any] | None) -> None:
        self._lazy_value = report
        self._strategy.lazy_value = report

    @property
    def extra_info(self) -> dict[str, Any]:
        """The test's own data (a dict, JSON-ready values), stored with every result of this test in
        the JSON report and the baselines; changes made after a measurement are stored too."""
        return self._extra_info

    @extra_info.setter
    def extra_info(self, value: Mapping[str, Any]) -> None:
        assign_extra_info(self._extra_info, value, "extra_info")

    @property
    def test_id(self) -> str:
        return self.context.test_id

    @property
    def module(self) -> str:
        return self.context.module

    @property
    def options(self) -> BenchOptions:
        return self.context.options

    @property
    def measuring(self) -> bool:
        return self.context.measuring

    @property
    def device(self) -> Any:
        """The ``torch.device`` to benchmark on (``cuda:N`` or ``cpu``)."""
        return self.context.device

    def phase(self, name: str) -> Any:
        """Label a phase inside the benchmarked function: ``with gpu_bench.phase("forward"): ...``.

        A ``torch.profiler.record_function`` region; when the benchmark is classified, each
        phase's share of device time is reported in ``result.bottleneck.evidence.phases``.
        """
        from pytest_gpuperf.measure.profiling import phase

        return phase(name)

    def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> BenchResult:
        """Benchmark ``fn(*args, **kwargs)`` with the options of the test's marker.

        Every keyword argument goes to ``fn``; to name a measurement use :meth:`named`. Raises
        :class:`GpuBenchUsageError` when ``name=`` is given but ``fn`` takes no ``name`` parameter.
        """
        if "name" in kwargs and not _accepts_keyword(fn, "name"):
            raise GpuBenchUsageError(
                f"gpu_bench(fn, ..., name={kwargs['name']!r}) passes name= to fn, which does not take it; "
                f"to name a measurement use gpu_bench.named({kwargs['name']!r})(fn, ...) or "
                f"gpu_bench.pedantic(fn, args=..., name={kwargs['name']!r})"
            )
        return self._run(fn, tuple(args), dict(kwargs), setup=None, rounds=None, warmup_calls=None, name=None)

    def named(self, name: str) -> Callable[..., BenchResult]:
        """``gpu_bench.named("forward")(fn, *args, **kwargs)``: benchmark under a name.

        The measurement's id becomes ``<test id>::forward``, so one test can hold several; every
        argument after ``fn`` goes to ``fn`` (a ``name=`` keyword included). Raises ``ValueError``
        for an empty or non-string name.
        """
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"gpu_bench.named: name={name!r}: expected a non-empty string")

        def measure(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> BenchResult:
            return self._run(fn, tuple(args), dict(kwargs), setup=None, rounds=None, warmup_calls=None, name=name)

        return measure

    def pedantic(
        self,
        fn: Callable[..., Any],
        args: tuple = (),
        kwargs: dict[str, Any] | None = None,
        *,
        setup: Callable[[], Any] | None = None,
        rounds: int | None = None,
        warmup_rounds: int | None = None,
        name: str | None = None,
        calls_per_round: int | None = None,
    ) -> BenchResult:
        """Benchmark with explicit control.

        ``setup`` runs untimed before every round (one call per round then) and may return
        ``(args, kwargs)`` to use for that round; ``rounds`` fixes the number of timed rounds and
        ``warmup_rounds`` the number of warmup calls (0 allowed; pytest-benchmark's name, stored as
        the result's ``warmup_calls``); ``name`` labels the measurement
        (``<test id>::<name>``) so one test can hold several; ``calls_per_round`` fixes how many
        calls are timed together in a round (each sample is the round's time divided by it; None:
        sized from the warmup; not with ``setup``). Raises ``ValueError`` for non-integer or
        out-of-range counts.
        """
        if rounds is not None and (isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1):
            raise ValueError(f"gpu_bench.pedantic: rounds={rounds!r}: expected an integer >= 1")
        if warmup_rounds is not None and (
            isinstance(warmup_rounds, bool) or not isinstance(warmup_rounds, int) or warmup_rounds < 0
        ):
            raise ValueError(f"gpu_bench.pedantic: warmup_rounds={warmup_rounds!r}: expected an integer >= 0")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ValueError(f"gpu_bench.pedantic: name={name!r}: expected a non-empty string")
        if calls_per_round is not None and (isinstance(calls_per_round, bool) or not isinstance(calls_per_round, int)
                                            or calls_per_round < 1):
            raise ValueError(f"gpu_bench.pedantic: calls_per_round={calls_per_round!r}: expected an integer >= 1")
        if calls_per_round is not None and calls_per_round > 1 and setup is not None:
            raise ValueError(f"gpu_bench.pedantic: calls_per_round={calls_per_round} with a setup function: setup "
                             f"runs before every round, so a round holds one call (use calls_per_round=1)")
        return self._run(fn, tuple(args), dict(kwargs or {}), setup=setup, rounds=rounds,
                         warmup_calls=warmup_rounds, name=name, calls_per_round=calls_per_round)

    def _benchmark_id(self, name: str | None) -> str:
        bid = self.test_id if name is None else f"{self.test_id}::{name}"
        if any(r.benchmark_id == bid for r in self.results):
            if name is None:
                raise GpuBenchUsageError(
                    f"gpu_bench was already called without a name in {self.test_id}; to measure "
                    f"several things in one test give each a distinct name, e.g. "
                    f"gpu_bench.pedantic(fn, args=(x,), name='forward')"
                )
            raise GpuBenchUsageError(
                f"gpu_bench measurement name {name!r} is used twice in {self.test_id}; names must be distinct"
            )
        return bid

    def _safe_id(self, bid: str) -> str:
        """A bounded, file-system-safe file stem for measurement ``bid`` of this test (its traces and snapshots)."""
        return self._strategy._safe_id(bid)

    def _run(self, fn, args, kwargs, *, setup, rounds, warmup_calls, name, calls_per_round=None) -> BenchResult:
        if not callable(fn):
            raise TypeError(f"gpu_bench: expected a callable as first argument, got {type(fn).__name__}")
        bid = self._benchmark_id(name)
        label = name or self.test_id.split("::")[-1]
        group = self.options.group if self.context.group_of is None else self.context.group_of(self.options.group)
        common = dict(name=label, device=str(self.device), benchmark_id=bid,
                      group=group, options=self.options, extra_info=self._extra_info)
        try:
            result = self._strategy.measure(fn, args, kwargs, setup, rounds, warmup_calls, bid, common,
                                            calls_per_round)
        except Exception as exc:
            from pytest_gpuperf.measure.memory import is_oom

            if not is_oom(exc):
                raise
            self._strategy.raise_oom(exc, fn, args, kwargs, bid)
        self.results.append(result)
        self._on_result(result)
        return result
