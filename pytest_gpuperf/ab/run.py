"""Running an A/B comparison: the git worktree of REF, the worker processes, and their coordinator.

``pytest --gpuperf --gpuperf-ab REF`` (see :mod:`pytest_gpuperf.verdict.paired` for the statistics):

1. **A's code.** REF is checked out with ``git worktree add --detach`` under
   ``.gpuperf/ab/<sha>/`` (kept as a cache for the next run; older ones beyond
   :data:`KEEP_WORKTREES` are removed with ``git worktree remove``, only ever below ``.gpuperf/ab``).
2. **Workers.** For each of ``processes`` pairs, one pytest process per side runs the same
   selection as the user's command (:func:`worker_args`: built positively from the selection and the
   options a worker needs): side A in the worktree
   (working directory and ``PYTHONPATH`` entries mapped into it, plus the import roots of
   ``gpuperf_ab_pythonpath``), side B in the working tree. The measuring plugin is always the
   running one (the worker imports it first), so both sides are timed by the same code.
3. **Interleaving.** Each worker's ``gpu_bench`` reports ``ready`` and then only does what the
   coordinator (this process) says: warm up, time a block of rounds, finish. A benchmark is timed
   only while both workers wait at it, in randomized ABBA blocks, so A and B never run at the same
   moment (on a GPU or a CPU). A benchmark present on one side only is measured alone and reported
   as new or removed, never failed.
4. **Checks.** At every ``ready`` a worker lists the modules it imported from the other side's
   tree; any such module stops the run with an error naming it (an editable install of the
   working tree shadowing REF's code would otherwise make A/B compare B with itself).

The protocol is JSON lines over a local TCP socket, authenticated with a random token.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from pytest_gpuperf.core import allocator
from pytest_gpuperf.core.flags import ALL_FLAGS
from pytest_gpuperf.core.git import GitError, run as run_git
from pytest_gpuperf.core.launch import popen_dying_with_parent
from pytest_gpuperf.verdict.paired import Block, SIDES, abba_schedule
from pytest_gpuperf.verdict.opdiff import op_free
from pytest_gpuperf.core.options import DEFAULTS

#: Worktrees of other revisions kept under ``.gpuperf/ab`` for later runs.
KEEP_WORKTREES = 3
#: ABBA groups per benchmark and process pair (4 blocks each, 2 paired ratios each): with 2
#: process pairs, 16 paired ratios per benchmark.
GROUPS = 4
#: Untimed calls at the start of every block (the other side ran meanwhile: caches are cold); one
#: for rounds longer than :data:`LONG_ROUND_MS`.
REWARM_CALLS = 2
LONG_ROUND_MS = 20.0
#: Fewest timed rounds in a block.
MIN_BLOCK_ROUNDS = 2
#: Seconds to wait for a worker to start and say hello (importing torch and collecting).
HELLO_TIMEOUT_S = 300.0

#: pytest's own options a worker gets, as the user wrote them: what selects and collects the tests,
#: configures the session (plugins, ini, warnings, markers) and words its output (the worker's log).
#: pytest's other options stay with the user's process: reports (junit, pastebin, durations), the
#: cache's --lf/--ff/--nf, stepwise, debugging (--pdb, --trace), -x/--maxfail (a worker measures
#: every selected benchmark), --basetemp and --log-file (the user's files), --collect-only, help.
PYTEST_WORKER_OPTIONS = frozenset({
    "-k", "-m", "--deselect", "--ignore", "--ignore-glob", "--pyargs", "--confcutdir", "--noconftest",
    "--import-mode", "--keep-duplicates", "--keepduplicates", "--collect-in-virtualenv",
    "--continue-on-collection-errors", "-p", "-c", "--config-file", "--rootdir", "-o", "--override-ini",
    "--disable-plugin-autoload", "-W", "--pythonwarnings", "--strict-markers", "--strict-config", "--strict",
    "--runxfail", "--assert", "-v", "--verbose", "-q", "--quiet", "--verbosity", "-r", "--tb", "-l",
    "--showlocals", "--no-showlocals", "-s", "--capture", "--show-capture", "--full-trace", "--fulltrace",
    "--disable-warnings", "--disable-pytest-warnings", "--color", "--code-highlight", "--log-level",
    "--log-format", "--log-date-format", "--log-cli-level", "--log-cli-format", "--log-cli-date-format",
    "--log-auto-indent", "--log-disable",
})
#: Where pytest's parser cannot be read (its private API changed): the shapes of pytest's and
#: pytest-xdist's options (argparse's nargs: 0 for a switch): those a worker gets, and those it does not.
_FALLBACK_PYTEST = {
    **dict.fromkeys(("-k", "-m", "--deselect", "--ignore", "--ignore-glob", "--confcutdir", "--import-mode", "-p",
                     "-c", "--config-file", "--rootdir", "-o", "--override-ini", "-W", "--pythonwarnings",
                     "--assert", "--verbosity", "-r", "--tb", "--capture", "--show-capture", "--color",
                     "--code-highlight", "--log-level", "--log-format", "--log-date-format", "--log-cli-level",
                     "--log-cli-format", "--log-cli-date-format", "--log-auto-indent", "--log-disable",
                     "--junitxml", "--junit-xml", "--junitprefix", "--junit-prefix", "--maxfail", "--durations",
                     "--durations-min", "--basetemp", "--log-file", "--log-file-level", "--log-file-format",
                     "--log-file-date-format", "--log-file-mode", "--pastebin", "--lfnf",
                     "--last-failed-no-failures", "--pdbcls"), None),
    **dict.fromkeys(("--pyargs", "--noconftest", "--keep-duplicates", "--keepduplicates", "--collect-in-virtualenv",
                     "--continue-on-collection-errors", "--disable-plugin-autoload", "--strict-markers",
                     "--strict-config", "--strict", "--runxfail", "-v", "--verbose", "-q", "--quiet", "-l",
                     "--showlocals", "--no-showlocals", "-s", "--full-trace", "--fulltrace", "--disable-warnings",
                     "--disable-pytest-warnings"), 0),
    **dict.fromkeys(("-x", "--exitfirst", "--lf", "--last-failed", "--ff", "--failed-first", "--nf", "--new-first",
                     "--sw", "--stepwise", "--sw-skip", "--stepwise-skip", "--pdb", "--trace", "--cache-clear",
                     "--collect-only", "--collectonly", "--co", "--setup-only", "--setup-plan", "--setup-show"), 0),
    **dict.fromkeys(("--debug", "--cache-show"), "?"),
}
_FALLBACK_XDIST = {**dict.fromkeys(("-n", "--numprocesses", "--maxprocesses", "--max-worker-restart", "--dist",
                                    "--tx", "--px", "--rsyncdir", "--rsyncignore", "--testrunuid",
                                    "--maxschedchunk"), None),
                   **dict.fromkeys(("-d", "--distload", "-f", "--looponfail", "--loadscope-reorder",
                                    "--no-loadscope-reorder", "--boxed"), 0)}


class ABError(RuntimeError):
    """The A/B comparison cannot run (the message names the revision, file or worker and says why)."""


# ----------------------------------------------------------------------------- git


def git(repo: Path, *args: str) -> str:
    """``git -C repo <args>`` (:func:`pytest_gpuperf.core.git.run`): its output, stripped. Raises
    :class:`ABError` (with git's message) when git fails or cannot run."""
    try:
        return run_git(repo, *args)
    except GitError as exc:
        raise ABError(str(exc)) from None


@dataclass(frozen=True)
class Revision:
    """REF resolved: ``ref`` as given, its full ``sha``, the repository's top folder ``repo``."""

    ref: str
    sha: str
    repo: Path

    @property
    def label(self) -> str:
        """``"origin/main (3f2a1c9)"``."""
        return f"{self.ref} ({self.sha[:7]})"


def resolve_revision(start: Path, ref: str) -> Revision:
    """Find the git repository holding ``start`` and resolve ``ref`` to a commit.

    Raises :class:`ABError` when ``start`` is not in a git repository or ``ref`` names no commit.
    """
    try:
        top = Path(git(start, "rev-parse", "--show-toplevel")).resolve()
    except ABError as exc:
        raise ABError(f"--gpuperf-ab {ref}: {start} is not inside a git repository ({exc})") from None
    try:
        sha = git(top, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except ABError:
        raise ABError(f"--gpuperf-ab {ref}: no such commit in {top} (try a branch, tag or sha, e.g. origin/main "
                      f"or HEAD~1)") from None
    return Revision(ref, sha, top)


def ab_folder(repo: Path) -> Path:
    """``<repo>/.gpuperf/ab`` (created, with the ``.gitignore`` that keeps it out of commits)."""
    from pytest_gpuperf.core.files import ensure_output_dir

    folder = repo / ".gpuperf" / "ab"
    ensure_output_dir(folder)
    return folder


def prepare_worktree(rev: Revision) -> Path:
    """A clean checkout of ``rev`` under ``.gpuperf/ab/<sha12>`` (reused when it exists and is
    clean); removes older cached worktrees beyond :data:`KEEP_WORKTREES`. Raises :class:`ABError`."""
    folder = ab_folder(rev.repo)
    path = folder / rev.sha[:12]
    if path.is_dir():
        try:
            head = git(path, "rev-parse", "HEAD")
            dirty = git(path, "status", "--porcelain", "--untracked-files=no")
        except ABError:
            head, dirty = "", "?"
        if head == rev.sha and not dirty:
            os.utime(path)  # most recently used
            _prune(folder, keep=path)
            return path
        remove_worktree(rev.repo, path)
    git(rev.repo, "worktree", "prune")
    git(rev.repo, "worktree", "add", "--detach", "--force", str(path), rev.sha)
    _prune(folder, keep=path)
    return path


def remove_worktree(repo: Path, path: Path) -> None:
    """Remove a worktree we created (only ever a folder under ``.gpuperf/ab`` or, for ``gpuperf
    bisect``, ``.gpuperf/bisect``); raises :class:`ABError` for any other path."""
    if path.parent.name not in ("ab", "bisect") or path.parent.parent.name != ".gpuperf":
        raise ABError(f"refusing to remove {path}: not a worktree of ours under .gpuperf/ab or .gpuperf/bisect")
    try:  # twice --force: also a worktree git still holds locked (one whose `git worktree add` was killed)
        git(repo, "worktree", "remove", "--force", "--force", str(path))
    except ABError:
        import shutil

        shutil.rmtree(path, ignore_errors=True)
        try:
            git(repo, "worktree", "unlock", str(path))  # prune keeps a locked worktree's record
        except ABError:
            pass  # not locked
        git(repo, "worktree", "prune")


def _prune(folder: Path, keep: Path) -> None:
    others = sorted((p for p in folder.iterdir() if p.is_dir() and p != keep and (p / ".git").exists()),
                    key=lambda p: p.stat().st_mtime, reverse=True)
    for old in others[KEEP_WORKTREES - 1:]:
        try:
            remove_worktree(folder.parent.parent, old)
        except ABError:
            pass


# ----------------------------------------------------------------------------- worker command lines


def worker_args(args: Sequence[str], config: Any = None) -> list[str]:
    """A worker's pytest arguments: ``--gpuperf``, ``-p no:cacheprovider``, ``-p no:unraisableexception``
    and :func:`selection_args` (the coordinator adds the hidden role flags). pytest's unraisable-exception
    plugin runs ``gc.collect()`` five times as a session ends (pytest >= 8.4), some 0.7 s of CPU in a
    process that loaded torch, for warnings that only the worker's log would show: the user's session,
    which runs the same tests, keeps it."""
    return ["--gpuperf", "-p", "no:cacheprovider", "-p", "no:unraisableexception", *selection_args(args, config)]


def selection_args(args: Sequence[str], config: Any = None) -> list[str]:
    """What of the user's pytest arguments ``args`` a worker gets, as written: what selects and
    configures the benchmarks, e.g. for a command that reproduces a measurement. Built positively:

    * the file, folder and node-id arguments (and everything after ``--``);
    * our flags a worker needs (``worker=True`` in :mod:`pytest_gpuperf.core.flags`: the measurement,
      the gate's thresholds, the selection, the simulated device), not the coordinator's (reports, A/B,
      bisect, processes, updating);
    * pytest's own options of :data:`PYTEST_WORKER_OPTIONS`, not its others nor pytest-xdist's;
    * every other plugin's or conftest's option with its value (``--device cuda``, ``--cov``): the
      worker loads the same plugins and conftests, and may need them.

    ``config`` (the session's ``pytest.Config``, optional): its parser tells how many values the other
    plugins' and the conftests' options take; without it such an option's value is kept as a positional."""
    known, pytest_own, xdist = _known_options()
    arity = {**known, **(_parser_arities(config) if config is not None else {}),
             **{name: f.arity for name, f in ALL_FLAGS.items()}}
    out: list[str] = []
    for written, pieces in _split(args, arity):
        kept = [p for p in pieces if _worker_gets(p[0], pytest_own, xdist)]
        out += written if len(kept) == len(pieces) else [t for _, tokens in kept for t in tokens]
    return out


def _worker_gets(name: str | None, pytest_own: frozenset[str], xdist: frozenset[str]) -> bool:
    if name is None:  # a file, folder or node id
        return True
    flag = ALL_FLAGS.get(name)
    if flag is not None:
        return flag.worker
    if name.startswith(("--gpuperf", "--benchmark-")):  # pytest-benchmark's own reports and storage
        return False
    if name in pytest_own:
        return name in PYTEST_WORKER_OPTIONS
    return name not in xdist


def _split(args: Sequence[str], arity: dict[str, Any]) -> Iterator[tuple[list[str], list[tuple[str | None, list[str]]]]]:
    """``args`` cut as argparse reads them: per argument as written (with the values it takes), its
    options ``(name, tokens)`` (name None: a positional), a cluster of short options (``-vsk expr``)
    one piece each. An option ``arity`` does not know is one piece; what follows it is read on its own."""
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            yield list(args[i:]), [(None, list(args[i:]))]
            return
        if not a.startswith("-") or a == "-" or a[1:2].isdigit():
            yield [a], [(None, [a])]
            i += 1
            continue
        pieces: list[tuple[str | None, list[str]]] = []
        if a.startswith("--"):
            name = a.split("=", 1)[0]
            values = [] if "=" in a else _values(args, i + 1, arity.get(name, 0))
            pieces.append((name, [a, *values]))
        else:  # -vs, -kexpr, -n2, -k expr
            values = []
            for j in range(1, len(a)):
                name, rest = "-" + a[j], a[j + 1:]
                n = arity.get(name)
                if name not in arity or (n != 0 and rest):  # unknown: the rest as written; -kexpr
                    pieces.append((name, ["-" + a[j:]]))
                    break
                if n != 0:
                    values = _values(args, i + 1, n)
                    pieces.append((name, [name, *values]))
                    break
                pieces.append((name, [name]))
        yield list(args[i:i + 1 + len(values)]), pieces
        i += 1 + len(values)


def _values(args: Sequence[str], start: int, nargs: Any) -> list[str]:
    """The values an option of argparse's ``nargs`` takes from ``args[start:]``."""
    if nargs == 0:
        return []
    if nargs is None:
        return list(args[start:start + 1])
    taken: list[str] = []
    for a in args[start:]:
        if a.startswith("-") and not a[1:2].isdigit() or (nargs == "?" and taken):
            break
        taken.append(a)
    return taken


def _parser_arities(config: Any) -> dict[str, Any]:
    """Every option string of ``config``'s pytest parser -> its argparse ``nargs`` (0: a switch); ``{}`` when
    the parser cannot be read (pytest's private API: ``Parser.optparser`` since pytest 9, ``_getparser()`` before)."""
    try:
        parser = config._parser
        optparser = getattr(parser, "optparser", None) or parser._getparser()
        return {name: action.nargs for name, action in optparser._option_string_actions.items()}
    except Exception:
        return {}


@functools.lru_cache(maxsize=None)
def _known_options() -> tuple[dict[str, Any], frozenset[str], frozenset[str]]:
    """``(arity of pytest's and pytest-xdist's options, pytest's own options, pytest-xdist's)``, read from
    a bare pytest configuration (pytest's own plugins only), then with pytest-xdist's registered; the
    fallback tables where that cannot be done."""
    try:
        from _pytest.config import get_config

        bare = get_config()
        own = _parser_arities(bare)
        for module in ("xdist.plugin", "xdist.looponfail"):
            with contextlib.suppress(ImportError):
                bare.pluginmanager.import_plugin(module)
        every = _parser_arities(bare)
    except Exception:
        own, every = {}, {}
    if not own:
        own, every = dict(_FALLBACK_PYTEST), {}
    xdist = {k: v for k, v in every.items() if k not in own} or dict(_FALLBACK_XDIST)
    return {**own, **xdist}, frozenset(own), frozenset(xdist)


def map_path(path: str, working_tree: Path, worktree: Path) -> str:
    """``path`` inside the working tree mapped to the same place in the worktree (else unchanged)."""
    p = Path(path)
    try:
        rel = p.resolve().relative_to(working_tree)
    except ValueError:
        return path
    return str(worktree / rel)


#: Python run by a worker before pytest: import the measuring plugin from where the coordinator
#: runs it (never from the worktree, which may hold another version of it), then run pytest.
_BOOT = (
    "import sys, os, json; sys.path.insert(0, json.loads(os.environ['GPUPERF_AB_WORKER'])['plugin_path']); "
    "import pytest_gpuperf.plugin; sys.path.pop(0); import pytest; sys.exit(pytest.main(sys.argv[1:]))"
)


@dataclass
class WorkerSpec:
    """How to start one side's worker: working directory, extra import roots, environment, and
    ``nproc``: each worker a torchrun launch of that many ranks (``--gpuperf-nproc``; rank 0 talks
    to the coordinator, the other ranks follow its commands; None: one process)."""

    side: str
    cwd: Path
    root: Path  # the tree this side's code must come from
    other_root: Path  # the tree it must not import from
    pythonpath: list[str] = field(default_factory=list)
    nproc: int | None = None


def side_specs(rev: Revision, worktree: Path, invocation_dir: Path, import_roots: Sequence[str]) -> dict[str, WorkerSpec]:
    """The worker specs of A (the worktree) and B (the working tree) for a run started in
    ``invocation_dir``; ``import_roots`` (relative to the repository's top) are put first on
    ``PYTHONPATH`` of each side, in that side's tree; other ``PYTHONPATH`` entries inside the working
    tree are mapped into the worktree for A."""
    return tree_specs(rev.repo, worktree, rev.repo, invocation_dir, import_roots)


def tree_specs(top: Path, a_tree: Path, b_tree: Path, invocation_dir: Path,
               import_roots: Sequence[str]) -> dict[str, WorkerSpec]:
    """The worker specs of side A in ``a_tree`` and side B in ``b_tree``, each a checkout of the
    repository whose working tree is ``top`` (``top`` itself or a worktree of a commit): each side
    starts in its tree's copy of ``invocation_dir`` with ``import_roots`` and the inherited
    ``PYTHONPATH`` entries mapped into its tree. A side must not import code from the other tree;
    a side in a worktree must not import from ``top`` either (an editable install of the working
    tree would shadow the commit's code). Raises :class:`ABError` when ``invocation_dir`` is not
    inside ``top``."""
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    try:
        rel_dir = invocation_dir.resolve().relative_to(top)
    except ValueError:
        raise ABError(f"--gpuperf-ab: run pytest from inside the repository {top} (the run started in "
                      f"{invocation_dir})") from None

    def spec(side: str, tree: Path, other: Path) -> WorkerSpec:
        path = [str(tree / r) for r in import_roots] + [map_path(p, top, tree) for p in inherited]
        return WorkerSpec(side, tree / rel_dir, tree, other if tree == top else top, path)

    return {"A": spec("A", a_tree, b_tree), "B": spec("B", b_tree, a_tree)}


def with_nproc(specs: dict[str, WorkerSpec], nproc: int | None) -> dict[str, WorkerSpec]:
    """``specs`` whose workers are torchrun launches of ``nproc`` ranks (``--gpuperf-nproc``;
    None: unchanged)."""
    if not nproc:
        return specs
    return {side: dataclasses.replace(spec, nproc=nproc) for side, spec in specs.items()}


# ----------------------------------------------------------------------------- the wire


class Channel:
    """JSON lines over a socket: ``send(obj)``, ``recv(timeout) -> obj`` (None at end of stream)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = b""

    def send(self, obj: Any) -> None:
        self.sock.sendall(json.dumps(obj).encode() + b"\n")

    def recv(self, timeout: float | None = None) -> Any:
        """The next message; raises ``TimeoutError`` after ``timeout`` s; None when the peer closed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buf:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                self.sock.settimeout(left)
            else:
                self.sock.settimeout(None)
            try:
                chunk = self.sock.recv(1 << 16)
            except socket.timeout:
                raise TimeoutError from None
            except OSError:
                return None
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def _take_connect_address() -> str | None:
    """:data:`~pytest_gpuperf.core.environ.AB_CONNECT` (``<host>:<port> <token>``), or None outside
    an A/B worker; popped from the environment, so nested pytest runs (pytester) are no workers."""
    from pytest_gpuperf.core.environ import AB_CONNECT

    return os.environ.pop(AB_CONNECT, None) or None


def connect_worker() -> "Channel | None":
    """In a worker process (:data:`~pytest_gpuperf.core.environ.AB_CONNECT` set): connect to the
    coordinator and authenticate; None outside a worker."""
    connect = _take_connect_address()
    if not connect:
        return None
    address, _, token = connect.partition(" ")
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=60)
    ch = Channel(sock)
    ch.send({"token": token})
    return ch


def foreign_modules(own_root: str, other_root: str, allowed: Sequence[str] = ()) -> list[str]:
    """``"name (path)"`` for each loaded module whose file lies in ``other_root`` but not in
    ``own_root`` (the worktree sits inside the working tree) nor under ``allowed`` folders (the
    measuring plugin, the Python installation, virtual environments and site-packages)."""
    own, other = os.path.realpath(own_root), os.path.realpath(other_root)
    skip = [os.path.realpath(a) for a in allowed] + [os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix)]

    def inside(path: str, root: str) -> bool:
        return path == root or path.startswith(root + os.sep)

    out = []
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None)
        if not isinstance(f, str):
            continue
        path = os.path.realpath(f)
        if not inside(path, other) or inside(path, own) and len(own) > len(other):
            continue
        if any(inside(path, s) for s in skip) or "site-packages" in path or "dist-packages" in path:
            continue
        out.append(f"{name} ({path})")
    return sorted(out)


