"""Baseline files: JSON schema, validation, paths, and atomic read-merge-write.

Stdlib only, except that loading a file validates it with ``jsonschema`` (imported then, lazily)
and that platforms without ``fcntl`` lock with ``filelock``.

One file per device key and test module (see :func:`module_file_name`)::

    <baseline dir>/<device key>/<module path with "/" as "__", no ".py">.json
    baselines/cpu-amd-epyc/tests__perf__test_workloads.json

A file holds one module's benchmarks: its ``module`` field names the module, and a file that
names another module is never compared with nor written over (:func:`check_module`).

File layout (keys sorted, 2-space indent, trailing newline, so an update is a readable diff)::

    {
      "benchmarks": {"<benchmark id>": <entry>, ...},
      "device_key": "cpu-amd-epyc",
      "module": "tests/perf/test_workloads.py",
      "schema_version": 1
    }

An entry holds ``schema_version``, ``id``, ``group``, ``device``, ``stats`` (summary statistics in
ms), ``samples_ms`` (at most 2,000 raw per-call times, thinned deterministically), ``rounds``,
``calls_per_round``, ``warmup_rounds``, ``options``, ``environment``, ``git_commit`` and
``timestamp_utc`` — all of the newest run — and ``history``: the last K accepted runs, oldest
first, each with ``median_ms``, ``iqr_ms``, ``rounds``, ``timestamp_utc``, ``environment``,
``git_commit``, ``peak_memory_bytes`` and, when measured, ``probe_ms``/``probe`` (the median time
of the interleaved machine-speed probe and its name, see :mod:`pytest_gpuperf.measure.probe`; an entry
holds them for its newest run too). Schema 1 files (one run, no ``history``) still load;
their run becomes the first of the history on the next update. Baselines are never pickled.
"""

from __future__ import annotations

import errno
import functools
import json
import math
import os
import re
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from pytest_gpuperf.core.files import write_atomic
# The typed records live with the verdict code (pure); this module reads and writes them.
from pytest_gpuperf.core.options import BenchOptions
from pytest_gpuperf.verdict.history import BaselineEntry, RunRecord, history_of, process_medians, run_record  # noqa: F401

SCHEMA_VERSION = 2
#: Stored runs kept per benchmark when the entry's options do not say: the ``history`` option's
#: default (:class:`~pytest_gpuperf.core.options.BenchOptions`, where it is stated).
DEFAULT_HISTORY = BenchOptions().history


