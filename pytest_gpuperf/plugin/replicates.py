"""Process-level replicates: every benchmark measured in P fresh worker processes.

Rounds from one process share that process's speed mode (memory layout, clock state, which core
it landed on): on this project's machines 12 processes timing one matmul had a run-to-run CV of
3.4% between their medians, one run 11% slower, while each run's own rounds were tight. A test on
thousands of rounds of one process then reports p ~ 1e-67 for a difference the next process does
not reproduce (pseudo-replication). So, as pyperf runs 20 worker processes and JMH several forks,
``pytest --gpuperf`` (and ``--gpuperf-update-baselines``) with ``--gpuperf-processes P`` >= 2:

1. **Workers.** At session start the user's session (the coordinator) runs P pytest processes one
   after another, each the user's own selection (built positively: see
   :func:`pytest_gpuperf.ab.run.worker_args`) with the hidden ``--gpuperf-role`` (slot k/P): a worker measures
   every benchmark with ``max_time / P`` (so the measuring time stays about what one process
   took), compares nothing, and appends each result to a JSON-lines file as soon as it is measured. The benchmarks are
   interleaved across processes: the import and collection cost is paid P times per session, not
   per benchmark. Worker 0 alone also measures peak memory, the exact counts and the bottleneck
   (deterministic or one-off; the other workers skip them).
2. **Merge** (:func:`merge`): one result per benchmark whose samples are the processes' samples in
   process order and whose ``process_medians_ms`` are their medians; the timing verdict is
   :func:`pytest_gpuperf.verdict.gate.judge_replicates` (a Student-t test over process medians against the
   baseline's), memory and counts as in a single-process run (worker 0's).
3. **The tests** then run in the user's session and pick up their finished results (one call of
   ``fn`` for its value). A benchmark that a worker did not report because the worker crashed or
   timed out fails with that worker's output; an update run never writes a baseline from a partial
   set of replicates.

The module also holds the worker side (:func:`worker_role`, :func:`worker_options`). Ctrl-C or
SIGTERM (a CI timeout, a cancelled job) stops the running worker and raises :class:`Stopped` with
what the workers finished, so that the coordinator keeps it (issue 45).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from pytest_gpuperf.core.launch import launcher, popen_dying_with_parent, stop as _stop
from pytest_gpuperf.core.options import DEFAULT_PROCESSES
from pytest_gpuperf.core.signals import Terminated, sigterm_raises, stop_reason
from pytest_gpuperf.plugin.stopping import Stopped

#: Hidden option that makes a pytest process a replicate worker, given by its coordinator (the
#: process's role comes once, on its command line; issue 33): ``--gpuperf-role={"replicate": "k/P",
#: "out": "<file>"}`` (0-based k; ``x/P`` the extras process).
ROLE_OPTION = "--gpuperf-role"
#: Environment variable with the default number of worker processes (under the ini option and the
#: command line): the plugin's own test suite sets 1.
PROCESSES_ENV = "GPUPERF_PROCESSES"
#: Seconds a worker may run before it is stopped (its benchmarks then fail with its output) when
#: the caller gives no ``timeout_s``; a session's is ``--gpuperf-worker-timeout`` (ini
#: ``gpuperf_worker_timeout``, :class:`~pytest_gpuperf.plugin.settings.ProcessLimits`).
WORKER_TIMEOUT_S = 3600.0
#: How often a running worker's progress is polled for the terminal's progress line (s).
POLL_S = 0.5


class ReplicateError(RuntimeError):
    """The worker processes could not be run at all (the message says why)."""


#: ``k`` of the extras process's slot (``x/P``): it times nothing and measures
#: every benchmark's extras (peak memory, counts, bottleneck), each from more than one call.
EXTRAS = -1
#: ``k`` of the instruction worker's slot (``i/P``, issue 48): it runs under valgrind's callgrind,
#: times nothing and counts every selected benchmark's instructions per call
#: (:mod:`pytest_gpuperf.plugin.instructions`).
INSTRUCTION_WORKER = -2
#: Calls an extras process makes for each extra (peak memory, counts): a count or peak that
#: differs between them is variable, not exact (:func:`pytest_gpuperf.verdict.counts.combine_counts`).
EXTRA_CALLS = 2
#: An extras process makes no second call of each extra (peak memory, counts) when one round of
#: them is estimated to take this long (s; :func:`extra_calls`, issue 45). Counting a call of 20,000
#: small torch ops took 26x the call (2.9 s for a 114 ms call) and its peak-memory call 19x; on
#: ml4gw's suite those calls were most of the extras processes' 100 s. A count or peak that varies is
#: then seen between processes (an update run's two extras processes).
EXTRA_SECOND_CALL_S = 1.0
#: What one aten op adds to a round of the extras (ms): counting and the peak-memory call together,
#: about 0.25 ms an op on this project's 2-core VM (the figures above).
EXTRA_MS_PER_OP = 0.25


def extra_calls(call_ms: float, ops: int | None) -> int:
    """Calls of each extra an extras process makes of a call of ``call_ms`` (ms) and ``ops`` aten ops
    (None: not counted): :data:`EXTRA_CALLS`, or 1 when a round of them (the peak-memory call and
    the counted call: ``2 * call_ms + EXTRA_MS_PER_OP * ops``) reaches :data:`EXTRA_SECOND_CALL_S`.
    Decided on the call's time and its op count, not on how long the first round took, which
    includes the counters' and the profiler's start-up."""
    round_ms = 2 * max(0.0, call_ms or 0.0) + EXTRA_MS_PER_OP * (ops or 0)
    return 1 if round_ms >= EXTRA_SECOND_CALL_S * 1e3 else EXTRA_CALLS


#: Fewest timed rounds a worker process makes of a benchmark when ``min_rounds`` is split over the
#: processes (:func:`worker_options`): its process median then rests on more than one round.
MIN_PROCESS_ROUNDS = 2


@dataclass(frozen=True)
class ThenExtras:
    """A timed worker's second pass, from its role (``"then": {"out": ..., "op_profile": N}``):
    ``out``, the file the pass appends its results to (one JSON line per benchmark, as an extras
    process does); ``op_profile``, the number of processes that share the op profile's cycles
    (0: this pass profiles no ops)."""

    out: str
    op_profile: int = 0

    def to_json(self) -> dict[str, Any]:
        """The role's ``"then"`` value."""
        return {"out": self.out, "op_profile": self.op_profile}

    @classmethod
    def from_json(cls, data: Any, what: str) -> "ThenExtras":
        """Read a role's ``"then"`` value. Raises ``ValueError`` naming ``what`` (the option) for
        anything but ``{"out": "<file>", "op_profile": <int >= 0>}``."""
        try:
            out, share = str(data["out"]), data.get("op_profile", 0)
        except (TypeError, KeyError, AttributeError):
            share, out = None, None
        if out is None or not isinstance(share, int) or isinstance(share, bool) or share < 0:
            raise ValueError(f'{what} "then" {data!r}: expected {{"out": "<file>", "op_profile": <integer >= 0>}}')
        return cls(out, share)