# ----------------------------------------------------------------------------- the coordinator


@dataclass
class Measured:
    """What the coordinator got for one benchmark key: blocks of both sides, each side's result
    entry (from the first process pair: counts, memory, bottleneck), errors."""

    key: str
    blocks: list[Block] = field(default_factory=list)
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    max_time_s: float = DEFAULTS.max_time
    #: side -> op profile samples (``OpSample.to_dict()``) of the profiling pairs (issue 32)
    profiles: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: side -> (error, where) of a profile that failed there
    profile_errors: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: side -> the chrome trace of its first profiling process's last cycle (written by the worker)
    traces: dict[str, str] = field(default_factory=dict)
    #: side -> each torchrun launch's rank medians (ms, rank order; ``--gpuperf-nproc``)
    ranks: dict[str, list[list[float]]] = field(default_factory=dict)

    def sides(self) -> set[str]:
        return {b.side for b in self.blocks}


class _Worker:
    def __init__(self, spec: WorkerSpec, process: int, proc: subprocess.Popen, log: Path) -> None:
        self.spec, self.process, self.proc, self.log = spec, process, proc, log
        self.ch: Channel | None = None
        self.items: list[str] = []
        self.pending: Any = None  # the message it is waiting on us with (ready/bye)

    @property
    def name(self) -> str:
        return f"{self.spec.side}{self.process + 1}"

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def next(self) -> Any:
        """The worker's next message (ready/bye); a worker that died without a word says bye."""
        assert self.ch is not None
        while True:
            try:
                msg = self.ch.recv(timeout=1.0)
            except TimeoutError:
                if self.proc.poll() is not None:
                    return {"op": "bye", "crashed": True}
                continue
            if msg is None:
                return {"op": "bye", "crashed": self.proc.poll() not in (None, 0, 1, 5)}
            return msg

    def ask(self, op: str, **kw: Any) -> Any:
        assert self.ch is not None
        self.ch.send({"op": op, **kw})
        while True:
            try:
                msg = self.ch.recv(timeout=5.0)
            except TimeoutError:
                if self.proc.poll() is not None:
                    return None
                continue
            return msg