class BaselineError(Exception):
    """A baseline file cannot be used; the message names the file and what is wrong with it.

    The file is never modified after this error.
    """

    def __init__(self, path: os.PathLike[str] | str, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(  # the reason first (issue 24): pytest's short summary shows the start
            f"unusable baseline file ({problem}): {self.path}. Fix or delete the file, then "
            f"re-record it with `pytest --gpuperf-update-baselines` (the file was left untouched)"
        )


@dataclass(frozen=True)
class BaselineFile:
    """A loaded baseline file: ``benchmarks`` maps benchmark id -> :class:`BaselineEntry`."""

    path: str
    device_key: str | None
    module: str | None
    benchmarks: dict[str, BaselineEntry]

    def get(self, benchmark_id: str) -> BaselineEntry | None:
        """The entry of ``benchmark_id``, or None."""
        return self.benchmarks.get(benchmark_id)


def merge_entry(old: Mapping[str, Any] | None, new: dict[str, Any], keep: int | None = None) -> dict[str, Any]:
    """Append the run ``new`` describes to ``old``'s history, keeping the last ``keep`` runs.

    ``keep`` defaults to ``new["options"]["history"]`` (else :data:`DEFAULT_HISTORY`). The result
    is ``new`` (newest samples and statistics) with the merged ``history``.
    """
    if keep is None:
        keep = int((new.get("options") or {}).get("history") or DEFAULT_HISTORY)
    runs = (history_of(old) if old is not None else []) + [run_record(new)]
    merged = dict(new)
    merged["history"] = runs[-max(1, keep):]
    merged["schema_version"] = SCHEMA_VERSION
    return merged


def _ambiguous_component(part: str) -> bool:
    """Whether a path component could blur the ``__`` separators (or contains the escape ``%``)."""
    return "__" in part or part.startswith("_") or part.endswith("_") or "%" in part


def module_file_name(module_path: str) -> str:
    """``tests/perf/test_models.py`` -> ``tests__perf__test_models.json``.

    Backslashes count as ``/``; leading and trailing ``/`` and a final ``.py`` are dropped; the
    components are joined with ``__``. A component that contains ``__`` or ``%``, or starts or
    ends with ``_``, is written with ``%`` as ``%25`` and ``_`` as ``%5F``
    (``tests/x__y/test_perf.py`` -> ``tests__x%5F%5Fy__test_perf.json``, while
    ``tests/x/y/test_perf.py`` -> ``tests__x__y__test_perf.json``). So two module paths that end
    in ``.py`` never share a file name, and every other component keeps its name unchanged.
    (A path without ``.py``, e.g. ``pkg/test_x``, shares its name with ``pkg/test_x.py``; test
    modules collected by pytest end in ``.py``.)

    Why it is one-to-one: an unescaped component has no ``%``, no ``__`` and no ``_`` at either
    end, an escaped one has no ``_`` at all and always a ``%``; so in the name every run of
    underscores of length 1 is inside a component and every run of length 2k is k separators,
    and each component decodes alone (``%`` present: unescape; absent: as is).
    """
    p = module_path.replace("\\", "/").strip("/")
    if p.endswith(".py"):
        p = p[:-3]
    parts = p.split("/")
    return "__".join(
        part.replace("%", "%25").replace("_", "%5F") if _ambiguous_component(part) else part for part in parts
    ) + ".json"


def _normal_module(module_path: str) -> str:
    return module_path.replace("\\", "/").strip("/")


def check_module(baseline: "BaselineFile | None", module: str) -> None:
    """Raise :class:`BaselineError` when ``baseline`` holds the benchmarks of a module other than ``module``.

    A file without a ``module`` field passes. Such a file is never compared with nor written
    over: before file names were one-to-one (pytest-gpuperf 0.1), ``tests/x/y/test_perf.py``
    and ``tests/x__y/test_perf.py`` shared one file.
    """
    if baseline is None:
        return
    stored = baseline.module
    if not isinstance(stored, str) or not stored or _normal_module(stored) == _normal_module(module):
        return
    own = module_file_name(stored)
    hint = ""
    if Path(baseline.path).name != own:
        hint = f"; to keep its baselines, rename it to {own} (the file name of {stored!r})"
    raise BaselineError(
        baseline.path,
        f"it holds the baselines of module {stored!r}, not of {module!r} whose baselines this file name "
        f"is for, so it is neither compared with nor written over{hint}",
    )


def baseline_path(baseline_dir: os.PathLike[str] | str, device_key: str, module_path: str) -> Path:
    """Where the baselines of ``module_path`` (relative to the rootdir) on ``device_key`` live."""
    return Path(baseline_dir) / device_key / module_file_name(module_path)


def _check_entry(path: Path, bid: str, entry: Any) -> None:
    if not isinstance(entry, dict):
        raise BaselineError(path, f"entry {bid!r} is not a JSON object")
    samples = entry.get("samples_ms")
    if not isinstance(samples, list) or not samples:
        raise BaselineError(path, f"entry {bid!r} has no 'samples_ms' list")
    for v in samples:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise BaselineError(path, f"entry {bid!r} has a sample that is not a positive number: {v!r}")
    version = entry.get("schema_version", SCHEMA_VERSION)
    if isinstance(version, bool) or not isinstance(version, int) or version > SCHEMA_VERSION:
        raise BaselineError(
            path,
            f"entry {bid!r} has schema_version {version!r}; this pytest-gpuperf reads up to "
            f"{SCHEMA_VERSION} (upgrade the plugin)",
        )
    for key in ("options", "environment"):
        if entry.get(key) is not None and not isinstance(entry.get(key), dict):
            raise BaselineError(path, f"entry {bid!r} has {key!r} that is not a JSON object: {entry.get(key)!r}")
    peak = entry.get("peak_memory_bytes")
    if peak is not None and (isinstance(peak, bool) or not isinstance(peak, int) or peak < 0):
        raise BaselineError(path, f"entry {bid!r} has a 'peak_memory_bytes' that is not a whole number of bytes >= 0: {peak!r}")
    stats = entry.get("stats")
    if stats is not None:
        if not isinstance(stats, dict):
            raise BaselineError(path, f"entry {bid!r} has 'stats' that is not a JSON object")
        m = stats.get("median_ms")
        if m is not None and (isinstance(m, bool) or not isinstance(m, (int, float)) or not math.isfinite(m) or m <= 0):
            raise BaselineError(path, f"entry {bid!r} has a 'stats.median_ms' that is not a positive number: {m!r}")
    hist = entry.get("history")
    if hist is not None:
        if not isinstance(hist, list):
            raise BaselineError(path, f"entry {bid!r} has a 'history' that is not a list")
        for run in hist:
            m = run.get("median_ms") if isinstance(run, dict) else None
            if isinstance(m, bool) or not isinstance(m, (int, float)) or not math.isfinite(m) or m <= 0:
                raise BaselineError(path, f"entry {bid!r} has a history run without a positive 'median_ms': {run!r}")


#: Keywords whose value maps names (properties, definitions) to subschemas, not keywords.
_NAME_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")


def _without_required(node: Any, names: bool = False) -> Any:
    """A copy of a JSON Schema without its ``required`` keywords (a property named "required" stays)."""
    if isinstance(node, list):
        return [_without_required(v) for v in node]
    if not isinstance(node, dict):
        return node
    return {k: _without_required(v, names=not names and k in _NAME_MAPS)
            for k, v in node.items() if names or k != "required"}


@functools.lru_cache(maxsize=None)
def _schema_validator(kind: str) -> Any:
    """A ``jsonschema`` validator of the loading rules: the schema ``kind`` without ``required``.

    ``pytest_gpuperf/storage/schema/<kind>.schema.json`` describes what the plugin writes, every field
    required; a loaded file may lack fields that the plugin can do without (older versions,
    hand-written or trimmed files), but a field that is present must have the schema's type.
    Missing essentials (``schema_version``, ``benchmarks``, ``samples_ms``) are checked by hand.
    """
    import jsonschema

    from pytest_gpuperf.storage.schema import load_schema

    schema = _without_required(load_schema(kind))
    # Each sample is checked by hand, more strictly (finite, > 0) and ~100x faster than per-item
    # schema validation (up to 2,000 samples per entry); the list's own rules stay.
    samples = schema.get("$defs", {}).get("entry", {}).get("properties", {}).get("samples_ms")
    if isinstance(samples, dict):
        samples.pop("items", None)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema)


