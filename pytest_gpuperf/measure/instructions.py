"""Instruction counts under valgrind's callgrind (issue 48): the measuring side.

A worker process runs under ``valgrind --tool=callgrind --instr-atstart=no --collect-atstart=no``
(:func:`valgrind_command`): Python starts and imports torch with valgrind's instrumentation off
(several times faster than instrumented), then :func:`start_instrumentation` turns it on once and
:func:`measure_many` measures every benchmark of the session in that one process. Per benchmark:
``warmup`` calls (instrumented, not counted), then counting is toggled on around ``number`` calls
and off again, and the counts are dumped into a file of their own named by the benchmark
(``DUMP_STATS_AT``; callgrind appends ``.1``, ``.2``... to the ``--callgrind-out-file`` name, one per
dump, in dump order). An empty function measured the same way (the ``__loop__`` dump) gives the
loop's own cost, which :func:`pytest_gpuperf.verdict.instructions.per_call` subtracts.

How the client requests are made (``CALLGRIND_TOGGLE_COLLECT`` etc. are C macros: an inline
instruction sequence that valgrind recognises and a CPU executes as a no-op):

* ``"ctypes"`` (x86-64 Linux): the 23-byte amd64 client-request sequence of ``valgrind.h``
  (``rolq $3,$13,$61,$51 %rdi; xchgq %rbx,%rbx``) is put into an executable page and called through
  ``ctypes``; it issues any callgrind request, including ``START_INSTRUMENTATION`` and
  ``DUMP_STATS_AT`` (a named dump), without torch or a compiler.
* ``"torch"`` (the fallback where the ctypes path is missing, e.g. aarch64): torch's
  ``torch._C._valgrind_toggle()`` / ``_valgrind_toggle_and_dump_stats()`` (what
  ``torch.utils.benchmark.Timer.collect_callgrind`` uses; valid where
  ``torch._C._valgrind_supported_platform()``). They only toggle collection and dump (unnamed,
  attributed by dump order), so this worker needs ``--instr-atstart=yes`` (slower start).

Sources: torch.utils.benchmark's ``collect_callgrind`` and its ``timer_callgrind_template.py``;
valgrind's ``callgrind.h``/``valgrind.h`` (request codes ``VG_USERREQ_TOOL_BASE('C','T')+n``);
CodSpeed's simulation mode (CPU benchmarks counted under callgrind); PyTorch's
``benchmarks/instruction_counts``.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

#: callgrind's client requests: VG_USERREQ_TOOL_BASE('C', 'T') + n (valgrind/callgrind.h)
_CT = (ord("C") << 24) | (ord("T") << 16)
DUMP_STATS, ZERO_STATS, TOGGLE_COLLECT, DUMP_STATS_AT, START_INSTRUMENTATION, STOP_INSTRUMENTATION = (
    _CT + n for n in range(6))
RUNNING_ON_VALGRIND = 0x1001  # core request (valgrind.h): returns the nesting depth, 0 natively
#: amd64: mov rax,rdi; mov rdx,rsi; the special preamble (rolq 3,13,61,51 rdi); xchg rbx,rbx;
#: mov rax,rdx; ret. Natively the rotations total 128 bits and xchg rbx,rbx is a no-op.
_AMD64_REQUEST = bytes.fromhex("4889f8" "4889f2" "48c1c703" "48c1c70d" "48c1c73d" "48c1c733" "4887db"
                               "4889d0" "c3")
#: the name of the dump of the empty loop (the loop's own cost)
LOOP = "__loop__"
#: environment of the worker: what makes counts repeat between processes. glibc's fastbins and
#: per-thread cache off: with them, the heap's state when measuring starts (which differs between
#: some processes) sent the same malloc down other paths, an A/A spread of up to 2.1% (0.13% without;
#: docs/instructions.md)
WORKER_ENV = {"PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "GLIBC_TUNABLES": "glibc.malloc.mxfast=0:glibc.malloc.tcache_count=0"}


class ValgrindUnavailable(RuntimeError):
    """valgrind (or callgrind) cannot run here; the message says why, once, for the session."""


class _ClientRequests:
    """Client requests through the amd64 sequence in an executable page (see the module doc)."""

    def __init__(self) -> None:
        self._page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        self._page.write(_AMD64_REQUEST)
        address = ctypes.addressof(ctypes.c_char.from_buffer(self._page))
        self._call = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t)(address)
        self._keep: list[Any] = []

    def request(self, code: int, *args: int, default: int = 0) -> int:
        """Issue client request ``code`` with up to 5 word arguments; natively returns ``default``."""
        words = (ctypes.c_size_t * 6)(code, *args, *([0] * (5 - len(args))))
        return int(self._call(ctypes.addressof(words), default))

    def dump_at(self, name: str) -> None:
        """``CALLGRIND_DUMP_STATS_AT(name)``: dump (and zero) the counts, ``name`` in the file's ``desc:``."""
        text = ctypes.create_string_buffer(name.encode("utf-8", "replace"))
        self.request(DUMP_STATS_AT, ctypes.addressof(text))