class Coordinator:
    """Runs the A/B measurement of one session; results in :attr:`measured` (key -> Measured).

    ``specs``: the two sides' :class:`WorkerSpec`; ``args``: the workers' pytest arguments;
    ``processes``: pairs of worker processes, run one pair after another; ``log_dir``: where each
    worker's output goes; ``progress``: a callable taking one line of text per step (a line rewritten in
    place on a terminal); ``announce``: one for a line that starts a phase and stays (default ``progress``);
    ``traces_dir``: where the profiling pairs save each side's chrome trace (None: no traces);
    ``extras``: whether each side's first pair also measures its peak memory, counts and
    bottleneck (one more call each, after its blocks).
    """

    def __init__(self, specs: dict[str, WorkerSpec], args: Sequence[str], processes: int, log_dir: Path,
                 progress: Callable[[str], None] = lambda _s: None,
                 announce: Callable[[str], None] | None = None, traces_dir: Path | None = None,
                 extras: bool = True) -> None:
        self.specs, self.args, self.processes, self.log_dir = specs, list(args), processes, log_dir
        self.extras = extras
        #: (seconds, keys): after that many seconds from the start, the first pair starts none of
        #: :attr:`only` but those keys (:func:`measure_ab`'s ``settle_s``); the others land in :attr:`skipped`
        self.deadline: tuple[float, frozenset[str]] | None = None
        self.skipped: set[str] = set()
        self.traces_dir = traces_dir
        self.progress = progress
        self.announce = announce or progress
        self.measured: dict[str, Measured] = {}
        self.order: list[str] = []
        self.notes: list[str] = []
        self.only: set[str] | None = None  # while confirming: the benchmarks to measure again
        self.confirm_from: int | None = None  # the first process pair of the confirmation
        self.confirmed_pairs = 0  # process pairs run by confirmations so far
        self.profiling = False  # while profiling: the benchmarks in `only` are profiled, not timed
        self.profiled_pairs = 0  # process pairs run to profile so far
        self._started = time.monotonic()
        self._done = 0  # benchmarks interleaved so far (all pairs), for the progress line
        self._planned: int | None = None  # benchmarks x pairs, known once the first pair ran

    def run(self) -> None:
        """Run every process pair; raises :class:`ABError` when a worker cannot start or imports
        code from the wrong tree."""
        for p in range(self.processes):
            self._run_pair(p)
            if p == 0:  # the first pair measured every benchmark: the rest of the run is that times the pairs
                self._planned = max(1, self._done) * self.processes

    def confirm(self, keys: set[str], pairs: int) -> None:
        """Measure ``keys`` again with ``pairs`` more process pairs (their blocks get process
        indices from :attr:`confirm_from` on); the workers pass every other benchmark through
        without timing it (Chromium Pinpoint's "measure more", as the stored-baseline gate does)."""
        if not keys or pairs < 1:
            return
        if self.confirm_from is None:
            self.confirm_from = self.processes
        self._planned = self._done + len(keys) * pairs
        again = " again" if self.confirmed_pairs else ""
        self.announce(f"A/B: measuring {len(keys)} benchmark(s){again} with {pairs} more pair(s) of worker processes "
                      f"(a regression to confirm, or a CI too wide to decide)")
        self._more_pairs(keys, pairs, profiling=False)

    def profile(self, keys: set[str], pairs: int) -> None:
        """Profile ``keys`` on both sides in ``pairs`` more process pairs (issue 32, "why it got
        slower"): in each, after the usual warmup, each side runs :data:`~pytest_gpuperf.measure.opprofile.CYCLES`
        profiler cycles of the same number of calls, A and B in turn; nothing is timed, and every other
        benchmark passes through. The samples land in :attr:`Measured.profiles`."""
        if not keys or pairs < 1:
            return
        self._planned = self._done + len(keys) * pairs
        self.announce(f"A/B: profiling {len(keys)} benchmark(s) on both sides in {pairs} more pair(s) of worker "
                      f"processes (why it got slower)")
        self._more_pairs(keys, pairs, profiling=True)

    def _more_pairs(self, keys: set[str], pairs: int, *, profiling: bool) -> None:
        """Run ``pairs`` more process pairs for ``keys`` only (every other benchmark passes through),
        numbered after every pair run so far; ``profiling``: profile them instead of timing them."""
        start = self.processes + self.confirmed_pairs + self.profiled_pairs
        self.only, self.profiling = set(keys), profiling
        try:
            for p in range(start, start + pairs):
                self._run_pair(p)
                if profiling:
                    self.profiled_pairs += 1
                else:
                    self.confirmed_pairs += 1
        finally:
            self.only, self.profiling = None, False

    def _profile(self, p: int, key: str, workers: dict[str, "_Worker"], first: tuple[str, str]) -> None:
        """Warm both sides up, then ask each for its op profile (the same calls per cycle on both)."""
        from pytest_gpuperf.measure.opprofile import CYCLES, calls_per_cycle

        m = self._record(key)
        warm = {side: self._warm(workers[side], m) for side in first}
        if not all(warm.values()):
            return
        call_ms = min(w[0] / max(1, w[1]) for w in warm.values() if w is not None)
        calls = calls_per_cycle(call_ms)
        for side in first:
            trace = self._trace_path(key, side)
            reply = workers[side].ask("profile", cycles=CYCLES, calls=calls, process=p,
                                      **({"trace": str(trace)} if trace is not None else {}))
            if reply is None or reply.get("op") != "profile":
                m.profile_errors.setdefault(side, ((reply or {}).get("error", f"worker {workers[side].name} stopped"), ""))
            elif reply.get("error"):
                m.profile_errors.setdefault(side, (str(reply["error"]), str(reply.get("where") or "")))
            else:
                m.profiles.setdefault(side, []).extend(reply.get("samples") or [])
                if trace is not None and trace.is_file():
                    m.traces[side] = str(trace)

    def _trace_path(self, key: str, side: str) -> Path | None:
        """Where side ``side`` of ``key`` saves its chrome trace: ``<traces_dir>/<key>.A.trace.json``
        (``.B.``), in the first profiling pair only; None when traces are off or the folder cannot be made."""
        if self.traces_dir is None or self.profiled_pairs:
            return None
        from pytest_gpuperf.core.files import ensure_output_dir
        from pytest_gpuperf.reporting.plots import safe_filename

        try:
            ensure_output_dir(self.traces_dir)
        except OSError:
            return None
        path = self.traces_dir / f"{safe_filename(key)}.{side}.trace.json"
        path.unlink(missing_ok=True)  # a stale trace of an earlier run is never shown as this one's
        return path

    def _elapsed(self) -> str:
        """``", 34 s elapsed, about 1 min left"`` for the progress line (the estimate once the first
        pair ran: the time per benchmark so far times the benchmarks left)."""
        elapsed = self.elapsed_s()
        text = f", benchmark {self._done}" + (f" of {self._planned}" if self._planned else "") + f", {elapsed:.0f} s elapsed"
        if self._planned and self._done > 1:
            left = elapsed / (self._done - 1) * max(0, self._planned - self._done + 1)
            text += f", about {left / 60:.0f} min left" if left >= 90 else f", about {left:.0f} s left"
        return text

    def _spawn(self, spec: WorkerSpec, process: int, address: str, token: str) -> _Worker:
        import pytest_gpuperf

        from pytest_gpuperf.core.environ import AB_CONNECT, AB_WORKER

        env = dict(os.environ)
        env.update({
            AB_CONNECT: f"{address} {token}",
            AB_WORKER: json.dumps({"side": spec.side, "process": process, "root": str(spec.root),
                                   "other_root": str(spec.other_root),
                                   "plugin_path": str(Path(pytest_gpuperf.__file__).resolve().parent.parent)}),
            "PYTHONPATH": os.pathsep.join(spec.pythonpath),
        })
        if not spec.pythonpath:
            env.pop("PYTHONPATH")
        if self.profiling:  # both sides alike, a value the user set standing: glibc's thresholds fixed even under
            # gpuperf_allocator = inherit, so no diagnosis depends on a process's allocator mode (issue 47)
            for name, value in allocator.FIXED.items():
                env.setdefault(name, value)
        log = self.log_dir / f"worker-{spec.side}{process + 1}.log"
        cmd = [sys.executable, "-c", _BOOT, *self.args]
        if spec.nproc:  # a torchrun launch whose every rank runs the same boot (--no-python: cmd is the program)
            from pytest_gpuperf.core.launch import torchrun

            cmd = [*torchrun(spec.nproc), "--no-python", *cmd]
        with open(log, "wb") as out:
            proc = popen_dying_with_parent(cmd, cwd=spec.cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, start_new_session=bool(spec.nproc))
        return _Worker(spec, process, proc, log)

    def _run_pair(self, p: int) -> None:
        token = secrets.token_hex(16)
        server = socket.create_server(("127.0.0.1", 0))
        address = f"127.0.0.1:{server.getsockname()[1]}"
        workers = {side: self._spawn(self.specs[side], p, address, token) for side in SIDES}
        try:
            self._accept(server, workers, token)
            which = (f"{p + 1}/{self.processes}" if p < self.processes else f"{p + 1} (profiling)" if self.profiling
                     else f"{p + 1} (confirmation {p + 1 - self.processes})")
            self.progress(f"A/B: worker pair {which} started "
                          f"(A pid {workers['A'].proc.pid}, B pid {workers['B'].proc.pid})")
            for w in workers.values():
                w.pending = w.next()
            self._loop(p, workers)
        finally:
            server.close()
            for w in workers.values():
                if w.ch is not None:
                    w.ch.close()
                try:
                    w.proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    from pytest_gpuperf.core.launch import stop

                    stop(w.proc)  # a torchrun launch: its ranks too

    def _accept(self, server: socket.socket, workers: dict[str, _Worker], token: str) -> None:
        deadline = time.monotonic() + HELLO_TIMEOUT_S
        waiting = dict(workers)
        server.settimeout(1.0)
        while waiting:
            for w in waiting.values():
                if w.proc.poll() is not None:
                    raise ABError(f"--gpuperf-ab: worker {w.name} ({w.spec.cwd}) exited with code "
                                  f"{w.proc.returncode} before it connected; its output ({w.log}):\n{w.tail()}")
            if time.monotonic() > deadline:
                raise ABError(f"--gpuperf-ab: workers {', '.join(waiting)} did not connect within "
                              f"{HELLO_TIMEOUT_S:g} s; logs in {self.log_dir}")
            try:
                conn, _ = server.accept()
            except socket.timeout:
                continue
            ch = Channel(conn)
            try:
                auth = ch.recv(timeout=30)
                hello = ch.recv(timeout=HELLO_TIMEOUT_S)
            except TimeoutError:
                ch.close()
                continue
            if not auth or auth.get("token") != token or not hello or hello.get("side") not in waiting:
                ch.close()
                continue
            w = waiting.pop(hello["side"])
            w.ch, w.items = ch, list(hello.get("items", []))

    def _check_imports(self, w: _Worker, msg: dict[str, Any]) -> None:
        foreign = msg.get("foreign") or []
        if not foreign:
            return
        which = "REF's worktree" if w.spec.side == "A" else "the working tree"
        other = "the working tree" if w.spec.side == "A" else "REF's worktree"
        raise ABError(
            f"--gpuperf-ab: side {w.spec.side} must run the code of {which} ({w.spec.root}) but imported from "
            f"{other} ({w.spec.other_root}): {'; '.join(foreign[:5])}. An installed package (e.g. `pip install -e .`) "
            f"shadows the revision's code: name the import roots of your code with the ini option "
            f"`gpuperf_ab_pythonpath = src` (or --gpuperf-ab-pythonpath src), relative to the repository's top"
        )

    def _loop(self, p: int, workers: dict[str, _Worker]) -> None:
        a, b = workers["A"], workers["B"]
        while True:
            ma, mb = a.pending, b.pending
            for w in (a, b):
                if w.pending.get("op") == "ready":
                    self._check_imports(w, w.pending)
            if ma["op"] == "bye" and mb["op"] == "bye":
                for w in (a, b):
                    if w.pending.get("crashed"):
                        self.notes.append(f"A/B worker {w.name} stopped unexpectedly (exit code "
                                          f"{w.proc.poll()}); its output: {w.log}")
                return
            if ma["op"] == "ready" and mb["op"] == "ready" and ma["key"] == mb["key"]:
                if self.only is not None and (ma["key"] not in self.only or self._late(p, ma["key"])):
                    for w in (a, b):
                        self._pass(w)
                    continue
                self._interleave(p, ma["key"], a, b, ma, mb)
                continue
            solo = self._behind(a, b)
            if self.only is not None:
                self._pass(solo)
                continue
            self._alone(p, solo)

    def _late(self, p: int, key: str) -> bool:
        """Whether the first pair starts ``key`` past :attr:`deadline` (then it is left out of
        :attr:`only`, so no later pair measures it either, and counted in :attr:`skipped`)."""
        if p != 0 or self.deadline is None or key in self.deadline[1] or self.only is None:
            return False
        if self.elapsed_s() <= self.deadline[0]:
            return False
        self.only.discard(key)
        self.skipped.add(key)
        return True

    def elapsed_s(self) -> float:
        """Seconds since this coordinator started."""
        return time.monotonic() - self._started

    def _pass(self, w: _Worker) -> None:
        """Let a waiting worker go on without timing its benchmark (not being confirmed)."""
        w.ask("finish", extras=False, classify=False)
        w.pending = w.next()

    def _behind(self, a: _Worker, b: _Worker) -> _Worker:
        """Which worker measures alone when the two wait at different benchmarks."""
        ma, mb = a.pending, b.pending
        if ma["op"] == "bye":
            return b
        if mb["op"] == "bye":
            return a
        na, nb = ma["nodeid"], mb["nodeid"]
        if na not in b.items:
            return a
        if nb not in a.items:
            return b
        order = b.items
        return b if order.index(nb) < order.index(na) else a

    def _record(self, key: str) -> Measured:
        if key not in self.measured:
            self.measured[key] = Measured(key)
            self.order.append(key)
        return self.measured[key]

    def _warm(self, w: _Worker, m: Measured) -> tuple[float, int] | None:
        reply = w.ask("warmup")
        if reply is None or reply.get("op") != "warm":
            m.errors[w.spec.side] = (reply or {}).get("error", f"worker {w.name} stopped")
            return None
        return float(reply["round_ms"]), int(reply["cpr"])

    def _rounds(self, m: Measured, round_ms: float, blocks_per_side: int) -> int:
        block_s = m.max_time_s / max(1, self.processes * blocks_per_side)
        return max(MIN_BLOCK_ROUNDS, int(block_s * 1e3 / max(round_ms, 1e-6)))

    def _block(self, w: _Worker, m: Measured, p: int, pos: int, rounds: int, round_ms: float) -> bool:
        reply = w.ask("block", rounds=rounds, rewarm=1 if round_ms > LONG_ROUND_MS else REWARM_CALLS)
        if reply is None or reply.get("op") != "samples":
            m.errors[w.spec.side] = (reply or {}).get("error", f"worker {w.name} stopped")
            return False
        m.blocks.append(Block(w.spec.side, p, pos, tuple(float(v) for v in reply["samples_ms"]),
                              tuple(float(v) for v in reply.get("cpu_samples_ms") or ()),
                              tuple(float(v) for v in reply.get("process_cpu_samples_ms") or ()),
                              tuple(float(v) for v in reply.get("probe_ms") or ()),
                              max(1, int(reply.get("probe_every") or 1))))
        return True

    def _finish(self, w: _Worker, m: Measured, p: int) -> None:
        first = w.spec.side not in m.entries  # its entry comes from its first pair, with the extras if asked
        extras = first and self.extras
        reply = w.ask("finish", extras=extras, classify=extras and w.spec.side == "B", entry=first)
        if reply is not None and reply.get("op") == "result" and reply.get("ranks"):
            m.ranks.setdefault(w.spec.side, []).append([float(v) for v in reply["ranks"]])
        if reply is not None and reply.get("op") == "result" and reply.get("entry") and w.spec.side not in m.entries:
            m.entries[w.spec.side] = reply["entry"]
        elif reply is not None and reply.get("op") == "error":
            m.errors[w.spec.side] = reply.get("error", "error")
        w.pending = w.next()

    def _interleave(self, p: int, key: str, a: _Worker, b: _Worker, ma: dict, mb: dict) -> None:
        m = self._record(key)
        m.max_time_s = float(mb.get("max_time_s", ma.get("max_time_s", DEFAULTS.max_time)))
        self._done += 1
        self.progress(f"A/B: {key} (worker pair {p + 1}){self._elapsed()}")
        workers = {"A": a, "B": b}
        first = ("A", "B") if p % 2 == 0 else ("B", "A")
        if self.profiling:
            self._profile(p, key, workers, first)
            for side in first:
                self._finish(workers[side], m, p)
            return
        warm = {}
        for side in first:
            warm[side] = self._warm(workers[side], m)
        if all(warm.values()):
            schedule = abba_schedule(GROUPS, seed=hash_seed(key, p))
            rounds = {s: self._rounds(m, warm[s][0], GROUPS * 2) for s in SIDES}  # type: ignore[index]
            for pos, side in enumerate(schedule):
                if not self._block(workers[side], m, p, pos, rounds[side], warm[side][0]):  # type: ignore[index]
                    break
        for side in first:
            self._finish(workers[side], m, p)

    def _alone(self, p: int, w: _Worker) -> None:
        key = w.pending["key"]
        m = self._record(key)
        m.max_time_s = float(w.pending.get("max_time_s", DEFAULTS.max_time))
        self.progress(f"A/B: {key} on side {w.spec.side} only (worker {w.name})")
        warm = self._warm(w, m)
        if warm is not None:
            rounds = self._rounds(m, warm[0], GROUPS * 2)
            for pos in range(GROUPS * 2):
                if not self._block(w, m, p, pos * 2 + (0 if w.spec.side == "A" else 1), rounds, warm[0]):
                    break
        self._finish(w, m, p)


