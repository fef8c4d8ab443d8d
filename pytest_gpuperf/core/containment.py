"""Containment of the auxiliary measurements ("extras"): one place where their failures stop.

A benchmark's timing is the product; everything measured beside it — peak memory, the exact
counts, the bottleneck classification, the chrome trace, a CUDA memory snapshot — is an extra
that runs the user's function under a torch mechanism of its own (the profiler, a
``TorchDispatchMode``, torch's ``FlopCounterMode`` and its module tracker). Real code breaks
these mechanisms in ways its own calls never do: a module whose parameters live in a tensordict
makes the FLOP counter's module tracker call ``TensorDict.__bool__``, which raises. Such a
failure must never take the good timing down with it, so every extra runs through
:func:`contained`: an exception becomes an :class:`Unavailable` record for that part (the type,
the message and the last frames of the user's code), the measurement goes on, the baseline is
written without that part and a later comparison says it is missing. Where the user *asked* for
the check (``max_ops=``, ``max_memory=``, ``expect_bottleneck=``), the part being unavailable
fails the test with the reason (:func:`requested_parts`).

Stdlib only.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any, Callable, Mapping, MutableMapping, TypeVar

#: The extras, by the names used in messages, reports and baselines (``"unavailable"`` keys).
MEMORY, COUNTS, BOTTLENECK, TRACE, SNAPSHOT = "peak memory", "counts", "bottleneck", "trace", "memory snapshot"
#: The per-op diff of an A/B decision ("why it got slower": profiles of both sides).
OP_DIFF = "op diff"
#: Under torchrun: each rank's communication time, share of the step and overlap (issue 35).
COMMUNICATION = "communication"
#: The host's instructions per call under callgrind (issue 48, ``--gpuperf-instructions``).
INSTRUCTIONS = "instructions"
PARTS = (MEMORY, COUNTS, BOTTLENECK, TRACE, SNAPSHOT, OP_DIFF, COMMUNICATION, INSTRUCTIONS)
#: How many frames of the traceback a reason names (innermost last).
FRAMES = 3
#: Frames from these packages are torch's or ours, not the user's: skipped when naming where it failed.
_NOT_USER = ("/torch/", "/pytest_gpuperf/", "/_pytest/", "/pluggy/", "contextlib.py")

T = TypeVar("T")


@dataclass(frozen=True)
class Unavailable:
    """Why an extra could not be measured: ``part`` (one of :data:`PARTS`), ``error``
    (``"RuntimeError: Converting a tensordict to boolean value is not permitted"``) and ``where``
    (the last frames outside torch and this plugin, ``"tensordict/base.py:407 in __bool__"``;
    empty when none)."""

    part: str
    error: str
    where: str = ""

    def text(self) -> str:
        """``RuntimeError: ... (at tensordict/base.py:407 in __bool__)``: the reason, one line."""
        return self.error + (f" (at {self.where})" if self.where else "")


def describe(exc: BaseException, frames: int = FRAMES) -> tuple[str, str]:
    """``(error, where)`` of an exception: ``"Type: message"`` (the message's first line, at most
    300 characters) and the last ``frames`` frames of its traceback outside torch, pytest and this
    plugin, innermost last (``"file.py:12 in f <- other.py:3 in g"`` reads outermost first); when every frame
    is torch's or ours, the innermost ones."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if len(message) > 300:
        message = message[:297] + "..."
    error = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    stack = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in stack if not any(part in f.filename.replace("\\", "/") for part in _NOT_USER)]
    chosen = (mine or list(stack))[-frames:]
    where = " <- ".join(f"{_short(f.filename)}:{f.lineno} in {f.name}" for f in reversed(chosen))
    return error, where


def _short(path: str) -> str:
    """The last two components of a path (``tensordict/base.py``)."""
    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[-2:])


def contained(part: str, call: Callable[[], T], unavailable: MutableMapping[str, Unavailable]) -> T | None:
    """Run ``call()`` for the extra ``part``; on an ``Exception`` record an :class:`Unavailable`
    in ``unavailable[part]`` (the first failure of a part is kept) and return None. Never raises
    an ``Exception`` (``KeyboardInterrupt`` and ``SystemExit`` pass)."""
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 - the point of this function
        error, where = describe(exc)
        unavailable.setdefault(part, Unavailable(part, error, where))
        return None


def requested_parts(options: Any) -> dict[str, str]:
    """The extras the user asked for by an option, with the option that asks (``{"counts":
    "max_ops=12"}``): ``max_ops``/``max_kernels``/``max_syncs``/``max_recompiles`` need the counts,
    ``max_memory`` the peak memory, ``expect_bottleneck`` the bottleneck. ``options``: a
    :class:`~pytest_gpuperf.core.options.BenchOptions`."""
    out: dict[str, str] = {}
    for name in ("max_ops", "max_kernels", "max_syncs", "max_recompiles"):
        value = getattr(options, name, None)
        if value is not None:
            out.setdefault(COUNTS, f"{name}={value}")
    if getattr(options, "max_memory", None) is not None:
        out[MEMORY] = f"max_memory={options.max_memory}"
    expected = getattr(options, "expect_bottleneck", None)
    if expected:
        out[BOTTLENECK] = "expect_bottleneck=" + "/".join(expected)
    return out


def to_dict(unavailable: Mapping[str, Unavailable]) -> dict[str, dict[str, str]]:
    """JSON form, as reports and baselines store it: ``{part: {"error": ..., "where": ...}}``."""
    return {part: {"error": u.error, "where": u.where} for part, u in unavailable.items()}


def from_dict(d: Any) -> dict[str, Unavailable]:
    """From :func:`to_dict`'s form (anything malformed is left out)."""
    if not isinstance(d, Mapping):
        return {}
    out = {}
    for part, v in d.items():
        if isinstance(v, Mapping) and isinstance(v.get("error"), str):
            out[str(part)] = Unavailable(str(part), v["error"], str(v.get("where") or ""))
    return out