def ctypes_supported() -> bool:
    """True where the ctypes client-request path works: x86-64 Linux (the sequence is amd64 code)."""
    return sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")


@dataclass
class Counter:
    """The client requests one worker uses: ``backend`` is ``"ctypes"`` or ``"torch"`` (module doc).

    Create with :func:`counter`. ``toggle()`` flips counting; ``dump(name)`` writes (and zeroes)
    the counts so far into the next dump file (named in it with the ctypes backend only).
    """

    backend: str
    _requests: _ClientRequests | None = None
    _torch_c: Any = None

    def running_on_valgrind(self) -> bool:
        """True when this process runs under valgrind (ctypes: ``RUNNING_ON_VALGRIND``; torch: assumed)."""
        if self._requests is not None:
            return self._requests.request(RUNNING_ON_VALGRIND) > 0
        return True

    def start_instrumentation(self) -> None:
        """``CALLGRIND_START_INSTRUMENTATION`` (ctypes only; with torch the worker starts instrumented)."""
        if self._requests is not None:
            self._requests.request(START_INSTRUMENTATION)

    def toggle(self) -> None:
        """``CALLGRIND_TOGGLE_COLLECT``: counting on if it was off, off if it was on."""
        if self._requests is not None:
            self._requests.request(TOGGLE_COLLECT)
        else:
            self._torch_c._valgrind_toggle()

    def toggle_and_dump(self, name: str) -> None:
        """Counting off (it must be on) and the counts dumped; ``name`` goes into the dump (ctypes)."""
        if self._requests is not None:
            self._requests.request(TOGGLE_COLLECT)
            self._requests.dump_at(name)
        else:
            self._torch_c._valgrind_toggle_and_dump_stats()


def counter(backend: str = "auto") -> Counter:
    """The client requests of this process: ``"auto"`` picks ``"ctypes"`` where :func:`ctypes_supported`, else ``"torch"``.

    Raises :class:`ValgrindUnavailable` when the torch backend is needed but torch lacks
    ``_valgrind_toggle`` or ``torch._C._valgrind_supported_platform()`` is False, and
    ``ValueError`` for an unknown backend.
    """
    if backend not in ("auto", "ctypes", "torch"):
        raise ValueError(f"backend={backend!r}: expected 'auto', 'ctypes' or 'torch'")
    if backend == "ctypes" or (backend == "auto" and ctypes_supported()):
        if not ctypes_supported():
            raise ValgrindUnavailable(f"the ctypes client requests need x86-64 Linux, not {platform.machine()}")
        return Counter("ctypes", _requests=_ClientRequests())
    import torch  # the fallback only

    c = torch._C
    if not hasattr(c, "_valgrind_toggle") or not c._valgrind_supported_platform():
        raise ValgrindUnavailable("torch has no valgrind client requests on this platform "
                                  "(torch._C._valgrind_supported_platform() is False)")
    return Counter("torch", _torch_c=c)


def measure_one(count: Counter, name: str, fn: Callable[[], Any], *, number: int, warmup: int) -> None:
    """Run ``fn`` ``warmup`` times uncounted, then ``number`` times counted, into one dump named ``name``.

    The loop is a plain ``for`` over ``range(number)``; its own cost is the :data:`LOOP` dump's
    (:func:`measure_many` measures it first). Raises whatever ``fn`` raises (counting is toggled
    off again first, so the next benchmark's counts stay its own).
    """
    for _ in range(warmup):
        fn()
    count.toggle()
    try:
        for _ in range(number):
            fn()
    finally:
        count.toggle_and_dump(name)