@dataclass(frozen=True)
class ABOutcome:
    """What one A/B measurement decided: ``results`` (benchmark id -> ``BenchResult`` of side B with its
    A/B comparison), ``removed`` (ids measured on side A only), ``notes`` (workers that failed, and why)."""

    results: dict[str, Any]
    removed: list[str]
    notes: list[str]
    #: ids of ``only`` left unmeasured when the time for settling ran out (``settle_s``)
    skipped: frozenset[str] = frozenset()


def measure_ab(specs: dict[str, WorkerSpec], args: Sequence[str], processes: int, log_dir: Path, label: str, *,
               only: set[str] | None = None, progress: Callable[[str], None] = lambda _s: None,
               announce: Callable[[str], None] | None = None, max_pairs: int | None = None,
               why: bool = True, traces_dir: Path | None = None, confirming: bool = False,
               why_max: int | None = None, settle_s: tuple[float, set[str]] | None = None,
               op_free: frozenset[str] = frozenset()) -> ABOutcome:
    """Measure side B against side A (``specs``, e.g. :func:`side_specs`) in ``processes`` pairs of
    worker processes running pytest with ``args`` (``only``: just these benchmark ids), then the
    sequential step: a benchmark that says regressed, or whose CI straddles 1+T, is measured by its
    ``confirm`` more pairs and decided again on all pairs together (Chromium Pinpoint's "measure
    more"). ``max_pairs``: then, while a benchmark is still inconclusive with its CI straddling 1+T
    and fewer than this many pairs ran, one more pair at a time (``gpuperf bisect``: a step that cannot decide measures more before
    it decides; the CI is over process pairs, so each pair narrows it). ``label`` names side A in the
    verdicts (``"origin/main (3f2a9c1)"``). With ``why``, the benchmarks that come out regressed or
    improved are then profiled on both sides in :data:`PROFILE_PAIRS` more pairs and get their per-op
    diff (:func:`with_op_diff`; issue 32), and those whose diff named no op in :data:`MORE_PROFILE_PAIRS`
    more, and with ``traces_dir`` each side's chrome trace is saved
    there, A's and B's next to each other. ``confirming``: the A/B that confirms or settles
    stored-baseline comparisons, whose memory, counts and bottleneck stay the stored run's
    (:func:`~pytest_gpuperf.plugin.replicates.with_ab_confirmation`): its workers make no extra
    calls for them, and only its regressions are profiled (an improvement fails nothing; its why
    took 5 process pairs, 90 s, on cattrs' suite, 2026-11-29). ``why_max``: profile at most that
    many (:func:`why_first`; the others' ``op diff`` is unavailable, saying so; None: all).
    ``op_free``: ids whose op profile (e.g. the baseline's) held no torch op
    (:func:`~pytest_gpuperf.verdict.opdiff.op_free`): never profiled, their ``op diff`` unavailable
    with :data:`~pytest_gpuperf.verdict.opdiff.OP_FREE`; a benchmark whose first profiling pairs
    found no op on either side gets no :data:`MORE_PROFILE_PAIRS` either.
    ``settle_s``: ``(seconds, must)``, the time the A/B may take when it confirms or settles
    (``--gpuperf-settle-time``) and the ids it measures whatever the time (the regressions to
    confirm): the first pair starts no other after ``seconds / (processes + 0.5)`` (each later
    pair takes about as long, a confirmation pair about half), a confirmation pair measures only
    regressions once ``seconds`` have passed, and what was left out is :attr:`ABOutcome.skipped`.
    The one A/B decision of the plugin (``--gpuperf-ab``, the
    confirmation of stored-baseline regressions) and of ``gpuperf bisect``. Raises :class:`ABError`."""
    from pytest_gpuperf.ab.results import ab_results, needs_more_pairs

    coordinator = Coordinator(specs, args, processes, log_dir, progress=progress, announce=announce,
                              traces_dir=traces_dir if why else None, extras=not confirming)
    coordinator.only = None if only is None else set(only)
    if settle_s is not None:
        coordinator.deadline = (settle_s[0] / (processes + 0.5), frozenset(settle_s[1]))
    coordinator.run()
    results, removed, notes = ab_results(coordinator, label)
    spent = settle_s is not None and coordinator.elapsed_s() > settle_s[0]
    suspects = {k: n for k, r in results.items() if needs_more_pairs(r.comparison) and (n := r.options.confirm) > 0
                and not (spent and r.comparison.verdict.value != "regressed")}
    if suspects:
        coordinator.confirm(set(suspects), max(suspects.values()))
        results, removed, notes = ab_results(coordinator, label)
    while max_pairs is not None and processes + coordinator.confirmed_pairs < max_pairs:
        suspects = {k: n for k, r in results.items()  # still undecided: inconclusive, its CI straddling 1+T
                    if needs_more_pairs(r.comparison) and r.comparison.verdict.value == "inconclusive"
                    and (n := r.options.confirm) > 0 and (only is None or k in only)}
        if not suspects:
            break
        coordinator.confirm(set(suspects), 1)
        results, removed, notes = ab_results(coordinator, label)
    if why:
        results = _why_step(coordinator, results, label, confirming=confirming, why_max=why_max, op_free=op_free)
    return ABOutcome(results, removed, coordinator.notes + notes, frozenset(coordinator.skipped))


