"""Baseline files: JSON schema, validation, paths, and atomic read-merge-write (pure: stdlib only).

One file per device key and test module::

    <baseline dir>/<device key>/<module path with "/" as "__", no ".py">.json
    baselines/cpu-amd-epyc/tests__perf__test_workloads.json

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
``git_commit`` and ``peak_memory_bytes``. Schema 1 files (one run, no ``history``) still load;
their run becomes the first of the history on the next update. Baselines are never pickled.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

SCHEMA_VERSION = 2
#: Stored runs kept per benchmark when the entry's options do not say (option ``history``).
DEFAULT_HISTORY = 10


class BaselineError(Exception):
    """A baseline file cannot be used; the message names the file and what is wrong with it.

    The file is never modified after this error.
    """

    def __init__(self, path: os.PathLike[str] | str, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(
            f"baseline file {self.path} is unusable: {problem}. Fix or delete the file, then "
            f"re-record it with `pytest --gpuperf-update-baselines` (the file was left untouched)"
        )


@dataclass(frozen=True)
class RunRecord:
    """One stored baseline run in an entry's history: its median (ms) and where it came from.

    ``iqr_ms`` in ms, ``peak_memory_bytes`` in bytes; ``environment`` is the fingerprint of the
    machine that recorded it (with the reference-workload medians under ``"reference"``).
    """

    median_ms: float
    iqr_ms: float | None = None
    rounds: int | None = None
    timestamp_utc: str | None = None
    environment: Mapping[str, Any] | None = None
    git_commit: str | None = None
    peak_memory_bytes: int | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "RunRecord":
        """From a stored history record (unknown keys are ignored)."""
        return cls(**{f: d.get(f) for f in _RUN_FIELDS if f != "median_ms"}, median_ms=float(d["median_ms"]))


_RUN_FIELDS = ("median_ms", "iqr_ms", "rounds", "timestamp_utc", "environment", "git_commit", "peak_memory_bytes")


@dataclass(frozen=True)
class BaselineEntry:
    """One benchmark's stored baseline, typed (what every reader uses instead of the raw JSON).

    ``samples_ms``: per-call times of the newest stored run (ms, measurement order, at most 2,000);
    ``history``: the stored runs, oldest first, the newest included (a schema-1 entry is a history
    of one run); ``environment``, ``options``, ``peak_memory_bytes`` (bytes), ``stats`` (summary
    statistics, ms) and ``git_commit`` are the newest run's. ``data`` is the entry as stored
    (kept so that an update rewrites exactly what was read).
    """

    benchmark_id: str
    samples_ms: tuple[float, ...]
    history: tuple[RunRecord, ...]
    environment: Mapping[str, Any] | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    peak_memory_bytes: int | None = None
    stats: Mapping[str, Any] | None = None
    git_commit: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def run_medians_ms(self) -> tuple[float, ...]:
        """Medians (ms) of the stored runs, oldest first."""
        return tuple(r.median_ms for r in self.history)

    @property
    def median_ms(self) -> float:
        """Median (ms) of the newest stored run."""
        return self.history[-1].median_ms

    @property
    def reference(self) -> Mapping[str, Any] | None:
        """The reference-workload medians recorded with the newest run (``environment.reference``)."""
        ref = (self.environment or {}).get("reference")
        return ref if isinstance(ref, Mapping) else None

    @classmethod
    def from_samples(cls, benchmark_id: str, samples_ms: Sequence[float],
                     run_medians_ms: Sequence[float] | None = None) -> "BaselineEntry":
        """An entry built from samples alone (studies, tests): a history of the given run medians
        (default: one run whose median is that of ``samples_ms``)."""
        samples = tuple(float(v) for v in samples_ms)
        medians = list(run_medians_ms) if run_medians_ms else [_median(samples)]
        return cls(benchmark_id, samples, tuple(RunRecord(float(m)) for m in medians))

    @classmethod
    def from_json(cls, benchmark_id: str, d: Mapping[str, Any]) -> "BaselineEntry":
        """From a stored entry that :func:`_check_entry` accepted."""
        peak = d.get("peak_memory_bytes")
        return cls(
            benchmark_id=str(benchmark_id),
            samples_ms=tuple(float(v) for v in d["samples_ms"]),
            history=tuple(RunRecord.from_dict(r) for r in history_of(d)),
            environment=d.get("environment") if isinstance(d.get("environment"), Mapping) else None,
            options=dict(d.get("options") or {}),
            peak_memory_bytes=peak if isinstance(peak, int) and not isinstance(peak, bool) else None,
            stats=d.get("stats"),
            git_commit=d.get("git_commit"),
            data=d,
        )


def _median(x: Sequence[float]) -> float:
    s = sorted(x)
    n = len(s)
    return float(s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2)


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


def run_record(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The history record of the run an entry describes (its newest run)."""
    stats = entry.get("stats") or {}
    median = stats.get("median_ms")
    if not isinstance(median, (int, float)) or isinstance(median, bool):
        median = _median(entry["samples_ms"])
    return {
        "median_ms": float(median),
        "iqr_ms": stats.get("iqr_ms"),
        "rounds": entry.get("rounds"),
        "timestamp_utc": entry.get("timestamp_utc"),
        "environment": entry.get("environment"),
        "git_commit": entry.get("git_commit"),
        "peak_memory_bytes": entry.get("peak_memory_bytes"),
    }


def history_of(entry: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The stored runs of an entry, oldest first; a schema-1 entry is a history of one run."""
    hist = entry.get("history")
    if isinstance(hist, list) and hist:
        return list(hist)
    return [run_record(entry)]


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


def module_file_name(module_path: str) -> str:
    """``tests/perf/test_models.py`` -> ``tests__perf__test_models.json``."""
    p = module_path.replace("\\", "/")
    if p.endswith(".py"):
        p = p[:-3]
    return p.strip("/").replace("/", "__") + ".json"


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


def parse(path: os.PathLike[str] | str, text: str) -> BaselineFile:
    """Validate the text of a baseline file. Raises :class:`BaselineError` naming the file."""
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
    entries = {}
    for bid, entry in benchmarks.items():
        _check_entry(p, bid, entry)
        entries[bid] = BaselineEntry.from_json(bid, entry)
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


def dumps(data: Mapping[str, Any]) -> str:
    """Serialize as the project writes every JSON file: sorted keys, 2-space indent, trailing newline."""
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"


def write_atomic(path: os.PathLike[str] | str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and ``os.replace``.

    Readers see either the old or the new file, never a partial one.
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = p.stat().st_mode & 0o777  # keep an existing file's permissions
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask  # what open() would give a new file
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        os.chmod(tmp, mode)
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def lock_for(path: os.PathLike[str] | str) -> Any:
    """A cross-process ``filelock.FileLock`` for a baseline file.

    The lock file lives in the system temp folder, keyed by the file's absolute path, so nothing
    but baselines ever appears under the baseline folder.
    """
    import hashlib

    from filelock import FileLock

    key = hashlib.sha1(str(Path(path).resolve()).encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir(), "gpuperf-locks")
    folder.mkdir(parents=True, exist_ok=True)
    return FileLock(str(folder / f"{key}.lock"), timeout=300)


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
    the existing file is unusable, so stored data is never lost to a bad file.
    """
    for bid, entry in entries.items():
        _check_entry(Path(path), bid, entry)  # a malformed new entry is refused before merging
    with lock_for(path):  # read-merge-write under a lock: concurrent workers lose nothing
        existing = load(path)
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
        write_atomic(path, dumps(data))
