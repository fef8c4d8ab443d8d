"""Communication of a distributed benchmark, measured with ``torch.profiler`` (issue 35, item 4).

Under torchrun, after the timed rounds, every rank profiles the same few extra calls of the
benchmarked function (never inside the timed rounds), inside a ``gpuperf::region`` annotation
whose length is the step. :func:`profile_communication` turns the events into this rank's
:class:`~pytest_gpuperf.verdict.communication.RankCommunication` (the classification and the
interval arithmetic are :mod:`pytest_gpuperf.verdict.communication`'s).

Every rank makes exactly ``calls + 1`` calls whatever happens to its profiler (a profiler that
cannot start still leaves the calls to be made: the other ranks' collectives wait for them), so
a failure here is this rank's ``unavailable`` part, never a hang. Imports torch lazily.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Callable

from pytest_gpuperf.verdict.bottleneck import REGION_NAME
from pytest_gpuperf.verdict.communication import ProfEvent, RankCommunication, classify, rank_communication

#: Profiled calls per rank: a few, after one warm-up call the profiler discards.
CALLS = 3


def _events(prof: Any) -> tuple[list[ProfEvent], tuple[float, float] | None]:
    """The profiler's events as :class:`ProfEvent` (µs) and the span of the ``gpuperf::region``
    annotation (µs), from the public ``prof.events()`` (``FunctionEvent``: ``time_range`` in µs,
    ``thread``, ``device_type``; kernels are device events there on torch >= 2.4)."""
    from pytest_gpuperf.measure.trace import _device, _FunctionEventView, event_activity, event_kind

    out: list[ProfEvent] = []
    span = None
    for fe in prof.events():
        view = _FunctionEventView(fe)
        name = str(view.name())
        start, end = float(fe.time_range.start), float(fe.time_range.end)
        if name == REGION_NAME and _device(view) == "cpu":
            span = (start, end) if span is None else (min(span[0], start), max(span[1], end))
            continue
        kind = event_kind(event_activity(view))  # CUDA runtime calls are "runtime": neither side
        out.append(ProfEvent(name, _device(view), start, end, int(getattr(fe, "thread", 0) or 0), kind))
    return out, span


def profile_communication(fn: Callable[..., Any], args: tuple, kwargs: dict, device: Any,
                          calls: int = CALLS, align: Callable[[], Any] | None = None) -> RankCommunication:
    """This rank's communication per call of ``fn``: ``calls`` profiled calls after one warm-up
    call, on the CPU's timeline (gloo) or the GPU's (``device`` CUDA: NCCL kernels). ``align``
    (every rank's barrier) runs once the profiler has started, so that one rank's slower profiler
    start is not counted as the others' communication wait. Raises what ``fn`` raises,
    ``RuntimeError`` when the profiler could not record (the calls and ``align`` are made anyway,
    so the ranks stay in step) or recorded no annotation."""
    from torch.profiler import ProfilerActivity, profile, record_function

    from pytest_gpuperf.measure.profiling import _sync
    from pytest_gpuperf.measure.trace import cupti_guard, quietly

    cuda = getattr(device, "type", "cpu") == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    fn(*args, **kwargs)  # warm-up: outside the profile
    _sync(device)
    failed: BaseException | None = None
    prof = None
    with contextlib.ExitStack() as stack:
        try:
            if cuda:
                cupti_guard(device)
            stack.enter_context(warnings.catch_warnings())
            warnings.filterwarnings("ignore", message="Warning: Profiler clears events", category=UserWarning)
            prof = stack.enter_context(quietly(profile(activities=activities)))
        except Exception as exc:  # noqa: BLE001 - the calls are still made: the other ranks wait for them
            failed = exc
        if align is not None:
            align()
        with record_function(REGION_NAME):
            for _ in range(calls):
                fn(*args, **kwargs)
            _sync(device)
    if failed is not None or prof is None:
        raise RuntimeError(f"the profiler could not record the communication: {failed!r}") from failed
    events, span = _events(prof)
    if span is None:
        raise RuntimeError(f"the profiler recorded no {REGION_NAME} annotation around the profiled calls")
    inside = [e for e in events if e.end_us > span[0] and e.start_us < span[1]]  # not align()'s collective
    return rank_communication(classify(inside, cuda), span, calls)