def _why_step(coordinator: Coordinator, results: dict[str, Any], label: str, *, confirming: bool,
              why_max: int | None, op_free: frozenset[str]) -> dict[str, Any]:
    """The why of :func:`measure_ab`'s verdicts that moved (only regressions when ``confirming``):
    none for those in ``op_free``, the ``why_max`` largest of the others profiled."""
    moved = {k for k, r in results.items() if r.comparison is not None
             and r.comparison.verdict.value in (("regressed",) if confirming else ("regressed", "improved"))}
    results = without_why(moved & op_free, results)
    return _with_why(coordinator, *why_first(moved - op_free, results, why_max), label)


def _with_why(coordinator: Coordinator, moved: set[str], results: dict[str, Any], label: str) -> dict[str, Any]:
    """``results`` where each of ``moved`` has its per-op diff: profiled on both sides in
    :data:`PROFILE_PAIRS` more pairs, and those whose diff named no op in :data:`MORE_PROFILE_PAIRS`
    more (one pair may then disagree). A failed profile leaves the verdict, its op diff unavailable."""
    if not moved:
        return results
    try:
        coordinator.profile(moved, PROFILE_PAIRS)
    except ABError as exc:  # a diagnosis never takes the verdicts down
        for key in moved:
            coordinator.measured[key].profile_errors.setdefault("B", (f"the profiling workers failed: {exc}", ""))
    results = {k: with_op_diff(r, coordinator.measured.get(k), label) if k in moved else r for k, r in results.items()}
    unnamed = {k for k in moved if (d := getattr(results[k], "op_diff", None)) is not None and not d.named
               and not ((m := coordinator.measured.get(k)) is not None
                        and all(op_free(m.profiles.get(side)) for side in SIDES))}  # no op to name: no more pairs
    if not unnamed:
        return results
    try:
        coordinator.profile(unnamed, MORE_PROFILE_PAIRS)
    except ABError:  # the diff of the first pairs stands
        return results
    return {k: with_op_diff(r, coordinator.measured.get(k), label) if k in unnamed else r for k, r in results.items()}


