"""``--gpuperf-instructions`` (issue 48): the session's instruction worker and the instruction gate.

One small object, :class:`InstructionMode`, made by the coordinator (the session that measures in
worker processes) and used only when a measured benchmark asks for instruction counts (the flag,
ini ``gpuperf_instructions = true`` or the marker option ``instructions=True``):

1. **One valgrind process for the session** (:meth:`InstructionMode.run`), after the timed and the
   extras processes: the user's selection, only the tests that asked (hidden ``--gpuperf-select``),
   as ``python -m pytest`` under ``valgrind --tool=callgrind --instr-atstart=no``
   (:func:`~pytest_gpuperf.measure.instructions.valgrind_command`), role ``i/P``. It imports with
   valgrind's instrumentation off, then counts each benchmark's calls into a dump of its own
   (:class:`~pytest_gpuperf.measure.instructions.InstructionCounting`) and reports instructions
   per call with its other results. Where valgrind cannot run the session says so once and goes
   on without instruction counts.
2. **The gate** (:meth:`InstructionMode.judge`): instructions per call against the baseline's by
   :func:`~pytest_gpuperf.verdict.instructions.decide_instructions` (beyond the tolerance: the
   test fails); counts from another build (valgrind, Python or torch: the ``tool`` text) are not
   compared. A regression's why is the per-function diff of the baseline's dump (kept under
   ``<rootdir>/.gpuperf/instructions/`` when the baseline was recorded) and this run's, naming the
   function that grew; both dumps are copied to the artifacts folder.

Not in single-process mode (``--gpuperf-processes 1``), under ``--gpuperf-ab``, nor in a torchrun
launch: the session says so where the option asks for it there.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path
from typing import Any, Callable, Sequence

from pytest_gpuperf.plugin.settings import SessionSettings

#: The dumps of the baselines' runs, by benchmark (under the rootdir; the baseline file stores only
#: the count, and a kept dump is used only where its count is the stored one).
KEPT = Path(".gpuperf") / "instructions"


def safe_name(key: str) -> str:
    """A file name for benchmark ``key`` (``module::id``): readable, unique by a short hash."""
    readable = re.sub(r"[^\w.-]+", "_", key)[:120].strip("_")
    return f"{readable}-{hashlib.sha1(key.encode()).hexdigest()[:8]}.callgrind"


class InstructionMode:
    """The instruction worker and gate of one session (see the module doc).

    ``settings``: the session's; ``progress(line)``: its progress line; ``warn(line)``: a summary
    warning. After :meth:`run`: ``counted`` (full id -> its
    :class:`~pytest_gpuperf.verdict.instructions.Instructions`, or why it has none; empty where
    valgrind could not run, which is warned once).
    """

    def __init__(self, settings: SessionSettings, progress: Callable[[str], None], warn: Callable[[str], None]) -> None:
        self.settings = settings
        self.progress = progress
        self.warn = warn
        self.counted: dict[str, Any] = {}

    @staticmethod
    def wanted(runs: Sequence[Any]) -> dict[str, str]:
        """The benchmarks the timed worker ``runs`` measured whose options ask for instruction
        counts: full id -> its test's node id."""
        from pytest_gpuperf.ab.results import options_from_entry

        out: dict[str, str] = {}
        for r in runs:
            for key, entry in r.entries.items():
                if key not in out and options_from_entry(entry).instructions and entry.get("nodeid"):
                    out[key] = entry["nodeid"]
        return out

    def run(self, args: Sequence[str], cwd: Path, logs: Path, runs: Sequence[Any]) -> str | None:
        """Count the instructions of every benchmark of ``runs`` that asks, in one valgrind worker
        (``args``: the worker processes' pytest arguments; ``logs``: their folder). Returns how
        Ctrl-C or SIGTERM stopped it (the timing and the extras are complete and kept), else None."""
        from pytest_gpuperf.plugin.stopping import Stopped

        wanted = self.wanted(runs)
        if not wanted:
            return None
        if self.settings.nproc:
            self.warn("--gpuperf-instructions: not under --gpuperf-nproc (each worker there is a torchrun launch); "
                      "the session goes on without instruction counts")
            return None
        try:
            self._count(args, cwd, logs, wanted)
        except Stopped as exc:
            return f"stopped ({exc.why}) while counting instructions"
        return None

    def _count(self, args: Sequence[str], cwd: Path, logs: Path, wanted: dict[str, str]) -> None:
        import time

        from pytest_gpuperf.measure.instructions import ValgrindUnavailable, valgrind_command
        from pytest_gpuperf.plugin.replicates import INSTRUCTION_WORKER, ReplicateError, _run_one, slot_text

        dumps = logs / "callgrind"
        shutil.rmtree(dumps, ignore_errors=True)
        dumps.mkdir(parents=True, exist_ok=True)
        try:
            wrap, env = valgrind_command([], dumps)
        except ValgrindUnavailable as exc:
            self.warn(f"--gpuperf-instructions: {exc}; the session goes on without instruction counts")
            return
        select = logs / "select-instructions.txt"
        select.write_text("\n".join(sorted(set(wanted.values()))) + "\n", encoding="utf-8")
        self.progress(f"gpuperf: counting the instructions of {len(wanted)} benchmark(s) in one valgrind worker "
                      f"(--gpuperf-instructions)")
        start = time.monotonic()
        try:
            run = _run_one([*args, "--gpuperf-select", str(select)], cwd,
                           slot_text((INSTRUCTION_WORKER, self.settings.processes)), logs / "instructions",
                           INSTRUCTION_WORKER, self.settings.limits.worker_timeout_s,
                           "the instruction worker", None, wrap=wrap, env=env, dumps=str(dumps))
        except ReplicateError as exc:
            self.warn(f"--gpuperf-instructions: {exc}")
            return
        self.progress(f"gpuperf: instruction worker done ({len(run.entries)} benchmark(s), "
                      f"{time.monotonic() - start:.0f} s)" + (f": {run.error}" if run.error else ""))
        self._collect(wanted, run)

    def _collect(self, wanted: dict[str, str], run: Any) -> None:
        from pytest_gpuperf.core.containment import INSTRUCTIONS, from_dict

        for key in wanted:
            entry = run.entries.get(key)
            if entry is None:
                why = run.failure_of(key)
                self.counted[key] = (f"its test raised {why} in the instruction worker" if why else
                                     f"{run.error or 'the instruction worker did not count it'} (output: {run.log})")
                continue
            from pytest_gpuperf.verdict.instructions import Instructions

            counted = Instructions.from_dict(entry.get("instructions"))
            problem = from_dict(entry.get("unavailable")).get(INSTRUCTIONS)
            self.counted[key] = counted if counted is not None else (
                problem.text() if problem is not None else "not counted")

    def judge(self, key: str, result: Any, baseline: Any) -> Any:
        """``result`` (benchmark ``key``, decided against ``baseline``, a
        :class:`~pytest_gpuperf.storage.baseline.BaselineEntry` or None) with its instruction count
        and the instruction gate's verdict (and, on a timing verdict that moved or is inconclusive
        while the count did not change, a note saying so:
        :func:`~pytest_gpuperf.verdict.instructions.with_host_work`); unchanged where nothing was
        counted for it."""
        from pytest_gpuperf.core.containment import INSTRUCTIONS, Unavailable

        counted = self.counted.get(key)
        if counted is None:
            return result
        if isinstance(counted, str):
            return result.replace(unavailable={**result.unavailable, INSTRUCTIONS: Unavailable(INSTRUCTIONS, counted)})
        result = result.replace(instructions=counted)
        kept = self.settings.rootpath / KEPT / safe_name(key)
        if self.settings.updating:
            _copy(counted.dump, kept)  # the baseline's dump, for a later regression's why
            return result
        from pytest_gpuperf.verdict.instructions import with_host_work

        v = self._verdict(key, counted, baseline, kept)
        return result.replace(instruction_comparison=v, comparison=with_host_work(result.comparison, v))

    def _verdict(self, key: str, counted: Any, baseline: Any, kept: Path) -> Any:
        from dataclasses import replace

        from pytest_gpuperf.verdict.instructions import Instructions, compare_counts

        stored = Instructions.from_dict(baseline.data.get("instructions")) if baseline is not None else None
        verdict = compare_counts(counted, stored, benchmark_id=key)
        if not verdict.failed:
            return verdict
        return replace(verdict, **self._why(key, counted, stored, kept))

    def _why(self, key: str, counted: Any, stored: Any, kept: Path) -> dict[str, Any]:
        """The per-function diff of the baseline's kept dump and this run's (both copied to the
        artifacts folder), when the kept dump is the stored count's."""
        from pytest_gpuperf.verdict.callgrind import parse_callgrind
        from pytest_gpuperf.verdict.instructions import diff_text, function_diff, grown_function

        if counted.dump is None or not kept.is_file():
            return {"why": f"no dump of the baseline's run kept here ({kept}): no per-function diff"}
        try:
            before, after = (parse_callgrind(Path(p).read_text(encoding="utf-8", errors="replace"))
                             for p in (kept, counted.dump))
        except OSError as exc:
            return {"why": f"the dumps could not be read ({exc})"}
        # the kept dump is the stored count's when its own per-call count matches (within 0.5%)
        if stored.calls < 1 or abs(before.total / stored.calls - (stored.per_call + _loop(counted, after))) > \
                0.005 * max(stored.per_call, 1.0):
            return {"why": f"the dump kept at {kept} is not the baseline's run: no per-function diff"}
        folder = self.settings.artifacts_dir / "instructions"
        dumps = (_copy(str(kept), folder / f"baseline-{kept.name}"), _copy(counted.dump, folder / f"run-{kept.name}"))
        text = diff_text(function_diff(before, after, stored.calls, counted.calls),
                         grown_function(before, after, stored.calls, counted.calls))
        return {"why": text, "dumps": tuple(str(p) for p in dumps if p is not None)}


def _loop(counted: Any, dump: Any) -> float:
    """The empty loop's instructions per call in ``counted``'s run: its dump per call minus its count."""
    return dump.total / counted.calls - counted.per_call


def _copy(source: str | None, target: Path) -> Path | None:
    """Copy ``source`` to ``target`` (folders made); None where it cannot (the diagnosis is optional)."""
    if not source:
        return None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    except OSError:
        return None
    return target
