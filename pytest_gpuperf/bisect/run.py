"""``gpuperf bisect GOOD BAD -- <pytest args>``: find the commit that made a benchmark slower.

The search itself is :func:`pytest_gpuperf.verdict.bisection.bisect` (pure); this module gives it
its commits and its measurements:

1. **The commits**: the first-parent line from GOOD to BAD (``git rev-list --first-parent``), after
   checking that GOOD is an ancestor of BAD on that line (reversed or unrelated revisions, and a
   shallow clone that lacks GOOD, are usage errors that say what to do).
2. **A measurement** of commit ``b`` against commit ``a`` is the plugin's own paired A/B run
   (:func:`pytest_gpuperf.ab.run.measure_ab`: interleaved ABBA blocks in pairs of worker processes,
   and more pairs when the first ones cannot decide), with side A in a worktree of ``a`` and side B
   in a worktree of ``b``, running the user's pytest selection. Each step measures only the
   benchmarks still being bisected; other selected benchmarks are passed through untimed.
3. **Worktrees**: one per commit under ``<repo>/.gpuperf/bisect/<sha12>``, made when a step first
   needs it, reused by later steps, and all removed at the end, also on an error or Ctrl-C.

A commit where a benchmark cannot run (the worker fails to start or collect, the test fails before
it measures, the benchmark does not exist there) is a skip, as ``git bisect skip``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from pytest_gpuperf.ab.run import ABError, git, measure_ab, remove_worktree, tree_specs, with_nproc, worker_args
from pytest_gpuperf.verdict.bisection import Call, Outcome, Probe, bisect, call_of


class BisectError(RuntimeError):
    """The bisection cannot run: bad revisions, no repository (the message says what to pass)."""


@dataclass(frozen=True)
class Commit:
    """A commit of the bisected line: full ``sha`` and the subject line of its message."""

    sha: str
    subject: str

    @property
    def short(self) -> str:
        return self.sha[:7]


def _resolve(repo: Path, rev: str, name: str) -> str:
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except ABError:
        hint = ""
        if _shallow(repo):
            hint = (" This clone is shallow: fetch the history (git fetch --unshallow, or actions/checkout "
                    "with fetch-depth: 0).")
        raise BisectError(f"{name} {rev!r} is not a commit in {repo} (a branch, tag or sha, e.g. v1.2 or "
                          f"HEAD~8).{hint}") from None


def _shallow(repo: Path) -> bool:
    try:
        return git(repo, "rev-parse", "--is-shallow-repository") == "true"
    except ABError:
        return False


def _is_ancestor(repo: Path, a: str, b: str) -> bool:
    try:
        git(repo, "merge-base", "--is-ancestor", a, b)
        return True
    except ABError:
        return False


def repository(start: Path) -> Path:
    """The top folder of the git repository holding ``start``. Raises :class:`BisectError`."""
    try:
        return Path(git(start, "rev-parse", "--show-toplevel")).resolve()
    except ABError as exc:
        raise BisectError(f"bisect: {start} is not inside a git repository ({exc})") from None


def first_parent_line(repo: Path, good: str, bad: str) -> list[Commit]:
    """``[GOOD, ..., BAD]``: GOOD and the commits of BAD's first-parent line after it, oldest first.
    Raises :class:`BisectError` when either is not a commit, they are the same, BAD is older than
    GOOD (reversed), GOOD is not an ancestor of BAD, or GOOD is an ancestor only through a merged
    branch (not on BAD's first-parent line)."""
    g, b = _resolve(repo, good, "GOOD"), _resolve(repo, bad, "BAD")
    if g == b:
        raise BisectError(f"GOOD {good!r} and BAD {bad!r} are the same commit ({g[:7]}): nothing to bisect")
    if not _is_ancestor(repo, g, b):
        if _is_ancestor(repo, b, g):
            raise BisectError(f"GOOD {good!r} ({g[:7]}) is newer than BAD {bad!r} ({b[:7]}): the arguments are "
                              f"reversed; give the older, fast commit first: gpuperf bisect {bad} {good} -- ...")
        shallow = " (this clone is shallow: fetch the history, e.g. fetch-depth: 0)" if _shallow(repo) else ""
        raise BisectError(f"GOOD {good!r} ({g[:7]}) is not an ancestor of BAD {bad!r} ({b[:7]}){shallow}: bisect "
                          f"searches the history between them; pick GOOD on BAD's branch, e.g. "
                          f"git merge-base {good} {bad}")
    log = git(repo, "log", "--first-parent", "--reverse", "--format=%H %s", f"{g}..{b}")
    line = [Commit(*(row.split(" ", 1) + [""])[:2]) for row in log.splitlines() if row.strip()]
    parents = git(repo, "rev-parse", f"{line[0].sha}^1") if line else ""
    if parents != g:
        raise BisectError(f"GOOD {good!r} ({g[:7]}) is an ancestor of BAD {bad!r} only through a merged branch, "
                          f"not on BAD's first-parent line; pick a commit of that line, e.g. "
                          f"git merge-base --fork-point or the merge commit's first parent")
    subject = git(repo, "log", "-1", "--format=%s", g)
    return [Commit(g, subject), *line]


@dataclass
class Worktrees:
    """One worktree per commit under ``<repo>/.gpuperf/bisect``, made on first use and all removed
    by :meth:`close` (a ``with`` block closes them on an error or Ctrl-C too)."""

    repo: Path
    made: dict[str, Path] = field(default_factory=dict)

    @property
    def folder(self) -> Path:
        from pytest_gpuperf.core.files import ensure_output_dir

        folder = self.repo / ".gpuperf" / "bisect"
        ensure_output_dir(folder)
        return folder

    def __call__(self, sha: str) -> Path:
        if sha not in self.made:
            path = self.folder / sha[:12]
            if path.exists():  # left by a run that was killed: start clean
                remove_worktree(self.repo, path)
            self.made[sha] = path  # before it is made: a SIGTERM during `git worktree add` leaves a part
            git(self.repo, "worktree", "add", "--detach", "--force", str(path), sha)
        return self.made[sha]

    def close(self) -> None:
        for path in self.made.values():
            try:
                remove_worktree(self.repo, path)
            except ABError:
                pass  # git cannot run any more: nothing else to try
        self.made.clear()

    def __enter__(self) -> "Worktrees":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: The note of a step not measured because the bisection's time cap was reached.
TIME_CAP_NOTE = "the time cap was reached"

#: ``measure(a_sha, b_sha, keys) -> {key: Probe}`` (indices filled in by the caller); injectable for tests.
Measure = Callable[[str, str, "set[str] | None"], "dict[str, Probe]"]


@dataclass
class StepLog:
    """One measured pair, for the progress line and the report: ``a``/``b`` commit indices,
    the probes by benchmark id, and the seconds it took."""

    a: int
    b: int
    probes: dict[str, Probe]
    seconds: float


@dataclass
class BisectRun:
    """The whole bisection: ``commits`` (GOOD first), ``outcomes`` (benchmark id -> its
    :class:`~pytest_gpuperf.verdict.bisection.Outcome`), ``steps`` (every measured pair in order),
    ``keys`` (benchmarks selected, from the BAD-vs-GOOD step), ``seconds`` (wall time)."""

    commits: list[Commit]
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    steps: list[StepLog] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


class Bisector:
    """Runs one bisection of the benchmarks that ``pytest_args`` select (see the module doc).

    ``repo``: the repository's top folder; ``invocation_dir``: where the user ran the command (inside
    ``repo``; each side runs from the same place in its worktree); ``processes``: A/B pairs of worker
    processes per step (more are added by the A/B confirmation when a step cannot decide);
    ``import_roots``: as ``gpuperf_ab_pythonpath``; ``progress``: one line per step;
    ``max_regressions``: culprits searched per benchmark; ``max_pairs``: a step that cannot decide
    measures more, one pair at a time, up to this many pairs; ``step_progress``: the A/B run's own
    progress lines inside a step (each benchmark and pair); ``time_cap_s``: no step starts after this
    many seconds (the search then stops with the range it narrowed down to); ``measure``: replaces the
    A/B run (tests); ``why``: profile a culprit's own step on both sides (``--no-why`` turns it off);
    ``config``: the pytest session's, when it runs the bisection (how its plugins' options take values,
    :func:`~pytest_gpuperf.ab.run.worker_args`); ``nproc``: each side's worker a torchrun launch of
    that many ranks (``--gpuperf-nproc``; None: one process).
    """

    def __init__(self, repo: Path, invocation_dir: Path, pytest_args: Sequence[str], *, processes: int = 1,
                 import_roots: Sequence[str] = (), progress: Callable[[str], None] = print,
                 max_regressions: int = 3, time_cap_s: float | None = None, max_pairs: int = 6,
                 step_progress: Callable[[str], None] | None = None, measure: Measure | None = None,
                 why: bool = True, config: Any = None, nproc: int | None = None) -> None:
        self.repo, self.invocation_dir, self.nproc = repo, invocation_dir, nproc
        self.why = why
        self.max_pairs = max(max_pairs, processes)
        self.step_progress = step_progress or (lambda _s: None)
        self.args = worker_args(pytest_args, config)
        self.processes, self.import_roots, self.progress = processes, list(import_roots), progress
        self.max_regressions, self.time_cap_s = max_regressions, time_cap_s
        self.worktrees = Worktrees(repo)
        self._measure = measure or self._measure_ab
        self._start = time.monotonic()
        self.run_: BisectRun | None = None

    def run(self, good: str, bad: str, keys: set[str] | None = None,
            known: dict[str, Probe] | None = None) -> BisectRun:
        """Bisect GOOD..BAD for the benchmarks the pytest arguments select (``keys``: only these ids,
        the others run untimed); raises :class:`BisectError` for bad revisions or when BAD cannot be
        measured against GOOD. ``known``: BAD against GOOD measured already, by benchmark id (the A/B
        confirmation of the same two commits): the first step's probes, not measured again."""
        commits = first_parent_line(self.repo, good, bad)
        run = self.run_ = BisectRun(commits)
        self._start = time.monotonic()
        if uncommitted(self.repo):
            run.notes.append("the working tree has uncommitted changes: they are not measured (bisect measures "
                             "commits, each in its own worktree)")
        self.progress(f"bisect: {len(commits)} commits on the first-parent line from {commits[0].short} (GOOD) to "
                      f"{commits[-1].short} (BAD); measuring BAD against GOOD")
        with self.worktrees:
            cache: dict[tuple[int, int], dict[str, Probe]] = {}
            first = self._step(0, len(commits) - 1, keys, cache, known)
            run.keys = sorted(first)
            if not first:
                raise BisectError(f"no benchmark of the selection ran at both GOOD ({commits[0].short}) and BAD "
                                  f"({commits[-1].short}): check the pytest arguments after --")
            for key in run.keys:
                def measure(a: int, b: int, key: str = key) -> Probe:
                    if key not in cache.get((a, b), {}):  # a pair measured for another benchmark is not enough
                        self._step(a, b, {key}, cache)
                    return cache[(a, b)].get(key) or Probe(a, b, Call.SKIP, note=f"{key} did not run")
                run.outcomes[key] = bisect(len(commits), measure, self.max_regressions)
        run.seconds = time.monotonic() - self._start
        return run

    def _step(self, a: int, b: int, keys: set[str] | None,
              cache: dict[tuple[int, int], dict[str, Probe]], known: dict[str, Probe] | None = None) -> dict[str, Probe]:
        assert self.run_ is not None
        commits = self.run_.commits
        t0 = time.monotonic()
        if self.time_cap_s is not None and keys and t0 - self._start > self.time_cap_s:
            note = f"{TIME_CAP_NOTE} ({self.time_cap_s:g} s) before this step"
            cache.setdefault((a, b), {}).update({k: Probe(a, b, Call.UNCLEAR, note=note) for k in keys})
            return cache[(a, b)]
        got = known if known is not None else self._measure(commits[a].sha, commits[b].sha, keys)
        probes = {k: replace(p, a=a, b=b) for k, p in got.items()}
        cache.setdefault((a, b), {}).update(probes)
        self.run_.steps.append(StepLog(a, b, probes, time.monotonic() - t0))
        self.progress(step_line(len(self.run_.steps), commits, a, b, probes, time.monotonic() - self._start)
                      + (" (measured by the A/B confirmation)" if known is not None else ""))
        return probes

    def _measure_ab(self, a_sha: str, b_sha: str, keys: set[str] | None) -> dict[str, Probe]:
        """Commit ``b_sha`` against ``a_sha`` by the plugin's A/B run, for ``keys`` (None: every
        selected benchmark); a commit whose workers cannot run gives skips. A step between adjacent
        commits (a culprit's own step) that moves is also profiled on both sides, as ``--gpuperf-ab``
        does (why it got slower, op by op; the chrome traces under ``.gpuperf/bisect/traces``)."""
        a_tree, b_tree = self.worktrees(a_sha), self.worktrees(b_sha)
        step = f"{a_sha[:12]}-{b_sha[:12]}"
        logs = self.worktrees.folder / "logs" / step
        logs.mkdir(parents=True, exist_ok=True)
        why = self.why and self._adjacent(a_sha, b_sha)
        try:
            specs = with_nproc(tree_specs(self.repo, a_tree, b_tree, self.invocation_dir, self.import_roots), self.nproc)
            outcome = measure_ab(specs, self.args, self.processes, logs, a_sha[:7], only=keys,
                                 max_pairs=self.max_pairs, progress=self.step_progress, why=why,
                                 traces_dir=self.worktrees.folder / "traces" / step)
        except ABError as exc:
            if keys is None:  # the first step, BAD against GOOD: nothing to search without it
                raise BisectError(f"bisect: measuring BAD ({b_sha[:7]}) against GOOD ({a_sha[:7]}) failed: {exc}") from None
            return {k: Probe(0, 0, Call.SKIP, note=_first_line(str(exc))) for k in keys}
        from pytest_gpuperf.core.containment import OP_DIFF
        from pytest_gpuperf.reporting.messages import comparison_note

        out = {}
        for key, r in outcome.results.items():
            if keys is not None and key not in keys:
                continue
            c = r.comparison
            verdict = c.verdict.value if c is not None else None
            note = comparison_note(c) if c is not None else ""
            missing = r.unavailable.get(OP_DIFF)
            out[key] = Probe(0, 0, call_of(verdict), c.ratio if c else None, c.ratio_ci if c else None, verdict, note,
                             op_diff=r.op_diff, why_missing=missing.text() if missing is not None else "")
        for key in keys or ():
            if key not in out:
                why = next((n for n in outcome.notes if key in n),
                           f"{key} did not run at {b_sha[:7]}; its output: {logs / 'worker-B1.log'}")
                out[key] = Probe(0, 0, Call.SKIP, note=_first_line(why))
        return out

    def _adjacent(self, a_sha: str, b_sha: str) -> bool:
        """Whether ``b_sha`` directly follows ``a_sha`` on the bisected line (a culprit's own step)."""
        shas = [c.sha for c in self.run_.commits] if self.run_ is not None else []
        return a_sha in shas and b_sha in shas and shas.index(b_sha) == shas.index(a_sha) + 1


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


def uncommitted(repo: Path, untracked: bool = False) -> bool:
    """Whether tracked files of the git working tree ``repo`` have uncommitted changes, or with
    ``untracked`` there are untracked files too (Python's bytecode caches aside); False when git
    cannot tell (True with ``untracked``)."""
    try:
        status = git(repo, "status", "--porcelain", "--untracked-files=" + ("all" if untracked else "no"))
    except ABError:
        return untracked
    return any("__pycache__/" not in line for line in status.splitlines())


def step_line(k: int, commits: Sequence[Commit], a: int, b: int, probes: dict[str, Probe], elapsed_s: float) -> str:
    """The progress line of step ``k``: ``"bisect: step 3: 5f3c2a1 (6/15) vs GOOD 1a2b3c4: test_x 1.21x
    [1.15x, 1.27x] regressed -> bad; 41 s elapsed"``."""
    from pytest_gpuperf.reporting.messages import ratio_with_ci

    who = "GOOD " if a == 0 else ""
    parts = []
    for key, p in sorted(probes.items()):
        name = key.rsplit("::", 1)[-1]
        if p.call is Call.SKIP or p.ratio is None:
            parts.append(f"{name} {p.call.value} ({p.note})" if p.note else f"{name} {p.call.value}")
            continue
        parts.append(f"{name} {ratio_with_ci(p.ratio, p.ci)} {p.verdict} -> {p.call.value}")
    return (f"bisect: step {k}: {commits[b].short} ({b}/{len(commits) - 1}) vs {who}{commits[a].short}: "
            f"{'; '.join(parts) or 'nothing measured'}; {elapsed_s:.0f} s elapsed")