#: Process pairs that profile the benchmarks an A/B run found regressed or improved (the diff's CI
#: groups their cycles by process, so it needs two or more per side).
PROFILE_PAIRS = 3
#: More pairs for a benchmark whose diff named no op after :data:`PROFILE_PAIRS`: with 5 pairs one
#: may disagree (:data:`pytest_gpuperf.verdict.opdiff.DISSENT_FROM_PAIRS`; docs/why.md).
MORE_PROFILE_PAIRS = 2


def without_why(skip: set[str], results: dict[str, Any]) -> dict[str, Any]:
    """``results`` where each of ``skip`` has its ``op diff`` unavailable with
    :data:`~pytest_gpuperf.verdict.opdiff.OP_FREE` (its op profile held no torch op: no profiling
    can name one). Pure."""
    from pytest_gpuperf.core.containment import OP_DIFF, Unavailable
    from pytest_gpuperf.verdict.opdiff import OP_FREE

    why = Unavailable(OP_DIFF, OP_FREE)
    return {k: r.replace(unavailable={**r.unavailable, OP_DIFF: why}) if k in skip else r for k, r in results.items()}


def why_first(keys: set[str], results: dict[str, Any], why_max: int | None) -> tuple[set[str], dict[str, Any]]:
    """The ``why_max`` of ``keys`` whose verdicts moved most (``|log ratio|`` of ``results[key]``'s
    comparison, largest first; all when None or not fewer) and ``results`` where each of the
    others has its ``op diff`` unavailable: ``not profiled: the why is made for the 10 largest
    changes of 146 (--gpuperf-why-max)``. Pure."""
    import math

    from pytest_gpuperf.core.containment import OP_DIFF, Unavailable
    from pytest_gpuperf.verdict.opdiff import NOT_PROFILED

    if why_max is None or len(keys) <= why_max:
        return keys, results
    size = {k: abs(math.log(r)) if (r := results[k].comparison.ratio) and r > 0 else 0.0 for k in keys}
    kept = set(sorted(keys, key=lambda k: (-size[k], k))[:why_max])
    why = Unavailable(OP_DIFF, f"{NOT_PROFILED}the why is made for the {why_max} largest changes of {len(keys)} "
                               f"(--gpuperf-why-max)")
    return kept, {k: r.replace(unavailable={**r.unavailable, OP_DIFF: why}) if k in keys - kept else r
                  for k, r in results.items()}


