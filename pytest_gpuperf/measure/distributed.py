"""This process's rank under ``torchrun``: the process-role object of a distributed session (issue 35).

``torchrun`` (``torch.distributed.run``) starts one process per rank and tells each who it is in
its environment: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT`` (torch's "environment variable initialization"). :meth:`Ranks.from_environment`
reads them once, at configure time; outside torchrun, or with ``WORLD_SIZE`` 1, there is no
:class:`Ranks` and nothing here runs.

A :class:`Ranks` object does the few collectives the plugin needs, each on the default process
group (which :meth:`Ranks.start` creates when the user's code has not: gloo on the CPU, nccl on
CUDA, with a timeout, so that a rank that never arrives fails the collective instead of hanging):

* :meth:`decide` and :meth:`choose`: rank 0's decision (stop timing rounds, calls per round) sent
  to every rank; this is the lockstep of the round loop (:mod:`pytest_gpuperf.measure.timing`),
  and the collective doubles as the barrier before each timed round (never inside it);
* :meth:`gather`: every rank's object to every rank (``all_gather_object``), once per benchmark
  for the samples, once per session for the collected tests, once per test for the outcomes.

**Faults.** Every collective waits a bounded time (on a gloo group; see :class:`Ranks` for nccl):
``rank_timeout_s`` (``--gpuperf-rank-timeout``) where the other ranks may still be in their own
setup (the session's collectives, the first collective of each benchmark), then the benchmark's
budget (:func:`~pytest_gpuperf.verdict.distributed.collective_budget`) until its test's outcome
is agreed. The wait is the group's own timeout (``ProcessGroup.set_timeout``): gloo then ends
the operation itself (a ``Work.wait(timeout)`` on gloo raises at its timeout but leaves the
operation running until the group's timeout, holding the process at exit that long). The first
collective that fails marks the session broken; the ranks still there then take a roll call
(``monitored_barrier`` on a gloo side group) and rank 0 tells them which ranks did not answer.
During a benchmark a rank that has not reached the plugin's next collective in time writes
every thread's traceback to its stderr (``faulthandler``), so a hung rank shows where it hangs;
in each test's setup, call and teardown, one that has not reached the exchange of the phase's
outcome in time does too (:func:`watch_phase`). A rank whose test raised leaves its exception
for the others (:func:`note_raised`), whose failure messages then start with it
(:func:`broken_text`).

Imports torch only inside its methods.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

#: ``--gpuperf-rank-timeout``'s default (s): how long a rank waits for the others where they may
#: still be in their own setup, and the process group's timeout when the plugin creates it.
DEFAULT_TIMEOUT_S = 300.0
#: Bytes of rank 0's roll-call result sent to the other ranks (JSON, zero-padded).
ANSWER_BYTES = 1 << 16

#: torchrun's variables this module reads (the launcher's, not the plugin's).
RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


class DistributedFault(RuntimeError):
    """A collective of the session failed: a rank crashed, hung past its wait, or ran other code.
    Every later collective of the session raises it at once (one wait paid, not one per test)."""


class RankEnvironmentError(ValueError):
    """torchrun's variables are present but unusable (the message names the variable and value)."""