def _empty() -> None:
    return None


def measure_many(benchmarks: Iterable[tuple[str, Callable[[], Any]]], *, number: int, warmup: int = 3,
                 backend: str = "auto") -> list[str]:
    """Measure each ``(name, fn)`` in this process (running under :func:`valgrind_command`).

    Starts instrumentation, measures the empty loop (:data:`LOOP`) first, then each benchmark, one
    dump each, in order; returns the dump names in dump order (dump ``i + 1`` is ``names[i]``).
    ``number``: counted calls per benchmark; ``warmup``: uncounted calls before them. Raises
    :class:`ValgrindUnavailable` when the process is not running under valgrind, ``ValueError``
    for ``number < 1``.
    """
    if number < 1:
        raise ValueError(f"number={number!r}: expected >= 1")
    count = counter(backend)
    if not count.running_on_valgrind():
        raise ValgrindUnavailable("not running under valgrind: start the worker with valgrind_command()")
    count.start_instrumentation()
    names = []
    for name, fn in [(LOOP, _empty), *benchmarks]:
        measure_one(count, name, fn, number=number, warmup=warmup)
        names.append(name)
    return names


#: Counted calls per benchmark and uncounted calls before them, as the study measured them
#: (docs/instructions.md: 20 and 5; A/A within 0.13% in one launch command).
CALLS = 20
WARMUP = 5


class InstructionCounting:
    """The counting side of the instruction worker (one per process, running under
    :func:`valgrind_command`): instrumentation on once, the empty loop's dump first, then each
    benchmark's calls into a dump of its own, read back at once (callgrind writes a dump before the
    client request returns) and turned into an
    :class:`~pytest_gpuperf.verdict.instructions.Instructions`.

    ``dump_dir``: the folder of the worker's ``--callgrind-out-file`` (``callgrind.out.<pid>.<n>``);
    ``calls``/``warmup``: counted and uncounted calls per benchmark; ``backend``: as :func:`counter`.
    Raises :class:`ValgrindUnavailable` when this process is not running under valgrind.
    """

    def __init__(self, dump_dir: str | os.PathLike[str], *, calls: int = CALLS, warmup: int = WARMUP,
                 backend: str = "auto") -> None:
        if calls < 1 or warmup < 0:
            raise ValueError(f"calls={calls!r}, warmup={warmup!r}: expected calls >= 1 and warmup >= 0")
        self.count = counter(backend)
        if not self.count.running_on_valgrind():
            raise ValgrindUnavailable("not running under valgrind: the instruction worker is started by the session")
        self.dump_dir, self.calls, self.warmup = Path(dump_dir), calls, warmup
        self.pid, self.dumps = os.getpid(), 0
        self.tool = tool_text()
        one_intra_op_thread()
        self.count.start_instrumentation()
        self.loop = self._dump(LOOP, _empty)

    def _dump(self, name: str, fn: Callable[[], Any]) -> tuple[Any, Path]:
        from pytest_gpuperf.verdict.callgrind import parse_callgrind

        measure_one(self.count, name, fn, number=self.calls, warmup=self.warmup)
        self.dumps += 1
        path = self.dump_dir / f"callgrind.out.{self.pid}.{self.dumps}"
        with open(path, encoding="utf-8", errors="replace") as f:
            return parse_callgrind(f), path

    def measure(self, name: str, fn: Callable[[], Any]) -> Any:
        """Count ``fn``'s calls (``warmup`` uncounted, then ``calls`` counted) into a dump named
        ``name``: its :class:`~pytest_gpuperf.verdict.instructions.Instructions` (per call, the empty
        loop's subtracted; ``dump``: the file). Raises what ``fn`` raises, and ``OSError`` when the
        dump cannot be read."""
        from pytest_gpuperf.verdict.instructions import Instructions, per_call

        profile, path = self._dump(name, fn)
        return Instructions(per_call(profile, self.loop[0], self.calls), self.calls, self.warmup, self.tool, str(path))


def one_intra_op_thread() -> bool:
    """``torch.set_num_threads(1)`` where torch is already imported (never imports it): the counts of
    one thread repeat, a pool's do not (:data:`WORKER_ENV` sets ``OMP_NUM_THREADS=1`` for the pools
    torch has not made yet). True when torch was there to pin."""
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "set_num_threads"):
        return False
    torch.set_num_threads(1)
    return True