def with_op_diff(result: Any, m: "Measured | None", label: str) -> Any:
    """``result`` with its per-op diff (:func:`pytest_gpuperf.verdict.opdiff.diff_profiles` of A's and
    B's profiles), or with the part ``op diff`` unavailable and why (a side's profile failed or is
    missing). Contained: never raises, never changes the verdict."""
    import dataclasses

    from pytest_gpuperf.core.containment import OP_DIFF, Unavailable, contained

    if m is None:
        return result
    unavailable = dict(result.unavailable)
    failed = next(iter(m.profile_errors.items()), None)
    if failed is not None:
        side, (error, where) = failed
        unavailable[OP_DIFF] = Unavailable(OP_DIFF, f"side {side}: {error}", where)
        return result.replace(unavailable=unavailable)
    if not m.profiles.get("A") or not m.profiles.get("B"):
        unavailable[OP_DIFF] = Unavailable(OP_DIFF, f"no profile of side {'A' if not m.profiles.get('A') else 'B'}")
        return result.replace(unavailable=unavailable)

    def diff() -> Any:
        from pytest_gpuperf.verdict.opdiff import OpSample, diff_profiles

        c = result.comparison  # the verdict's medians per call of A and B: the change the ops must explain
        whole = ((c.baseline_median_ms, c.current_median_ms)
                 if c is not None and c.baseline_median_ms and c.current_median_ms else None)
        return diff_profiles([OpSample.from_dict(x) for x in m.profiles["A"]],
                             [OpSample.from_dict(x) for x in m.profiles["B"]], source="A/B", whole_ms=whole)

    got = contained(OP_DIFF, diff, unavailable)
    if got is not None and m.traces.get("A") and m.traces.get("B"):
        got = dataclasses.replace(got, traces=(m.traces["A"], m.traces["B"]))
    return result.replace(op_diff=got, unavailable=unavailable)