@dataclass
class Ranks:
    """This process's place in a ``torchrun`` launch, and the collectives of a distributed session.

    ``rank``/``world_size``: global; ``local_rank``/``local_world_size``: on this node (the device
    index on CUDA: ``cuda:LOCAL_RANK``); ``master``: ``MASTER_ADDR:MASTER_PORT`` (for messages).
    ``rank_timeout_s``: ``--gpuperf-rank-timeout`` (s): the wait of the collectives where the
    other ranks may still be in their own setup (the session's, the first of each benchmark) and
    the timeout of the group :meth:`start` creates. ``watchdog_file``: a file descriptor for the
    hung-rank tracebacks (None: no watchdog, e.g. pytest's own ``faulthandler_timeout`` is set);
    ``watchdog_dir``: the folder on this node where every rank's goes when all ranks are on one node
    (``rank<k>.txt``: the other ranks quote a hung rank's in their failure messages), None when
    each goes to its rank's stderr.
    ``owns_group``: :meth:`start` created the default process group (and :meth:`stop` destroys it).
    ``broken``: why a collective failed (None: none did); after that every collective raises
    :class:`DistributedFault` at once. ``shifts``: per benchmark so far, each rank's median / stored.

    The waits are set on the default group with ``ProcessGroup.set_timeout`` when it is a gloo
    group whose own timeout can be read back (to restore it after each benchmark): one the plugin
    created, or the suite's own. On nccl the group's own timeout stays (a shorter one makes nccl's
    watchdog abort the whole process instead of failing the collective); the roll call still runs
    on gloo side groups.
    """

    rank: int
    world_size: int
    local_rank: int = 0
    local_world_size: int = 1
    master: str = ""
    rank_timeout_s: float = DEFAULT_TIMEOUT_S
    watchdog_file: int | None = field(default=None, compare=False)
    watchdog_dir: str | None = field(default=None, compare=False)
    owns_group: bool = field(default=False, compare=False)
    broken: str | None = field(default=None, compare=False)
    _resting_s: float | None = field(default=None, compare=False, repr=False)  # the group's own timeout; None: not managed
    _wait_s: float | None = field(default=None, compare=False, repr=False)  # the group's timeout now (managed)
    _budget_s: float | None = field(default=None, compare=False, repr=False)  # the benchmark's; None: in none
    _in_step: bool = field(default=False, compare=False, repr=False)  # the benchmark's first collective passed
    _watching: tuple[float, float] | None = field(default=None, compare=False, repr=False)  # (armed at, delay s)
    _side: Any = field(default=None, compare=False, repr=False)  # the roll call's two gloo groups
    _answered: tuple[int, ...] = field(default=(), compare=False, repr=False)  # got rank 0's roll-call answer
    _missing: tuple[int, ...] = field(default=(), compare=False, repr=False)  # did not answer the roll call
    shifts: list[tuple[float, ...]] = field(default_factory=list, compare=False, repr=False)  # see the doc above

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> "Ranks | None":
        """The rank torchrun gave this process, or None outside torchrun (no ``WORLD_SIZE``) or with
        ``WORLD_SIZE`` 1. Raises :class:`RankEnvironmentError` naming a variable that is not a
        whole number, or a rank outside ``0..WORLD_SIZE-1``."""
        env = os.environ if environ is None else environ
        raw_ws = env.get("WORLD_SIZE")
        if raw_ws is None or not raw_ws.strip():
            return None

        def number(name: str, default: int | None = None) -> int:
            raw = env.get(name)
            if raw is None or not raw.strip():
                if default is None:
                    raise RankEnvironmentError(f"{name} is not set while WORLD_SIZE={raw_ws!r} is: expected the "
                                               f"variables torchrun sets ({', '.join(RANK_VARIABLES)})")
                return default
            if not raw.strip().isdigit():
                raise RankEnvironmentError(f"{name}={raw!r}: expected a whole number >= 0 (as torchrun sets it)")
            return int(raw)

        world = number("WORLD_SIZE")
        if world <= 1:
            return None
        rank = number("RANK")
        if rank >= world:
            raise RankEnvironmentError(f"RANK={rank} with WORLD_SIZE={world}: expected a rank from 0 to {world - 1}")
        local = number("LOCAL_RANK", rank)
        return cls(rank=rank, world_size=world, local_rank=local,
                   local_world_size=number("LOCAL_WORLD_SIZE", world),
                   master=f"{env.get('MASTER_ADDR', '')}:{env.get('MASTER_PORT', '')}")

    @property
    def is_writer(self) -> bool:
        """Rank 0: the one rank that judges and writes baselines, reports and history."""
        return self.rank == 0

    @property
    def roll_call_s(self) -> float:
        """How long (s) rank 0's roll call after a failed collective waits for the other ranks."""
        from pytest_gpuperf.verdict.distributed import roll_call_timeout

        return roll_call_timeout(self.rank_timeout_s)

    def start(self, device_type: str = "cpu") -> None:
        """Create the default process group when the user's code has not (backend ``nccl`` for
        ``device_type`` ``"cuda"``, else ``gloo``), from torchrun's environment, with a timeout of
        ``rank_timeout_s`` s (on CUDA, make ``cuda:LOCAL_RANK`` the current device first); then,
        whoever created it, the roll call's two gloo side groups (every rank creates them here).
        Raises ``RuntimeError`` naming the rank and the master address when the group cannot be
        created."""
        import datetime

        import torch.distributed as dist

        if not dist.is_available():
            raise RuntimeError("torch.distributed is not available in this torch build: cannot run under torchrun")
        if not dist.is_initialized():
            backend = "gloo"
            if device_type == "cuda":
                import torch

                torch.cuda.set_device(self.local_rank)
                backend = "nccl"
            try:
                dist.init_process_group(backend, timeout=datetime.timedelta(seconds=self.rank_timeout_s))
            except Exception as exc:  # noqa: BLE001 - said once, with where it was
                raise RuntimeError(f"rank {self.rank} of {self.world_size}: could not create the {backend} process "
                                   f"group at {self.master}: {type(exc).__name__}: {exc}") from exc
            self.owns_group = True
        self._resting_s = self._own_timeout_s()
        self._wait_s = self._resting_s
        try:  # the roll call's groups: a collective of every rank, right after the default group exists
            made = datetime.timedelta(seconds=self.rank_timeout_s)
            self._side = (dist.new_group(backend="gloo", timeout=made), dist.new_group(backend="gloo", timeout=made))
            for group in self._side:  # the other ranks' wait for rank 0 in the roll call
                group.set_timeout(datetime.timedelta(seconds=2 * self.roll_call_s))
        except Exception:  # noqa: BLE001 - no roll call then: a failure message says the ranks are not known
            self._side = None

    def _own_timeout_s(self) -> float | None:
        """The default group's own timeout (s) when the plugin manages its waits (a gloo group: the
        one it created, or the suite's own whose timeout it can read back), else None."""
        import torch.distributed as dist

        if dist.get_backend() != "gloo":
            return None
        if self.owns_group:
            return self.rank_timeout_s
        try:  # torch has no public getter; _set_pg_timeout reads the backend the same way
            import torch

            return float(dist.group.WORLD._get_backend(torch.device("cpu")).options._timeout.total_seconds())
        except Exception:  # noqa: BLE001 - unreadable: the group keeps its own timeout for every wait
            return None

    def stop(self) -> None:
        """Destroy the roll call's groups, and the default process group when :meth:`start` created
        it (else leave it to its owner)."""
        self._unwatch()
        import torch.distributed as dist

        if not dist.is_initialized():
            self._side, self.owns_group = None, False
            return
        if self.owns_group:
            dist.destroy_process_group()  # every group
        elif self._side is not None:
            for group in self._side:
                try:
                    dist.destroy_process_group(group)
                except Exception:  # noqa: BLE001 - already gone with its owner's
                    pass
        self._side, self.owns_group = None, False

    # ------------------------------------------------------------------------- a benchmark's waits
    def begin_benchmark(self, budget_s: float) -> None:
        """A benchmark starts measuring: its first collective waits ``rank_timeout_s``, each later
        one (until :meth:`end_benchmark`) ``budget_s`` s
        (:func:`~pytest_gpuperf.verdict.distributed.collective_budget`); the hung-rank watchdog is
        armed now (for the first collective's wait: the function may run before it, e.g. a first
        call that compiles) and again at each collective."""
        self._budget_s, self._in_step = float(budget_s), False
        if self.broken is None:  # else its collectives fail at once
            self._watch(self._wait_now())

    def end_benchmark(self) -> None:
        """The benchmark's test is over (its outcome agreed): disarm the watchdog and give the
        default group its own timeout back. Nothing when no benchmark was measured."""
        if self._budget_s is None:
            return
        self._budget_s, self._in_step = None, False
        self._unwatch()
        self._set_wait(self._resting_s)

    def _wait_now(self) -> float | None:
        """How long (s) the next collective waits (None: the group's own timeout, not known here)."""
        if self._resting_s is None:  # not managed: the group's own timeout
            return self.rank_timeout_s if self.owns_group else None
        if self._budget_s is not None and self._in_step:
            return self._budget_s
        return self.rank_timeout_s

    def _set_wait(self, seconds: float | None) -> None:
        """Make ``seconds`` the default group's timeout (a managed group only; a no-op when it is already)."""
        if self._resting_s is None or seconds is None or seconds == self._wait_s:
            return
        import datetime

        import torch.distributed as dist

        try:
            dist.group.WORLD.set_timeout(datetime.timedelta(seconds=seconds))
            self._wait_s = seconds
        except Exception:  # noqa: BLE001 - the group is gone (the session's end): nothing left to bound
            pass

    def _watch(self, wait_s: float | None) -> None:
        """During a benchmark: arm the watchdog (``faulthandler.dump_traceback_later``) for this
        collective's wait plus a grace (:func:`~pytest_gpuperf.verdict.distributed.watchdog_delay`).

        Re-armed for the same wait at most once per ``min(1 s, grace / 2)`` (each arming restarts
        faulthandler's thread, about 0.1 ms): the dump then comes at least half the grace after
        the wait of the collective in progress, so a rank that only waits in it fails it first."""
        if self.watchdog_file is None or self._budget_s is None or wait_s is None:
            return
        import faulthandler

        from pytest_gpuperf.verdict.distributed import watchdog_delay

        delay, now = watchdog_delay(wait_s, self.rank_timeout_s), time.monotonic()
        if self._watching is not None:
            armed_at, armed = self._watching
            if armed == delay and now - armed_at < min(1.0, (delay - wait_s) / 2):
                return
        faulthandler.dump_traceback_later(delay, exit=False, file=self.watchdog_file)
        self._watching = (now, delay)

    def _unwatch(self) -> None:
        if self._watching is not None:
            import faulthandler

            faulthandler.cancel_dump_traceback_later()
            self._watching = None

    # ------------------------------------------------------------------------- the collectives

    def barrier(self) -> None:
        """Wait for every rank (nothing when the default process group is gone or was never made)."""
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and self.broken is None:
            self._collective("barrier", dist.barrier)

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (picklable), in rank order, on every rank (``all_gather_object``)."""
        import torch.distributed as dist

        out: list[Any] = [None] * self.world_size
        self._collective("all_gather_object", lambda: dist.all_gather_object(out, obj))
        return out

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank (``broadcast_object_list``); the others' ``obj`` is ignored."""
        import torch.distributed as dist

        box = [obj if self.rank == 0 else None]
        self._collective("broadcast_object_list", lambda: dist.broadcast_object_list(box, src=0))
        return box[0]

    def decide(self, local: bool) -> bool:
        """Rank 0's ``local`` decision on every rank (the round loop's stop; a barrier too)."""
        return bool(self._broadcast_numbers([1 if local else 0])[0])

    def choose(self, local: int) -> int:
        """Rank 0's ``local`` number on every rank (calls per round)."""
        return int(self._broadcast_numbers([local])[0])

    def _broadcast_numbers(self, values: list[int]) -> list[int]:
        """A small integer tensor from rank 0 (cheaper than pickling objects), on the group's device."""
        import torch
        import torch.distributed as dist

        device = "cpu"
        if dist.get_backend() == "nccl":
            device = f"cuda:{torch.cuda.current_device()}"
        t = torch.tensor(values, dtype=torch.int64, device=device)
        self._collective("broadcast", lambda: dist.broadcast(t, src=0))
        return [int(v) for v in t.tolist()]

    def _collective(self, name: str, op: Any) -> Any:
        """Run the collective ``op()`` with its wait (:meth:`_wait_now`) as the group's timeout.

        When it fails (a rank crashed or hung past the wait), record why in :attr:`broken`, with
        the ranks that did not answer (:meth:`_roll_call`), and raise :class:`DistributedFault`;
        raise it at once when an earlier collective failed. The first collective of a benchmark
        that passes makes the benchmark's budget the wait of the next ones; outside a benchmark
        the group's own timeout is restored after each collective."""
        if self.broken is not None:
            raise DistributedFault(f"not measured in step: an earlier collective failed: {self.broken}")
        wait = self._wait_now()
        self._set_wait(wait)
        self._watch(wait)
        try:
            out = op()
        except Exception as exc:  # noqa: BLE001 - the collective's own error, kept in the message
            self._unwatch()  # this rank is not hung: it is handling the fault
            self.broken = broken_text(self, name, exc, self._roll_call(wait))
            # the hung ranks' tracebacks quoted once, not again by the later tests' messages
            raise DistributedFault(self.broken + hung_tracebacks(self.watchdog_dir, self._missing)
                                   + raised_elsewhere(self.watchdog_dir, self.rank)) from exc
        if self._budget_s is None:
            self._set_wait(self._resting_s)
        elif not self._in_step:  # every rank is in this benchmark now: the budget from here on
            self._in_step = True
            self._set_wait(self._wait_now())
        return out

    # ------------------------------------------------------------------------- the roll call

    def _roll_call(self, waited_s: float | None) -> str:
        """After a failed collective: which ranks did not answer, as the failure message says it
        (:func:`~pytest_gpuperf.verdict.distributed.roll_call_text`). Every rank still there calls
        it once (the session is broken after)."""
        from pytest_gpuperf.verdict.distributed import roll_call_text

        if self._side is None:
            return "the ranks that did not answer are not known (no roll-call group)"
        try:
            answer = self._call_roll()
        except Exception as exc:  # noqa: BLE001 - on another rank: rank 0 sent nothing in time
            if self.rank == 0:
                return roll_call_text(None, waited_s, text=f"{type(exc).__name__}: {exc}")
            return roll_call_text(None, waited_s, caller_answered=False, roll_call_s=2 * self.roll_call_s)
        missing = answer.get("missing")
        self._missing = tuple(int(r) for r in missing or ())
        return roll_call_text(None if missing is None else tuple(missing), waited_s, text=answer.get("text", ""),
                              watchdog_dir=self.watchdog_dir, raised=tuple(raised_notes(self.watchdog_dir)))

    def _call_roll(self) -> dict[str, Any]:
        """The roll call: ``torch.distributed.monitored_barrier`` on the first side group (rank 0
        waits up to :attr:`roll_call_s` s for the other ranks, and its error names those that did
        not arrive, :func:`~pytest_gpuperf.verdict.distributed.missing_ranks_of`; the others wait
        up to twice that for rank 0), then rank 0 sends
        ``{"missing": [...] or None, "text": ...}`` to every rank that answered, on the second side
        group (gloo closes a group's connections when one of its waits times out, so the answer
        cannot go on the first). Raises on a rank that got no answer from rank 0 in time."""
        import datetime

        import torch
        import torch.distributed as dist

        from pytest_gpuperf.verdict.distributed import missing_ranks_of

        call, answer_group = self._side
        wait = datetime.timedelta(seconds=self.roll_call_s)
        buf = torch.zeros(ANSWER_BYTES, dtype=torch.uint8)
        if self.rank != 0:
            try:  # the other ranks wait the group's own timeout (2x the roll call's) for rank 0
                dist.monitored_barrier(group=call, timeout=wait, wait_all_ranks=True)
            except Exception:  # noqa: BLE001 - rank 0's roll call ended without a release: its answer says why
                pass
            dist.irecv(buf, src=0, group=answer_group).wait(timeout=datetime.timedelta(seconds=2 * self.roll_call_s))
            self._answered = (self.rank,)
            return json.loads(bytes(buf.tolist()).rstrip(b"\0").decode("utf-8", "replace") or "{}")
        text = ""
        try:
            dist.monitored_barrier(group=call, timeout=wait, wait_all_ranks=True)
            missing: tuple[int, ...] | None = ()
        except Exception as exc:  # noqa: BLE001 - its message names the ranks that did not arrive
            text = str(exc)
            missing = missing_ranks_of(text)
        answer = {"missing": None if missing is None else list(missing),
                  "text": (text.strip().splitlines() or [""])[0][:300]}
        data = json.dumps(answer).encode()
        if len(data) > ANSWER_BYTES:
            data = json.dumps({"missing": None, "text": f"{len(missing or ())} ranks did not answer"}).encode()
        buf[:len(data)] = torch.tensor(list(data), dtype=torch.uint8)
        deadline = time.monotonic() + 2 * self.roll_call_s
        answered = []
        for r in range(1, self.world_size):
            if missing is not None and r in missing:
                continue
            try:
                dist.isend(buf, dst=r, group=answer_group).wait(
                    timeout=datetime.timedelta(seconds=max(0.1, deadline - time.monotonic())))
                answered.append(r)
            except Exception:  # noqa: BLE001 - that rank left since: its own message says so
                pass
        self._answered = tuple(answered)
        return answer

    def farewell(self) -> None:
        """At the end of a session in which a collective failed (the last barrier is skipped then):
        rank 0 tells each rank that got its roll-call answer that it is done (its summary and
        reports are written), and those ranks wait for that, up to ``rank_timeout_s``, before they
        exit, since torchrun stops every rank as soon as one exits and would cut rank 0's output
        short. Nothing in a session without a fault; never raises."""
        if self.broken is None or self._side is None or not self._answered:
            return
        import datetime

        import torch
        import torch.distributed as dist

        wait = datetime.timedelta(seconds=self.rank_timeout_s)
        token = torch.zeros(1, dtype=torch.uint8)
        try:
            if self.rank != 0:
                dist.irecv(token, src=0, group=self._side[1], tag=1).wait(timeout=wait)
                return
            for r in self._answered:
                dist.isend(token, dst=r, group=self._side[1], tag=1).wait(timeout=wait)
        except Exception:  # noqa: BLE001 - rank 0 or that rank is gone: nothing more to wait for
            pass