def json_path(parts: Sequence[Any]) -> str:
    """``["benchmarks", "test_a", "stats"]`` -> ``benchmarks['test_a'].stats`` (list indices as ``[i]``)."""
    out = ""
    for i, part in enumerate(parts):
        if isinstance(part, int):
            out += f"[{part}]"
        elif (i == 1 and parts[0] == "benchmarks") or not str(part).isidentifier():
            out += f"[{str(part)!r}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _schema_problem(data: Any, kind: str = "baseline") -> str | None:
    """The first violation of the loading rules of schema ``kind`` (see :func:`_schema_validator`), or None."""
    from jsonschema.exceptions import best_match

    error = best_match(_schema_validator(kind).iter_errors(data))
    if error is None:
        return None
    message = error.message if len(error.message) <= 200 else error.message[:200] + "..."
    return f"{json_path(list(error.absolute_path))}: {message}"


def parse(path: os.PathLike[str] | str, text: str, *, schema: str | None = "baseline") -> BaselineFile:
    """Validate the text of a baseline file. Raises :class:`BaselineError` naming the file.

    The hand checks (JSON, ``schema_version``, ``benchmarks``, each entry's ``samples_ms`` and
    typed fields, with specific messages) run first; then the document is checked against the
    JSON Schema ``schema`` (``pytest_gpuperf/storage/schema/<schema>.schema.json``, its ``required``
    lists left out; None: not at all), and the message names the JSON path of the bad field,
    e.g. ``benchmarks['test_a'].stats: None is not of type 'object'``.
    """
    p = Path(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BaselineError(p, f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if not isinstance(data, dict):
        raise BaselineError(p, "the top level is not a JSON object")
    version = data.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise BaselineError(p, "missing or non-integer 'schema_version'")
    if version > SCHEMA_VERSION:
        raise BaselineError(
            p, f"schema_version {version} is newer than this pytest-gpuperf reads ({SCHEMA_VERSION}); upgrade the plugin"
        )
    benchmarks = data.get("benchmarks")
    if not isinstance(benchmarks, dict):
        raise BaselineError(p, "missing 'benchmarks' object")
    for bid, entry in benchmarks.items():
        _check_entry(p, bid, entry)
    if schema is not None:
        problem = _schema_problem(data, schema)
        if problem is not None:
            raise BaselineError(p, problem)
    entries = {bid: BaselineEntry.from_json(bid, entry) for bid, entry in benchmarks.items()}
    return BaselineFile(str(p), data.get("device_key"), data.get("module"), entries)


def load(path: os.PathLike[str] | str) -> BaselineFile | None:
    """Load and validate a baseline file; ``None`` when it does not exist.

    Raises :class:`BaselineError` (naming the file) when it is unreadable, not JSON, or does
    not follow the schema. Never writes.
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BaselineError(p, f"cannot be read ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BaselineError(p, "not UTF-8 text") from None
    return parse(p, text)


def process_spreads(path: str) -> dict[str, tuple[tuple[float, ...], ...]]:
    """For each benchmark of the baseline file at ``path``: its newest run's process medians (ms),
    the wall clock's and, where stored, the CPU time's (``process_medians_ms``, its newest
    history record's ``cpu_process_medians_ms``), for a timed worker process's early stop
    (:mod:`pytest_gpuperf.verdict.allocation`). Read once per version of the file, and forgiving: a missing,
    unreadable or malformed file, or entry, gives nothing (the worker then times as without a
    baseline; its coordinator reports the file's problem when it decides). Never writes."""
    try:
        st = os.stat(path)
    except OSError:
        return {}
    return _process_spreads(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=64)
def _process_spreads(path: str, _mtime_ns: int, _size: int) -> dict[str, tuple[tuple[float, ...], ...]]:
    """:func:`process_spreads` of the file as it was at that modification time and size (cached)."""
    try:
        benchmarks = json.loads(Path(path).read_bytes().decode("utf-8")).get("benchmarks")
    except (OSError, ValueError, AttributeError):
        return {}
    out: dict[str, tuple[tuple[float, ...], ...]] = {}
    for bid, entry in (benchmarks.items() if isinstance(benchmarks, dict) else ()):
        history = entry.get("history") if isinstance(entry, dict) else None
        newest = history[-1] if isinstance(history, list) and history and isinstance(history[-1], dict) else {}
        medians = tuple(m for m in (process_medians(entry) if isinstance(entry, dict) else None,
                                    process_medians(newest, "cpu_process_medians_ms")) if m)
        if medians:
            out[str(bid)] = medians
    return out


def dumps(data: Mapping[str, Any]) -> str:
    """Serialize as the project writes every JSON file: sorted keys, 2-space indent, trailing newline."""
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"


# ----------------------------------------------------------------------------- locks

#: Seconds :func:`update` waits for the lock of a baseline file before it gives up (TimeoutError).
LOCK_TIMEOUT_S = 300.0


def lock_folder() -> Path:
    """This user's folder of lock files: ``<temp dir>/gpuperf-locks-<uid>``, mode 0700.

    Per user, so that one user's folder never keeps another from locking. Where the platform has
    no user ids (Windows), ``gpuperf-locks-<user name>``. Raises ``PermissionError`` when the
    path exists but is not a folder owned by this user (say, a link someone else planted).
    """
    base = Path(tempfile.gettempdir())
    getuid = getattr(os, "getuid", None)
    if getuid is None:
        try:
            import getpass

            user = getpass.getuser()
        except Exception:  # no user name known (getpass raises OSError, or KeyError before 3.13)
            user = ""
        folder = base / f"gpuperf-locks-{re.sub(r'[^A-Za-z0-9_.-]', '_', user) or 'user'}"
        folder.mkdir(parents=True, exist_ok=True)
        return folder
    uid = getuid()
    folder = base / f"gpuperf-locks-{uid}"
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
        raise PermissionError(
            errno.EACCES,
            f"the lock folder of pytest-gpuperf is not a folder owned by this user (uid {uid}); remove it",
            str(folder),
        )
    if st.st_mode & 0o077:
        os.chmod(folder, 0o700)
    return folder


class RemovingFileLock:
    """An exclusive cross-process lock (``flock``) whose lock file is removed when it is released.

    Removing a lock file is only safe when waiters re-check, because a waiter may have opened
    the file before the holder removed it and then win the ``flock`` on the removed inode while a
    newcomer creates and locks a new file of the same name: two holders. So, as in the classic
    lock-file protocol: the holder removes the file *before* it releases the ``flock``, and an
    acquirer, once its ``flock`` is granted, checks that the path still names the file it locked
    (same device and inode); if not, the file it locked was removed by the previous holder, and it
    starts over with the file now at the path. Only a holder removes, and only its own file, so
    the path names the holder's file for as long as it holds the lock.
    """

    def __init__(self, lock_file: os.PathLike[str] | str, timeout: float = LOCK_TIMEOUT_S,
                 poll_s: float = 0.01) -> None:
        self.lock_file = str(lock_file)
        self.timeout = timeout
        self.poll_s = poll_s
        self._fd: int | None = None

    @property
    def is_locked(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        import fcntl

        deadline = time.monotonic() + self.timeout
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        while True:
            fd = os.open(self.lock_file, flags, 0o600)
            try:
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except OSError as exc:
                        if exc.errno not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
                            raise
                    if time.monotonic() >= deadline:
                        raise TimeoutError(
                            errno.ETIMEDOUT,
                            f"another process held the lock for more than {self.timeout:g} s", self.lock_file,
                        )
                    time.sleep(self.poll_s)
                try:
                    current = os.lstat(self.lock_file)
                except FileNotFoundError:
                    current = None
                if current is not None and os.path.samestat(os.fstat(fd), current):
                    self._fd = fd
                    return
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # the previous holder removed the file we locked: start over

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if os.path.samestat(os.fstat(fd), os.lstat(self.lock_file)):  # ours (always, unless removed by hand)
                os.unlink(self.lock_file)  # still holding the flock: a waiter on this file will start over
        except OSError:
            pass
        finally:
            os.close(fd)  # releases the flock

    def __enter__(self) -> "RemovingFileLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_for(path: os.PathLike[str] | str) -> Any:
    """A cross-process lock (a context manager) for a baseline file.

    The lock file lives in this user's :func:`lock_folder`, keyed by the file's absolute path
    (links resolved), so nothing but baselines ever appears under the baseline folder; it is
    removed again on release (:class:`RemovingFileLock`). Without ``fcntl`` (Windows): a
    ``filelock.FileLock``, which removes its file on release there too.
    """
    import hashlib

    key = hashlib.sha1(str(Path(path).resolve()).encode()).hexdigest()[:16]
    lock_file = lock_folder() / f"{key}.lock"
    try:
        import fcntl  # noqa: F401
    except ImportError:
        from filelock import FileLock

        return FileLock(str(lock_file), timeout=LOCK_TIMEOUT_S)
    return RemovingFileLock(lock_file)


def update(
    path: os.PathLike[str] | str,
    entries: Mapping[str, dict[str, Any]],
    *,
    device_key: str,
    module: str,
) -> None:
    """Merge ``entries`` (benchmark id -> entry) into the file at ``path`` and write it atomically.

    Each new entry's run is appended to the stored history of that benchmark (see
    :func:`merge_entry`); entries not named are kept as they are. The read-merge-write runs under
    a cross-process file lock (:func:`lock_for`), so pytest-xdist workers updating one file
    concurrently lose nothing. Raises :class:`BaselineError` without writing when
    the existing file is unusable or holds another module's benchmarks than ``module``
    (:func:`check_module`), or when a merged entry would not load again, so stored data is never
    lost to a bad file.
    """
    for bid, entry in entries.items():
        _check_entry(Path(path), bid, entry)  # a malformed new entry is refused before merging
    with lock_for(path):  # read-merge-write under a lock: concurrent workers lose nothing
        existing = load(path)
        check_module(existing, module)
        benchmarks = {bid: dict(e.data) for bid, e in existing.benchmarks.items()} if existing else {}
        for bid, entry in entries.items():
            merged = merge_entry(benchmarks.get(bid), entry)
            _check_entry(Path(path), bid, merged)
            benchmarks[bid] = merged
        data = {
            "schema_version": SCHEMA_VERSION,
            "device_key": device_key,
            "module": module,
            "benchmarks": benchmarks,
        }
        # What is written must load again: the new entries against the schema too.
        problem = _schema_problem({**data, "benchmarks": {bid: benchmarks[bid] for bid in entries}})
        if problem is not None:
            raise BaselineError(path, f"refusing to write an entry that would not load: {problem}")
        write_atomic(path, dumps(data))