@dataclass(frozen=True)
class WorkerRole:
    """A replicate worker's role, from its coordinator: ``slot`` ``(k, P)`` (k >= P in the processes
    added for inconclusive benchmarks, :func:`needs_more`; k = :data:`EXTRAS` in the extras process)
    and ``out``, the file it appends its results to, one JSON line per benchmark as soon as it is
    measured (so a worker that crashes later loses nothing it already measured)."""

    slot: tuple[int, int]
    out: str | None = None
    dumps: str | None = None  # the instruction worker: the folder of its callgrind dumps
    then: ThenExtras | None = None  # a timed worker that makes the extras after its timing (plugin.extras_pass)

    def argument(self) -> str:
        """The worker's ``--gpuperf-role=<JSON>`` argument."""
        dumps = {"dumps": self.dumps} if self.dumps is not None else {}
        then = {"then": self.then.to_json()} if self.then is not None else {}
        return f"{ROLE_OPTION}=" + json.dumps({"replicate": slot_text(self.slot), "out": self.out, **dumps, **then})


_SLOT_LETTERS = {EXTRAS: "x", INSTRUCTION_WORKER: "i"}


def slot_text(slot: tuple[int, int]) -> str:
    """A slot as its role writes it: ``"k/P"``, ``"x/P"`` (the extras process), ``"i/P"`` (the
    instruction worker); :func:`parse_slot` reads it back."""
    k, p = slot
    return f"{_SLOT_LETTERS.get(k, k)}/{p}"


def parse_slot(raw: str, what: str = ROLE_OPTION) -> tuple[int, int]:
    """``"k/P"`` -> ``(k, P)``, ``"x/P"`` -> ``(EXTRAS, P)``, ``"i/P"`` -> ``(INSTRUCTION_WORKER, P)``.
    Raises ``ValueError`` naming ``what`` for a malformed value."""
    letters = {v: k for k, v in _SLOT_LETTERS.items()}
    try:
        k_text, p_text = raw.split("/")
        k, p = (letters[k_text] if k_text in letters else int(k_text)), int(p_text)
    except ValueError:
        raise ValueError(f"{what} {raw!r}: expected k/P, x/P or i/P, e.g. 0/3") from None
    if (k < 0 and k_text not in letters) or p < 1:
        raise ValueError(f"{what} {raw!r}: expected 0 <= k and P >= 1 (k >= P: a process added for "
                         f"inconclusive benchmarks)")
    return k, p


def worker_role(value: str | None) -> WorkerRole | None:
    """The role a ``--gpuperf-role`` value gives (None: this process is no replicate worker).
    Raises ``ValueError`` naming the option for a value that is not ``{"replicate": "k/P", "out": ...}``."""
    if not value:
        return None
    try:
        data = json.loads(value)
        raw, out, dumps, then = data["replicate"], data.get("out"), data.get("dumps"), data.get("then")
    except (ValueError, TypeError, KeyError, AttributeError):
        raise ValueError(f'{ROLE_OPTION} {value!r}: expected {{"replicate": "k/P", "out": "<file>"}}') from None
    slot = parse_slot(str(raw))
    if then is not None:
        if slot[0] < 0:
            raise ValueError(f'{ROLE_OPTION} {value!r}: only a timed worker (k/P) makes the extras after its timing ("then")')
        then = ThenExtras.from_json(then, ROLE_OPTION)
    return WorkerRole(slot, None if out is None else str(out), None if dumps is None else str(dumps), then)


def slot_of(config: Any) -> tuple[int, int] | None:
    """This pytest process's replicate slot (``config``: a ``pytest.Config``), None outside a worker."""
    role = worker_role(config.getoption(ROLE_OPTION, None))
    return None if role is None else role.slot