def hung_tracebacks(folder: str | None, missing: tuple[int, ...]) -> str:
    """The tracebacks the ``missing`` ranks (they did not answer the roll call) wrote to their
    watchdog files in ``folder`` (all ranks on this node; None: elsewhere), as a failure message
    quotes them (:func:`~pytest_gpuperf.verdict.distributed.hung_rank_tracebacks`); ``""`` for
    none. The roll call waited past their watchdog's delay, so a hung rank has written its own by
    then; a rank that never made its file (it crashed at start) is left out."""
    if folder is None or not missing:
        return ""
    from pytest_gpuperf.verdict.distributed import hung_rank_tracebacks, last_dump, watchdog_path

    dumps = {}
    for r in missing:
        try:
            with open(watchdog_path(folder, r), encoding="utf-8", errors="replace") as f:
                dumps[r] = last_dump(f.read())
        except OSError:
            continue
    return hung_rank_tracebacks(dumps)


def broken_text(ranks: Ranks, name: str, exc: BaseException, roll: str) -> str:
    """Why the session is broken (:attr:`Ranks.broken`): ``ranks``'s collective ``name`` failed
    with ``exc``, the roll call found ``roll``, and the ranks whose test raised are the headline
    (their notes, :func:`note_raised`; :func:`~pytest_gpuperf.verdict.distributed.fault_text`).
    Called after the roll call: a rank that raised left its note before its next collective."""
    from pytest_gpuperf.verdict.distributed import fault_text

    first = (str(exc).strip().splitlines() or [""])[0][:300]
    raised = {r: note["summary"] for r, note in raised_notes(ranks.watchdog_dir).items() if note["summary"]}
    return fault_text(ranks.rank, ranks.world_size, name, f"{type(exc).__name__}: {first}", roll, raised)