_PROCESS: dict[str, Any] = {}  # the dump folder of this process (its role) and its counting, made once


def set_dump_folder(folder: str | os.PathLike[str]) -> None:
    """Name this process's dump folder (the ``--callgrind-out-file`` folder :func:`valgrind_command`
    was given): the instruction worker's role does, once, at start-up."""
    _PROCESS["folder"] = str(folder)


def process_counting() -> InstructionCounting:
    """This process's :class:`InstructionCounting` (callgrind's counters are the process's: one per
    process, made at the first call, in the folder :func:`set_dump_folder` named). Raises
    :class:`ValgrindUnavailable` in a process that is no instruction worker."""
    if "counting" not in _PROCESS:
        if "folder" not in _PROCESS:
            raise ValgrindUnavailable("no dump folder named: this process is no instruction worker")
        _PROCESS["counting"] = InstructionCounting(_PROCESS["folder"])
    return _PROCESS["counting"]


def tool_text() -> str:
    """What counts: ``"valgrind-3.19.0 callgrind, CPython 3.11.7, torch 2.13.0+cpu"`` (torch when
    imported). Counts compare only between the same builds."""
    import subprocess

    try:  # a child of a valgrind process runs natively (no --trace-children)
        version = subprocess.run(["valgrind", "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        version = "valgrind"
    parts = [f"{version or 'valgrind'} callgrind", f"{platform.python_implementation()} {platform.python_version()}"]
    torch = sys.modules.get("torch")
    if torch is not None:
        parts.append(f"torch {getattr(torch, '__version__', '?')}")
    return ", ".join(parts)


def valgrind_missing() -> str | None:
    """Why callgrind cannot run here (a sentence for the session to print once), or None when it can.

    Checks the platform (Linux or macOS-on-Intel, where valgrind runs), ``valgrind`` on ``PATH`` and
    ``VALGRIND_LIB`` sanity is left to valgrind itself (its exit status then says it).
    """
    if not (sys.platform.startswith("linux") or sys.platform == "darwin"):
        return f"instruction counts need valgrind, which does not run on {sys.platform}"
    if shutil.which("valgrind") is None:
        return "instruction counts need valgrind, which is not on PATH (e.g. apt-get install valgrind)"
    return None


def valgrind_command(argv: Sequence[str], out_dir: str | os.PathLike[str], *, backend: str = "auto",
                     valgrind: str = "valgrind") -> tuple[list[str], dict[str, str]]:
    """The command line and environment additions that start ``argv`` as a callgrind worker.

    Dumps go to ``out_dir/callgrind.out.<pid>.<n>`` (n = 1, 2... in dump order; the final
    ``callgrind.out.<pid>`` at exit holds what was counted after the last dump: nothing).
    Instrumentation starts off (``--instr-atstart=no``) with the ctypes backend, on with torch's
    (its requests cannot start it). ``--dump-instr=no --dump-line=no``: per-function counts
    only. The environment fixes the hash seed and one intra-op thread (:data:`WORKER_ENV`; the
    worker also calls ``torch.set_num_threads(1)`` where torch is imported:
    :func:`one_intra_op_thread`). Raises :class:`ValgrindUnavailable` with
    :func:`valgrind_missing`'s reason.
    """
    reason = valgrind_missing()
    if reason:
        raise ValgrindUnavailable(reason)
    native = backend == "ctypes" or (backend == "auto" and ctypes_supported())
    cmd = [valgrind, "--tool=callgrind", f"--instr-atstart={'no' if native else 'yes'}", "--collect-atstart=no",
           "--dump-instr=no", "--dump-line=no", "--separate-threads=no", "--quiet",
           f"--callgrind-out-file={Path(out_dir) / 'callgrind.out.%p'}", *argv]
    return cmd, dict(WORKER_ENV)


def dump_files(out_dir: str | os.PathLike[str], pid: int) -> list[Path]:
    """The dump files of worker ``pid`` in ``out_dir``, in dump order (``callgrind.out.<pid>.<n>``)."""
    prefix = f"callgrind.out.{pid}."
    files = [p for p in Path(out_dir).iterdir() if p.name.startswith(prefix) and p.name[len(prefix):].isdigit()]
    return sorted(files, key=lambda p: int(p.name[len(prefix):]))