def hash_seed(key: str, process: int) -> int:
    """A stable seed from a benchmark key and a process-pair index (not Python's salted hash)."""
    import zlib

    return zlib.crc32(f"{key}#{process}".encode())


# ----------------------------------------------------------------------------- the worker's side


class WorkerClient:
    """A worker's end of the protocol (:data:`~pytest_gpuperf.core.environ.AB_WORKER` in its
    environment): say hello with the collected node ids, then for every benchmark ``ready`` and obey
    commands until ``finish``."""

    def __init__(self, ch: Channel | None, ranks: Any = None) -> None:
        from pytest_gpuperf.core.environ import ab_worker

        me = ab_worker()
        self.ch = ch
        self.ranks = ranks
        self.side = str(me.get("side", "?"))
        self.root = str(me.get("root", ""))
        self.other_root = str(me.get("other_root", ""))
        self.said_hello = False

    @classmethod
    def from_environment(cls, ranks: Any = None) -> "WorkerClient | None":
        """This process's client, or None outside an A/B worker. ``ranks``: in a rank of a torchrun
        launch (``--gpuperf-nproc``; a :class:`~pytest_gpuperf.measure.distributed.Ranks`), rank 0
        connects and every other rank follows the commands rank 0 receives (:meth:`command`),
        saying nothing itself."""
        if ranks is not None and not ranks.is_writer:
            return cls(None, ranks) if _take_connect_address() else None
        ch = connect_worker()
        return cls(ch, ranks) if ch is not None else None

    def _send(self, obj: dict[str, Any]) -> None:
        if self.ch is not None:  # a following rank says nothing
            self.ch.send(obj)

    def hello(self, items: Sequence[str]) -> None:
        self._send({"side": self.side, "items": list(items), "pid": os.getpid()})
        self.said_hello = True

    def ready(self, key: str, nodeid: str, max_time_s: float) -> None:
        if self.ch is None:
            return
        import pytest_gpuperf

        plugin_dir = str(Path(pytest_gpuperf.__file__).resolve().parent)
        foreign = foreign_modules(self.root, self.other_root, allowed=[plugin_dir]) if self.root else []
        self.ch.send({"op": "ready", "key": key, "nodeid": nodeid, "max_time_s": max_time_s, "foreign": foreign})

    def command(self) -> dict[str, Any]:
        """The coordinator's next command; in a torchrun launch rank 0's, sent to every rank (one
        broadcast), so that the ranks make the same calls. Raises :class:`ABError` when the
        coordinator went away."""
        msg = self.ch.recv() if self.ch is not None else None
        if self.ranks is not None:
            msg = self.ranks.broadcast(msg)
        if msg is None:
            raise ABError("the A/B coordinator went away")
        return msg

    def reply(self, op: str, **kw: Any) -> None:
        self._send({"op": op, **kw})

    def bye(self) -> None:
        if self.ch is None:
            return
        try:
            self.ch.send({"op": "bye"})
        except OSError:
            pass
        self.ch.close()