def watch_phase(ranks: Ranks, on: bool) -> None:
    """A test's setup, call or teardown starts (``on``), or the ranks agreed on its outcome (not
    ``on``): arm the hung-rank watchdog for the other ranks' wait for that outcome (the rank
    timeout) plus the grace (:func:`~pytest_gpuperf.verdict.distributed.watchdog_delay`), or
    disarm it. So a rank that hangs in a fixture, or in a test outside its benchmark, writes its
    traceback where the other ranks' failure messages say (issue 46). A benchmark arms its own
    (:meth:`Ranks.begin_benchmark`); nothing without a watchdog, during a benchmark, or once a
    collective failed."""
    if not on:
        ranks._unwatch()
        return
    wait = ranks._wait_now()
    if ranks.watchdog_file is None or ranks.broken is not None or ranks._budget_s is not None or wait is None:
        return
    import faulthandler

    from pytest_gpuperf.verdict.distributed import watchdog_delay

    delay = watchdog_delay(wait, ranks.rank_timeout_s)
    faulthandler.dump_traceback_later(delay, exit=False, file=ranks.watchdog_file)
    ranks._watching = (time.monotonic(), delay)


def note_raised(folder: str | None, rank: int, text: str, summary: str = "") -> None:
    """This ``rank``'s test raised (``text``: its failure, the tail; ``summary``: the exception in
    one line, :func:`~pytest_gpuperf.verdict.distributed.exception_line`): leave it where the other
    ranks of this node look when their collectives fail (:func:`raised_elsewhere`,
    :func:`broken_text`), so that they name the rank and quote its exception instead of only "a
    rank crashed or hung" (issue 46). An empty ``text`` removes the note (the ranks agreed on the
    test's outcome: the note would be stale by the next fault). Nothing without a shared folder
    (ranks on several nodes: each rank's own output says it)."""
    if folder is None:
        return
    from pytest_gpuperf.verdict.distributed import raised_path

    path = raised_path(folder, rank)
    try:
        if not text:
            if os.path.exists(path):
                os.unlink(path)
            return
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"summary": summary, "text": text}, f)
    except OSError:
        pass


def raised_notes(folder: str | None) -> dict[int, dict[str, str]]:
    """The notes the ranks of this node left with :func:`note_raised`: rank -> ``{"summary",
    "text"}``; empty without a folder. An unreadable note is left out."""
    if folder is None:
        return {}
    import glob
    import re

    from pytest_gpuperf.verdict.distributed import raised_path

    notes = {}
    for path in sorted(glob.glob(raised_path(folder, "*"))):
        m = re.search(r"rank(\d+)-raised\.txt$", path)
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                note = json.load(f)
        except (OSError, ValueError):
            continue
        if m is not None and isinstance(note, dict):
            notes[int(m.group(1))] = {k: str(note.get(k) or "") for k in ("summary", "text")}
    return notes


def raised_elsewhere(folder: str | None, rank: int) -> str:
    """What the other ranks of this node left with :func:`note_raised`, as a failure message quotes
    it (``"\nrank 1's test raised:\n<its failure>"``); ``""`` for none."""
    return "".join(f"\nrank {r}'s test raised:\n{note['text'].strip()}"
                   for r, note in sorted(raised_notes(folder).items()) if r != rank and note["text"].strip())
