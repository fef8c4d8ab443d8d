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

Imports torch only inside its methods.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping

#: The process group's timeout (s) when the plugin creates it: a collective that waits longer for
#: a rank (crashed, hung, or running other tests) raises instead of hanging.
DEFAULT_TIMEOUT_S = 300.0

#: torchrun's variables this module reads (the launcher's, not the plugin's).
RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


class DistributedFault(RuntimeError):
    """A collective of the session failed: a rank crashed, hung past the process group's timeout,
    or ran other code. Every later collective of the session raises it at once (one timeout paid,
    not one per test)."""


class RankEnvironmentError(ValueError):
    """torchrun's variables are present but unusable (the message names the variable and value)."""


@dataclass
class Ranks:
    """This process's place in a ``torchrun`` launch, and the collectives of a distributed session.

    ``rank``/``world_size``: global; ``local_rank``/``local_world_size``: on this node (the device
    index on CUDA: ``cuda:LOCAL_RANK``); ``master``: ``MASTER_ADDR:MASTER_PORT`` (for messages).
    ``owns_group``: :meth:`start` created the default process group (and :meth:`stop` destroys it).
    ``broken``: why a collective failed (None: none did); after that every collective raises
    :class:`DistributedFault` at once.
    """

    rank: int
    world_size: int
    local_rank: int = 0
    local_world_size: int = 1
    master: str = ""
    owns_group: bool = field(default=False, compare=False)
    broken: str | None = field(default=None, compare=False)
    timeout_s: float | None = field(default=None, compare=False)  # set when start() made the group

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
    def key_suffix(self) -> str:
        """What a baseline folder's device key gets (``-ws2``): 2-rank and 8-rank baselines never mix."""
        from pytest_gpuperf.verdict.scaling import world_size_suffix

        return world_size_suffix(self.world_size)

    def start(self, device_type: str = "cpu", timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        """Create the default process group when the user's code has not (backend ``nccl`` for
        ``device_type`` ``"cuda"``, else ``gloo``), from torchrun's environment, with a timeout of
        ``timeout_s`` s; on CUDA, make ``cuda:LOCAL_RANK`` the current device first. Raises
        ``RuntimeError`` naming the rank and the master address when it cannot be created."""
        import datetime

        import torch.distributed as dist

        if not dist.is_available():
            raise RuntimeError("torch.distributed is not available in this torch build: cannot run under torchrun")
        if dist.is_initialized():
            return
        backend = "gloo"
        if device_type == "cuda":
            import torch

            torch.cuda.set_device(self.local_rank)
            backend = "nccl"
        self.timeout_s = timeout_s
        try:
            dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
        except Exception as exc:  # noqa: BLE001 - said once, with where it was
            raise RuntimeError(f"rank {self.rank} of {self.world_size}: could not create the {backend} process "
                               f"group at {self.master}: {type(exc).__name__}: {exc}") from exc
        self.owns_group = True

    def stop(self) -> None:
        """Destroy the default process group when :meth:`start` created it (else leave it to its owner)."""
        if not self.owns_group:
            return
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
        self.owns_group = False

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
        """Run the collective ``op()``; when it fails (a rank crashed or hung past the timeout),
        record why in :attr:`broken`, with the rank that did not answer where it can be told
        (:meth:`_missing_ranks`), and raise :class:`DistributedFault`. Raises it at once when an
        earlier collective failed."""
        if self.broken is not None:
            raise DistributedFault(f"not measured in step: an earlier collective failed: {self.broken}")
        try:
            return op()
        except Exception as exc:  # noqa: BLE001 - the collective's own error, kept in the message
            within = f" (process group timeout {self.timeout_s:g} s)" if self.timeout_s is not None else ""
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            self.broken = (f"rank {self.rank} of {self.world_size}: {name} failed{within}, a rank crashed or hung: "
                           f"{type(exc).__name__}: {first}"
                           + self._missing_ranks())
            raise DistributedFault(self.broken) from exc

    def _missing_ranks(self) -> str:
        """Which rank did not answer, where it can be told: with two ranks, the other one (empty
        otherwise; torchrun's own report names a rank that exited)."""
        if self.world_size != 2:
            return ""
        return f"; rank {1 - self.rank} did not answer (crashed, hung, or still running)"