def worker_options(options: Any, slot: tuple[int, int]) -> Any:
    """A timed worker's options (a :class:`~pytest_gpuperf.core.options.BenchOptions`): ``max_time``
    split over the n processes that measure the benchmark (P, or its ``processes`` option when
    smaller; ``warmup_time`` too), and ``min_rounds`` as well: ``ceil(min_rounds / n)`` in each, at
    least :data:`MIN_PROCESS_ROUNDS` (issue 45: a call longer than ``max_time / (n * min_rounds)``
    made ``min_rounds`` rounds in *each* process, 3x the rounds one process makes, and 5x
    pytest-benchmark's 5 on ml4gw's suite of long torch calls). The extras process keeps the options
    as they are (it times nothing)."""
    k, p = slot
    if k in (EXTRAS, INSTRUCTION_WORKER):
        return options
    n = min(options.processes or p, p)
    rounds = min(options.max_rounds, max(MIN_PROCESS_ROUNDS, -(-options.min_rounds // n)))
    return dataclasses.replace(options, max_time=options.max_time / n, warmup_time=options.warmup_time / n,
                               min_rounds=min(options.min_rounds, rounds))


def report_result(key: str, result: Any, environment: Mapping[str, Any], nodeid: str = "",
                  out: str | None = None) -> None:
    """In a worker: append ``{"key": ..., "entry": <report entry>, "nodeid": <its test>, "notes":
    [...]}`` to ``out`` (its role's file; nothing when None) and flush it. ``notes``: the result's
    notes (what the extras process could not do, e.g. an op profile over the budget), which the
    report entry does not carry."""
    if not out:
        return
    from pytest_gpuperf.storage.codec import encode_result

    entry = encode_result(result, environment=dict(environment), git_commit=None, timestamp_utc="")
    with open(out, "a", encoding="utf-8") as f:
        f.write(json.dumps({"key": key, "entry": entry, "nodeid": nodeid, "notes": list(result.notes or ())}) + "\n")
        f.flush()


def report_failure(nodeid: str, exc: BaseException, out: str | None = None) -> None:
    """In a worker: append ``{"failed": nodeid, "error": "Type: message", "where": frames}`` to ``out``
    for a test that raised (:func:`pytest_gpuperf.core.containment.describe`), so that the coordinator
    can say why the benchmark has no result from this worker (nothing when ``out`` is None)."""
    if not out:
        return
    from pytest_gpuperf.core.containment import describe

    error, where = describe(exc)
    with open(out, "a", encoding="utf-8") as f:
        f.write(json.dumps({"failed": nodeid, "error": error, "where": where}) + "\n")
        f.flush()


def read_results(path: Path) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """What a worker appended: report entries by key (:func:`report_result`; with its test's
    ``nodeid``) and, by node id, why
    a test raised (:func:`report_failure`, ``"Type: message (at file.py:12 in f)"``); a torn last
    line (the worker died while writing it) is left out."""
    out: dict[str, dict[str, Any]] = {}
    failures: dict[str, str] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return out, failures
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if "failed" in rec:
            failures[rec["failed"]] = rec["error"] + (f" (at {rec['where']})" if rec.get("where") else "")
        elif "key" in rec:  # (not the line an extras pass starts with, plugin.extras_pass)
            out[rec["key"]] = dict(rec["entry"], nodeid=rec.get("nodeid") or "", notes=rec.get("notes") or [])
    return out, failures


def default_processes(cli: str | None, ini: str | None) -> int:
    """The number of worker processes: ``--gpuperf-processes``, else ini ``gpuperf_processes``, else
    ``GPUPERF_PROCESSES``, else :data:`DEFAULT_PROCESSES`. Raises ``ValueError`` naming the source
    for anything but an integer >= 1."""
    for source, value in (("--gpuperf-processes", cli), ("ini gpuperf_processes", ini),
                          (PROCESSES_ENV, os.environ.get(PROCESSES_ENV))):
        if value is None or not str(value).strip():
            continue
        text = str(value).strip()
        if not text.isdigit() or int(text) < 1:
            raise ValueError(f"{source} {value!r}: expected an integer >= 1 (1: measure in this process only)")
        return int(text)
    return DEFAULT_PROCESSES


@dataclass
class WorkerRun:
    """What one worker process left: its index, exit code, log file, report entries by full id
    (``module::benchmark id``), when it crashed or timed out why, and how long it took (``seconds``,
    its start-up included: what the escalation's :class:`~pytest_gpuperf.verdict.escalation.TimeBudget`
    expects a process to cost)."""

    index: int
    returncode: int | None
    log: Path
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    error: str | None = None
    failures: dict[str, str] = field(default_factory=dict)
    stopped: bool = False  # stopped by Ctrl-C or SIGTERM while it ran (:class:`Stopped`)
    seconds: float | None = None  # its wall time, start-up included (s)
    launched: float | None = None  # when it was started (time.time(), s)
    then_out: str | None = None  # a timed worker that made the extras after its timing: that pass's file

    def failure_of(self, key: str) -> str | None:
        """Why this worker's test of benchmark ``key`` (``module::test id[::name]``) raised, or None."""
        for nodeid, why in self.failures.items():
            if key == nodeid or key.startswith(nodeid + "::"):
                return why
        return None

    def tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def run_extras(args: Sequence[str], cwd: Path, processes: int, log_dir: Path, count: int = 1,
               progress: Callable[[str], None] = lambda _s: None, timeout_s: float | None = None,
               op_profile: bool = False, stem: str = "extras", nproc: int | None = None,
               only: Sequence[int] | None = None) -> list[WorkerRun]:
    """Run ``count`` extras processes one after another (role slot ``x/P``; logs
    ``<log_dir>/extras-j.log``): each times nothing and measures every benchmark's peak memory,
    counts and bottleneck from :data:`EXTRA_CALLS` calls each, so that no timed process runs them
    before or between its timed rounds. Their ``index`` is ``-1 - j``. ``op_profile``: they profile
    the ops too, sharing the profile's cycles (hidden ``--gpuperf-op-profile COUNT``: each profiles
    its share, :func:`~pytest_gpuperf.measure.opprofile.cycles_for`, and the result pools every
    process's cycles, :func:`merge`); ``stem``: their logs' name (``<stem>-j.log``).
    ``nproc``: each is a torchrun launch (:func:`~pytest_gpuperf.core.launch.launcher`); ``only``:
    those of the ``count`` (j) alone, whose extras no timed process made after its timing
    (:mod:`pytest_gpuperf.plugin.extras_pass`). Raises :class:`ReplicateError` when one
    cannot be started."""
    timeout_s = timeout_s or WORKER_TIMEOUT_S
    log_dir.mkdir(parents=True, exist_ok=True)
    runs = []
    start = time.monotonic()
    what = "peak memory, counts, bottleneck" + (", op profile" if op_profile else "")
    args = [*args, f"--gpuperf-op-profile={count}"] if op_profile else list(args)
    for j in (range(count) if only is None else only):
        try:
            run = _run_one(args, cwd, f"x/{processes}", log_dir / f"{stem}-{j}", -1 - j, timeout_s,
                           f"extras process {j + 1}/{count}", None, nproc)
        except Stopped as exc:
            raise Stopped(runs + exc.runs, exc.why) from None
        runs.append(run)
        progress(f"gpuperf: extras process {j + 1}/{count} done ({what} of "
                 f"{len(run.entries)} benchmark(s), {time.monotonic() - start:.0f} s)"
                 + (f": {run.error}" if run.error else ""))
    return runs


def _run_one(args: Sequence[str], cwd: Path, slot: str, stem: Path, index: int, timeout_s: float, name: str,
             wait: Callable[[Path, subprocess.Popen], int | None] | None, nproc: int | None = None, *,
             wrap: Sequence[str] = (), env: Mapping[str, str] | None = None, dumps: str | None = None,
             then: Any = None) -> WorkerRun:
    """One worker process (``python -m pytest <args> --gpuperf-role=...`` with ``<slot>``, or with
    ``nproc`` a torchrun launch of it, :func:`~pytest_gpuperf.core.launch.launcher`; results in ``<stem>.jsonl``, output in
    ``<stem>.log``): its :class:`WorkerRun`, with what it reported. ``wait(report, proc)`` waits
    for it (its exit code, None when it timed out); default :func:`_wait`. ``wrap``: a command the
    worker runs under (valgrind's, for the instruction worker), with ``env`` added to its
    environment and ``dumps`` (its dump folder) in its role; ``then``: the
    :class:`ThenExtras` of a timed worker that makes the extras
    after its timing."""
    report, log = stem.with_suffix(".jsonl"), stem.with_suffix(".log")
    report.unlink(missing_ok=True)
    if then is not None:
        Path(then.out).unlink(missing_ok=True)
    env = dict(os.environ, **{PROCESSES_ENV: "1"}, **(env or {}))
    cmd = [*wrap, *launcher(nproc), *args, WorkerRole(parse_slot(slot), str(report), dumps, then).argument()]
    run = WorkerRun(index, None, log, launched=time.time(), then_out=None if then is None else str(then.out))
    started = time.monotonic()
    with open(log, "wb") as out:
        try:
            proc = popen_dying_with_parent(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, start_new_session=bool(nproc))
        except OSError as exc:
            raise ReplicateError(f"could not start a worker process ({' '.join(cmd[:3])}): {exc}") from None
        try:
            with _killed_with_us(proc):
                run.returncode = (wait(report, proc) if wait is not None
                                  else _wait(proc, timeout_s, report, None, 0, 1, 0.0, None))
        except (KeyboardInterrupt, Terminated) as exc:
            run.error, run.stopped = f"{name} was stopped ({stop_reason(exc)})", True
            run.entries, run.failures = read_results(report)  # what it measured before the stop
            raise Stopped([run], stop_reason(exc)) from None
        if run.returncode is None:
            run.error = f"{name} timed out after {timeout_s:g} s and was stopped"
    run.seconds = time.monotonic() - started
    if run.error is None and run.returncode not in (0, 1, 5):  # 0 ok, 1 tests failed, 5 none collected
        run.error = f"{name} exited with code {run.returncode}"
    run.entries, run.failures = read_results(report)  # also from a worker that crashed: what it measured before
    return run


@contextlib.contextmanager
def _killed_with_us(proc: subprocess.Popen) -> Iterator[None]:
    """While waiting for a worker: a SIGTERM to this process (a cancelled CI job, ``timeout``) ends it
    as Ctrl-C does, and a worker still running when the wait ends that way is killed, so that no
    worker outlives its coordinator. The previous SIGTERM handler is restored afterwards."""
    with sigterm_raises():  # (not the main thread: no handler, only the cleanup below)
        try:
            yield
        finally:
            if proc.poll() is None:
                _stop(proc)


def run_workers(args: Sequence[str], cwd: Path, processes: int, log_dir: Path,
                progress: Callable[[str], None] = lambda _s: None, timeout_s: float | None = None,
                tick: Callable[[str], None] | None = None, first: int = 0, count: int | None = None,
                nproc: int | None = None, then: Mapping[int, Any] | None = None) -> list[WorkerRun]:
    """Run ``processes`` replicate workers one after another (``python -m pytest <args>`` in ``cwd``
    with the role slot ``k/P``; with ``first``/``count``, workers ``first`` .. ``first + count - 1``
    of a session of P = ``processes``: the processes added for inconclusive benchmarks; each appends its results to ``<log_dir>/worker-k.jsonl`` as it
    measures them); their output goes to ``<log_dir>/worker-k.log``. A worker that exits with
    another code than 0, 1 or 5 (pytest's "passed", "tests failed", "none collected"), or times out,
    gets ``error`` set; what every worker measured before it stopped is read. Raises :class:`ReplicateError` when a worker cannot be started at all,
    and :class:`Stopped` (with the runs so far) on Ctrl-C or SIGTERM.

    ``progress`` gets one line per worker process when it is done (the time elapsed and about how
    long is left); ``tick``, when given, one line each time the running worker finished another
    benchmark (polled every :data:`POLL_S`; for a line rewritten in place on a terminal). ``nproc``:
    each worker is a torchrun launch of that many ranks (:func:`~pytest_gpuperf.core.launch.launcher`).
    ``then``: worker k -> the :class:`ThenExtras` of the extras it
    makes after its timing (:func:`pytest_gpuperf.plugin.extras_pass.collect` reads them)."""
    timeout_s = timeout_s or WORKER_TIMEOUT_S
    log_dir.mkdir(parents=True, exist_ok=True)
    runs = []
    start = time.monotonic()
    count = processes if count is None else count
    last = first + count
    for k in range(first, last):
        planned = len(runs[0].entries) if runs else None

        def wait(report: Path, proc: subprocess.Popen, k: int = k, planned: int | None = planned) -> int | None:
            return _wait(proc, timeout_s, report, tick, k, last, start, planned)

        try:
            run = _run_one(args, cwd, f"{k}/{processes}", log_dir / f"worker-{k}", k, timeout_s,
                           f"worker process {k + 1}/{last}", wait, nproc, then=(then or {}).get(k))
        except Stopped as exc:
            raise Stopped(runs + exc.runs, exc.why) from None
        runs.append(run)
        elapsed = time.monotonic() - start
        left = elapsed / len(runs) * (last - k - 1)  # the workers so far, per worker, times those left
        progress(f"gpuperf: worker process {k + 1}/{last} done ({len(run.entries)} benchmark(s)"
                 + (", then their peak memory, counts, bottleneck" if run.then_out else "") + ", "
                 f"{elapsed:.0f} s elapsed" + (f", about {left:.0f} s left" if left else "") + ")"
                 + (f": {run.error}" if run.error else ""))
    return runs


def _wait(proc: subprocess.Popen, timeout_s: float, report: Path, tick: Callable[[str], None] | None,
          k: int, processes: int, start: float, planned: int | None) -> int | None:
    """Wait for worker ``k``'s process: its exit code, or None when it ran past ``timeout_s`` (then it
    is killed). With ``tick``: a line each time its report file grew (benchmarks done of ``planned``,
    the count of the first worker, when known)."""
    deadline = time.monotonic() + timeout_s
    seen = -1

    def step() -> None:  # a line when the report grew since the last one
        nonlocal seen
        done = _lines(report) if tick is not None else seen
        if done != seen:
            seen = done
            of = f" of {planned}" if planned else ""
            tick(f"gpuperf: worker process {k + 1}/{processes}: {done}{of} benchmark(s) measured, "
                 f"{time.monotonic() - start:.0f} s elapsed")

    while True:
        try:
            code = proc.wait(timeout=POLL_S if tick is not None else max(0.0, deadline - time.monotonic()))
            step()  # its last benchmark too, when it ended between two polls
            return code
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                _stop(proc)
                return None
        step()


def _lines(path: Path) -> int:
    """The number of complete lines in ``path`` (0 when it does not exist yet)."""
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


#: The key of a replicated session's results under which :func:`unreported_message` says why a
#: benchmark that no worker process reported has no result.
UNREPORTED = "*"
#: The key under which a replicated session's results say how Ctrl-C or SIGTERM stopped the
#: measuring: a benchmark without a result is then not measured, and its test is skipped.
STOPPED = "!"


def unreported_message(runs: Sequence[WorkerRun]) -> str | None:
    """Why a benchmark that none of the worker processes ``runs`` reported has no result, when one of
    them crashed or timed out (it may have stopped before it): a test then fails with this, prefixed
    with its id, rather than passing unmeasured. None when none failed: the benchmark did not run in
    the workers, and its test decides."""
    failed = [r for r in runs if r.error]
    if not failed:
        return None
    r = failed[0]
    return (f"measured by none of {len(runs)} worker processes: {r.error}; nothing is compared or stored. "
            f"Its output ({r.log}):\n{r.tail()}")


def missing_message(key: str, runs: Sequence[WorkerRun]) -> str | None:
    """Why ``key`` has no complete set of replicates, or None when every worker reported it, or
    none did and none failed (the benchmark did not run in the workers: its test then decides, e.g.
    it fails there as it failed in them). A worker that crashed or timed out before reporting it
    is named with its output."""
    have = [r for r in runs if key in r.entries]
    if len(have) == len(runs):
        return None
    failed = [r for r in runs if key not in r.entries and r.error]
    if failed:
        return _crash_text(key, failed, len(runs))
    if not have:
        return None
    lacking = [r for r in runs if key not in r.entries]
    why = lacking[0].failure_of(key)
    said = f": its test raised {why}" if why else ""
    return (f"{key}: measured by {len(have)} of {len(runs)} worker processes (worker {lacking[0].index + 1} did not "
            f"report it{said}; its output: {lacking[0].log}); nothing is compared or stored from a partial set of "
            f"replicates")


#: Worker processes added at a time for the benchmarks whose evidence is thin (:func:`needs_more`).
MORE_BATCH = 2
#: An update run adds processes while the baseline's 99% CI (of the geometric mean of its process
#: medians) reaches beyond this many thresholds (default threshold 5%: ±10%).
BASELINE_WIDTH = 2.0


def needs_more(result: Any, updating: bool, *, replicate: bool = False, max_processes: int | None = None,
               by_time: bool = False) -> bool:
    """Whether a decided replicated result would gain from more worker processes: comparing, a timing
    verdict ``inconclusive`` whose CI straddles both 1 and 1 + threshold (the evidence is thin, not
    contradictory), and, with ``replicate``, a ``regressed`` verdict (a regression decided on the
    first processes alone is measured again in processes started later: a slowdown of the machine
    that lasts through the first processes must not fail the test, :func:`replicate_regression`);
    updating, a baseline whose 99% CI of the geometric mean of its process medians
    (:func:`pytest_gpuperf.verdict.stats.geometric_mean_ci`) reaches beyond
    ±:data:`BASELINE_WIDTH` x threshold (a comparison's CI adds the current side's spread to the
    baseline's, so a wider baseline leaves a slowdown of twice the threshold undecided). A result with a ``processes`` option keeps
    its count; a string (no result) never gets more.

    With ``max_processes`` (the most processes it may have in all: ``--gpuperf-max-processes``, or
    with ``by_time`` fewer, as many as the time left for more allows,
    :class:`~pytest_gpuperf.verdict.escalation.TimeBudget`), a thin result that even that many could
    not decide, by the prediction of :mod:`pytest_gpuperf.verdict.escalation` from its spread so
    far, gets none (:func:`cannot_decide` says why); a regression to replicate always does."""
    if isinstance(result, str) or result.comparison is None or result.options.processes is not None:
        return False
    if replicate and not updating and result.comparison.verdict.value == "regressed":
        return True
    return _thin(result, updating) and (max_processes is None
                                        or _undecidable(result, updating, max_processes, by_time)[0] is None)


def _thin(result: Any, updating: bool) -> bool:
    """The evidence test of :func:`needs_more` (a result with a comparison and no ``processes`` option)."""
    c, threshold = result.comparison, result.options.threshold
    if updating:
        from pytest_gpuperf.verdict.stats import geometric_mean_ci

        ci = geometric_mean_ci(baseline_levels(result), result.options.alpha)
        return ci is not None and (ci[2] / ci[0] - 1 > BASELINE_WIDTH * threshold)
    lo, hi = c.ratio_ci or (None, None)
    return (c.verdict.value == "inconclusive" and lo is not None and hi is not None
            and lo < 1 + threshold and hi > 1)


def baseline_levels(result: Any) -> tuple[float, ...]:
    """The process levels whose spread says whether a recorded baseline is precise enough (an
    update run's :func:`needs_more`): the wall clock's process medians, or, on the CPU backend where
    every process has its level on the reference clock (``ref_medians``), those when their spread
    is narrower. A later comparison that the wall clock leaves inconclusive is decided on the
    reference clock (:func:`pytest_gpuperf.verdict.gate.with_reference`), so a baseline precise on
    that clock needs no more processes (issue 45: "no process that cannot help")."""
    from pytest_gpuperf.verdict.escalation import log_sd

    wall = tuple(result.process_medians_ms or ())
    ref = tuple(result.ref_medians or ())
    if len(ref) != len(wall) or len(ref) < 2:
        return wall
    sd_wall, sd_ref = log_sd(wall), log_sd(ref)
    return ref if sd_wall is not None and sd_ref is not None and sd_ref < sd_wall else wall


def cannot_decide(result: Any, updating: bool, max_processes: int, by_time: bool = False) -> str | None:
    """Why more worker processes, ``max_processes`` in all (``by_time``: as many as the time left
    for more allows), cannot decide a result whose evidence
    is thin (:func:`needs_more` without ``max_processes``), as the note its comparison gets
    (:func:`not_escalated`); None when they can, or it is no such result. The prediction
    (:mod:`pytest_gpuperf.verdict.escalation`) reads the spread seen so far optimistically: comparing, the CI of
    the ratio at ``max_processes`` current processes against the baseline's; updating, the CI of
    the new baseline's geometric mean at ``max_processes`` processes."""
    return _undecidable(result, updating, max_processes, by_time)[0] if needs_more(result, updating) else None


def not_escalated(result: Any, updating: bool, max_processes: int, by_time: bool = False) -> Any:
    """``result`` with the note of :func:`cannot_decide` after its comparison's own note (as it is
    when that is None); where no number of processes would decide it (the baseline's spread alone
    is too wide), without the advice to measure in more processes."""
    from pytest_gpuperf.verdict.advice import Advice

    note, hopeless = (_undecidable(result, updating, max_processes, by_time) if needs_more(result, updating)
                      else (None, False))
    if note is None:
        return result
    c = result.comparison
    advice = tuple(a for a in c.advice if a is not Advice.MORE_PROCESSES) if hopeless else c.advice
    return result.replace(comparison=dataclasses.replace(c, note=f"{c.note}; {note}" if c.note else note, advice=advice))


#: How a note names the limit on more processes (:func:`_undecidable`): the count, or the time.
_BY_COUNT = "--gpuperf-max-processes"
_BY_TIME = "as many as the time left for more allows, --gpuperf-more-processes-time"


def _undecidable(result: Any, updating: bool, max_processes: int, by_time: bool = False) -> tuple[str | None, bool]:
    """The note of :func:`cannot_decide` for a thin result (None: more processes can decide it) and
    whether no number of current processes would (comparing only). ``by_time``: ``max_processes``
    is what the time left allows; at or under the processes measured so far none is started."""
    from pytest_gpuperf.core.units import format_pct, format_ratio
    from pytest_gpuperf.verdict import escalation

    c, threshold, limit = result.comparison, result.options.threshold, _BY_TIME if by_time else _BY_COUNT
    have = len(result.process_medians_ms or ()) or (c.processes or 0)  # measured so far, set-aside ones too
    if by_time and max_processes <= have:  # not one more process fits in the time left
        p = None if updating else escalation.predict(c, threshold, have)
        detect = f"; the smallest slowdown this run could detect is {format_pct(p.detectable)}" if p else ""
        return (f"not measured in more worker processes: the time for them (--gpuperf-more-processes-time) "
                f"had run out{detect}"), False
    if updating:
        b = escalation.predict_baseline(baseline_levels(result), BASELINE_WIDTH * threshold,
                                        max_processes, result.options.alpha)
        if b is None or b.narrows:
            return None, False
        more = (f"about {b.needed} would" if b.needed is not None
                else f"not even {escalation.MAX_PREDICTED} would")
        return (f"more worker processes cannot make this baseline precise enough: at {b.processes_max} processes "
                f"({limit}) the 99% CI of its geometric mean would still be {b.width * 100:.0f}% "
                f"wide, over the {b.limit * 100:.0f}% ({BASELINE_WIDTH:g} x threshold) asked for; {more}"), False
    p = escalation.predict(c, threshold, max_processes)
    if p is None or p.decides:
        return None, False
    lo, hi = p.ci
    if p.needed is not None:
        more = f"about {p.needed} would ({'--gpuperf-more-processes-time, ' if by_time else ''}{_BY_COUNT})"
    else:
        more = (f"no number would: the baseline's {p.baseline_processes} processes alone leave it that wide "
                f"(record the baseline in more processes, --gpuperf-processes)")
    at = f"at {p.processes_max} processes ({_BY_TIME})" if by_time else f"at {p.processes_max} processes"
    return (f"more worker processes cannot decide it: {at} the ratio's 99% CI would "
            f"still be about {format_ratio(lo)}-{format_ratio(hi)}, spanning 1 and 1+T={format_ratio(1 + threshold)}; "
            f"{more}; the smallest slowdown this run could detect is {format_pct(p.detectable)}"), p.needed is None


def replicate_regression(ab_confirms: bool, already_more: bool) -> bool:
    """Whether a stored-stage regression must be measured again in later worker processes before it
    fails: when no A/B against the baselines' commit will confirm it (``ab_confirms`` False: no git
    history, a baseline from uncommitted changes, ``--gpuperf-no-ab-confirm``) and its processes
    were all measured in the first batch (``already_more`` False). The first P processes run one
    after another, but a slowdown of the host that lasts minutes (another job on the machine) can
    cover all of them; processes started after the decision are the replication Kalibera and Jones
    (2013) ask for at the level where the variance is. Measured on real suites: the false failures
    of the stored stage were all decided on the first 3 processes (docs/verdicts.md)."""
    return not ab_confirms and not already_more


def extras_for(key: str, extras: Sequence[WorkerRun]) -> tuple[list[dict[str, Any]], str | None]:
    """The extras processes' entries of benchmark ``key`` and, when none has one, why (the
    exception its test raised there, or how the process ended; None when no extras process ran)."""
    have = [r.entries[key] for r in extras if key in r.entries]
    if have or not extras:
        return have, None
    r = extras[0]
    why = r.failure_of(key)
    if why:
        return [], f"its test raised {why} in the extras process (output: {r.log})"
    return [], (f"{r.error} before measuring it (output: {r.log})" if r.error else
                f"the extras process did not measure it (output: {r.log})")


def _crash_text(key: str, failed: Sequence[WorkerRun], total: int) -> str:
    r = failed[0]
    return (f"{key}: measured by {total - len(failed)} of {total} worker processes: {r.error}; nothing is "
            f"compared or stored from a partial set of replicates. Its output ({r.log}):\n{r.tail()}")


def merge(key: str, entries: Sequence[Mapping[str, Any]], extras: Sequence[Mapping[str, Any]] | None = None,
          extras_missing: str | None = None) -> Any:
    """One :class:`~pytest_gpuperf.verdict.result.BenchResult` (without verdicts) from the report entries of
    the P workers that measured benchmark ``key``, in process order: samples concatenated in that
    order, ``process_medians_ms`` each worker's median, rounds summed, the interleaved probe's
    level the median of the workers' (same probe only), telemetry worker 0's (its
    ``other_cpu_cores`` the host load over all workers' timed spans together,
    :func:`pytest_gpuperf.measure.telemetry.pooled_host_load`). Torchrun launches
    (``--gpuperf-nproc``): each rank's median over the launches (:func:`_merged_ranks`), the
    communication profile the first extras launch's.

    The extras come from ``extras``, the entries of the extras processes (:func:`run_extras`):
    counts combined over all their calls (:func:`~pytest_gpuperf.verdict.counts.combine_counts`: a
    count that differed is ``varied``), peak memory the highest of their peaks (the lowest in
    ``peak_memory_low_bytes`` when they differ), the bottleneck the first one's, and what they could
    not measure. With ``extras`` empty and ``extras_missing`` (why the extras processes have no
    entry for it) the extras are unavailable for that reason; with ``extras`` None (workers that
    measured their own extras, before issue 31) they are worker 0's. Raises ``ValueError`` for no entries."""
    from pytest_gpuperf.storage.codec import decode_result
    from pytest_gpuperf.verdict.result import BenchResult

    if not entries:
        raise ValueError(f"{key}: no worker measured it")
    results = [decode_result(dict(e)) for e in entries]
    first = results[0]
    samples = tuple(v for r in results for v in r.samples_ms)
    from pytest_gpuperf.measure.telemetry import pooled_host_load

    telemetry = dict(first.telemetry) if first.telemetry else None
    probes = [r.probe_ms for r in results if r.probe_ms is not None and r.probe == first.probe]
    import statistics

    load = pooled_host_load([r.telemetry for r in results])  # each worker alone may time too little to count
    if telemetry is not None and load is not None:
        telemetry["other_cpu_cores"] = load
    return BenchResult.from_samples(
        samples, name=first.name, device=first.device, rounds=sum(r.rounds for r in results),
        calls_per_round=first.calls_per_round, warmup_calls=first.warmup_calls, benchmark_id=first.benchmark_id,
        group=first.group, options=first.options, telemetry=telemetry, extra_info=first.extra_info,
        process_medians_ms=tuple(r.median_ms for r in results),
        cpu=_merged_cpu(results),
        gpu_clock=_merged_clock(results),
        probe_ms=statistics.median(probes) if probes else None, probe=first.probe if probes else None,
        ref_medians=_merged_reference(results),
        ranks=_merged_ranks(results),
        notes=tuple(dict.fromkeys(str(n) for e in extras or () for n in e.get("notes") or ())),  # the extras' (once)
        **(_extras_of([first]) if extras is None else _extras_of([decode_result(dict(e)) for e in extras],
                                                                 extras_missing, first.options)),
    )


def _merged_cpu(results: Sequence[Any]) -> Any:
    """The CPU time of the workers' results, in process order
    (:meth:`~pytest_gpuperf.verdict.cputime.CpuTime.merged`; None unless every worker read it)."""
    from pytest_gpuperf.verdict.cputime import CpuTime

    return CpuTime.merged([r.cpu for r in results])


def _merged_reference(results: Sequence[Any]) -> tuple[float, ...] | None:
    """The reference clock of the workers' results (:mod:`pytest_gpuperf.verdict.refclock`): each
    one's level, in process order; None unless every worker has one, all with the first's probe."""
    levels = [r.ref_medians for r in results]
    if any(not lv or len(lv) != 1 for lv in levels) or any(r.probe != results[0].probe for r in results):
        return None
    return tuple(lv[0] for lv in levels)


def _merged_clock(results: Sequence[Any]) -> Any:
    """The SM clock of the workers' results, in process order
    (:meth:`~pytest_gpuperf.verdict.gpuclock.GpuClock.merged`; None unless every worker read it)."""
    from pytest_gpuperf.verdict.gpuclock import GpuClock

    return GpuClock.merged([r.gpu_clock for r in results])


def _merged_ranks(results: Sequence[Any]) -> Any:
    """The per-rank timing of torchrun launches (``--gpuperf-nproc``):
    :func:`~pytest_gpuperf.verdict.distributed.merged_ranks` of the results' ``ranks``."""
    from pytest_gpuperf.verdict.distributed import merged_ranks

    return merged_ranks([r.ranks for r in results])


def _extras_of(results: Sequence[Any], missing: str | None = None, options: Any = None) -> dict[str, Any]:
    """The extras fields of a merged result from the results that measured them (see :func:`merge`)."""
    from pytest_gpuperf.core.containment import BOTTLENECK, COUNTS, MEMORY, Unavailable
    from pytest_gpuperf.verdict.counts import combine_counts

    if not results:
        if missing is None:
            return {}
        parts = [MEMORY] + ([COUNTS] if options is not None and options.counts else []) + \
            ([BOTTLENECK] if options is not None and options.expect_bottleneck else [])
        return {"unavailable": {p: Unavailable(p, missing) for p in parts}}
    unavailable: dict[str, Any] = {}
    for r in results:
        for part, why in r.unavailable.items():
            unavailable.setdefault(part, why)
    peaks = [p for r in results for p in (r.peak_memory_bytes, r.peak_memory_low_bytes) if p is not None]
    counts = [r.counts for r in results if r.counts is not None]
    high = max(peaks) if peaks and "peak memory" not in unavailable else None
    low = min(peaks) if high is not None else None
    profiles = [r.op_profile for r in results if isinstance(r.op_profile, dict)]
    return dict(peak_memory_bytes=high, peak_memory_low_bytes=low if low != high else None,
                counts=combine_counts(counts) if counts and "counts" not in unavailable else None,
                bottleneck=next((r.bottleneck for r in results if r.bottleneck is not None), None),
                communication=next((r.communication for r in results if r.communication is not None), None),
                unavailable=unavailable,
                op_profile={"floor_ms": max(float(p.get("floor_ms") or 0.0) for p in profiles),  # every process's cycles
                            "cycles": [c for p in profiles for c in p.get("cycles") or ()]} if profiles else None)


def groups_of(entries: Sequence[Mapping[str, Any]]) -> list[list[float]]:
    """Each worker's samples (ms), in process order."""
    return [[float(v) for v in e["samples_ms"]] for e in entries]


def decide(key: str, entries: Sequence[Mapping[str, Any]], baseline: Any, options: Any, *,
           baseline_file: str | None, can_fail: bool, memory_text: str | None = None,
           extras: Sequence[Mapping[str, Any]] | None = None, extras_missing: str | None = None,
           priors: Any = None) -> Any:
    """The merged result of ``key`` with its verdicts against ``baseline`` (a
    :class:`~pytest_gpuperf.storage.baseline.BaselineEntry` or None): the timing verdict of
    :func:`pytest_gpuperf.verdict.gate.evaluate` on the processes' samples (timing by
    :func:`~pytest_gpuperf.verdict.gate.judge_replicates`), with the memory verdict and the count gate. ``options``: the benchmark's resolved options (the user's
    session's, not a worker's). ``extras``/``extras_missing``: the extras processes' entries of
    ``key`` and why there are none (see :func:`merge`). ``priors``: the session's spreads
    (:class:`~pytest_gpuperf.verdict.moderation.Priors`) each clock's verdict is read with."""
    from pytest_gpuperf.verdict.gate import Evidence, Reference, evaluate
    from pytest_gpuperf.verdict.machine import host_busy, throttle_verdict

    merged = merge(key, entries, extras, extras_missing)
    evidence = Evidence(process_samples_ms=tuple(tuple(g) for g in groups_of(entries)),
                        peak_memory_bytes=merged.peak_memory_bytes, counts=merged.counts,
                        throttle=throttle_verdict(merged.telemetry), device=merged.device,
                        peak_memory_low_bytes=merged.peak_memory_low_bytes, cpu=merged.cpu,
                        host_busy=host_busy(merged.telemetry), gpu_clock=merged.gpu_clock,
                        ref_medians=merged.ref_medians, probe=merged.probe, probe_ms=merged.probe_ms)
    ev = evaluate(evidence, Reference.stored(baseline, baseline_file), options, benchmark_id=key, can_fail=can_fail,
                  max_memory_text=memory_text, priors=priors)
    comparison, memory, counts = ev.comparison, ev.memory, ev.counts
    return merged.replace(comparison=comparison, memory_comparison=memory, count_comparison=counts,
                         options=options)



def measured_by_ab(result: Any) -> bool:
    """Whether a stored-stage result is measured again by A/B against its baseline's commit, when
    one can run (``--gpuperf-ab-confirm``, a committed baseline, the commit in this clone): a
    ``regressed`` verdict, to confirm it, and an ``inconclusive`` one with a ratio, to settle it. An
    inconclusive comparison against a stored baseline has the baseline's own process spread in its
    CI, which no process of this run can shrink; A/B measures both sides now, interleaved, so a
    shift of the machine between the recording and this run cancels (issue 45: on real suites the
    stored stage left 66-91% of unchanged benchmark-runs inconclusive on a noisy VM). Such a result
    gets no more processes of the stored stage (:func:`pytest_gpuperf.plugin.coordinator._thin`)."""
    if isinstance(result, str) or result.comparison is None or result.comparison.ratio is None:
        return False
    return result.comparison.verdict.value in ("regressed", "inconclusive")


def with_ab_confirmation(stored: Any, ab: Any, label: str, problem: str | None = None,
                         bisect_command: str | None = None) -> Any:
    """The final result of a stored-baseline regression (or inconclusive comparison,
    :func:`measured_by_ab`) after its A/B against the baseline's own commit (``label``:
    ``"3f2a9c1 (3f2a9c1)"``): with an A/B comparison (``ab``, a result of
    :func:`pytest_gpuperf.ab.results.ab_result`), the verdict is the A/B one, its samples B's, and the
    message says what the stored comparison said and whether the A/B ``confirmed`` the regression
    (or ``settled`` the inconclusive comparison: decided it either way); without one (``problem``
    says why: the commit is missing, side A failed) the stored result, with that note. Memory,
    counts, bottleneck and the process medians stay the stored run's; the per-op diff is the A/B
    run's. A regression's note ends with ``bisect_command``, the command that finds the commit
    (``gpuperf bisect <commit> HEAD -- <id>``)."""
    from pytest_gpuperf.core.containment import OP_DIFF
    from pytest_gpuperf.verdict.compare import Verdict
    from pytest_gpuperf.core.units import format_ratio
    from pytest_gpuperf.reporting.messages import comparison_note

    s = stored.comparison
    said = f"the stored baseline said {s.verdict.value} {format_ratio(s.ratio)}" if s.ratio else "the stored baseline"
    settling = s.verdict is Verdict.INCONCLUSIVE
    a = ab.comparison if ab is not None else None
    if a is None or a.verdict is Verdict.NO_BASELINE or a.ratio is None:
        why = problem or (comparison_note(a) if a is not None else "") or "no A/B result"
        note = f"not {'settled' if settling else 'confirmed'} by A/B against {label}: {why}; the stored verdict stands"
        return stored.replace(comparison=dataclasses.replace(s, ab_confirmation=note))
    from pytest_gpuperf.reporting.messages import ab_summary

    if settling:
        word = "not settled" if a.verdict is Verdict.INCONCLUSIVE else "settled"
    else:
        word = "confirmed" if a.verdict is Verdict.REGRESSED else "not confirmed"
    note = f"{said}; {word} by A/B against the baseline's commit on this machine: {ab_summary(a)} ({a.verdict.value})"
    if a.verdict is Verdict.REGRESSED and bisect_command:
        note += f"; find the commit: {bisect_command}"
    return ab.replace(
        comparison=dataclasses.replace(a, ab_confirmation=note), memory_comparison=stored.memory_comparison,
        count_comparison=stored.count_comparison, counts=stored.counts, peak_memory_bytes=stored.peak_memory_bytes,
        instructions=stored.instructions, instruction_comparison=stored.instruction_comparison,
        bottleneck=stored.bottleneck, telemetry=stored.telemetry, process_medians_ms=stored.process_medians_ms,
        options=stored.options, unavailable={**stored.unavailable, **{k: v for k, v in ab.unavailable.items()
                                                                       if k == OP_DIFF}})
