"""Merging shards: the JSON reports and baseline folders of one test suite split over CI jobs
(issue 34, "sharded CI"; the command is ``gpuperf merge``, :mod:`pytest_gpuperf.cli.merge`).

Each shard (a ``-k`` expression, a file list, a ``pytest-split`` group) measures its own
benchmarks; merged, the shards are one run. The merge is **conflict-free per benchmark**:

* **Reports** (``--gpuperf-json``): the merged report's ``benchmarks`` are the union of the
  shards'; a benchmark (``<module>::<test id>``) in two shards is an error naming it and both files,
  unless the two entries are identical. All shards must be of one commit (``git_commit``): a run is
  one commit. ``created_utc`` is the newest shard's, ``environments`` the union (per device key
  the first shard's; each benchmark keeps its own ``environment``), ``warnings`` all the shards'
  once each, and ``merged_from`` lists the shards (file, time, number of benchmarks).
* **Baseline folders** (``<dir>/<device key>/<module>.json``, :mod:`pytest_gpuperf.storage.baseline`):
  each file is the union of its copies' benchmarks. Copies of one benchmark are resolved thus:
  identical copies count once; a copy that another copy continues (the other holds its runs and
  newer ones: a shard's ``--gpuperf-update-baselines`` appended a run to the history it started
  from, :func:`continues`) yields to that one; with ``base`` (the output folder when it exists,
  usually the committed baselines every shard started from), a copy identical to the base's entry,
  or one the base's entry continues, is no change. Two copies left is a conflict naming the benchmark and both files.

An empty shard (a report without benchmarks, an empty baseline folder) adds nothing and is no
error. Every input is read and checked before anything is written; an unusable one raises
:class:`MergeError` naming it. Stdlib only (plus ``jsonschema`` through the baseline loader).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from pytest_gpuperf.storage.baseline import SCHEMA_VERSION, BaselineError, dumps, history_of, parse


class MergeError(Exception):
    """Shards that cannot be merged: ``problems`` are the messages, each naming the file(s) and the
    benchmark concerned. Nothing is written after this error."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


def _read_json(path: Path) -> tuple[str, Any]:
    """The text and JSON value of ``path``; :class:`MergeError` naming it when it cannot be read."""
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise MergeError([f"{path}: no such file"]) from None
    except IsADirectoryError:
        raise MergeError([f"{path}: is a folder, not a JSON report"]) from None
    except OSError as exc:
        raise MergeError([f"{path}: cannot be read ({exc.strerror})"]) from None
    except UnicodeDecodeError:
        raise MergeError([f"{path}: not UTF-8 text"]) from None
    try:
        return text, json.loads(text)
    except json.JSONDecodeError as exc:
        raise MergeError([f"{path}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"]) from None


# ----------------------------------------------------------------------------- reports


def read_report(path: os.PathLike[str] | str) -> dict[str, Any]:
    """A ``--gpuperf-json`` report as a dict, checked as ``gpuperf compare`` reads one (each entry's
    samples, schema version, history) and against the report schema's types
    (``storage/schema/report.schema.json`` without its ``required`` lists). Raises
    :class:`MergeError` naming the file: missing, not JSON, not a report (``"kind": "report"``)."""
    p = Path(path)
    text, data = _read_json(p)
    if not isinstance(data, dict) or data.get("kind") != "report" or not isinstance(data.get("benchmarks"), dict):
        raise MergeError([f"{p}: not a pytest-gpuperf JSON report (pytest --gpuperf-json: a JSON object with "
                          "\"kind\": \"report\" and a \"benchmarks\" object)"])
    try:
        parse(p, text, schema="report")
    except BaselineError as exc:
        raise MergeError([f"report {p} is unusable: {exc.problem}"]) from None
    return data


def merge_reports(reports: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """One report of the shards' ``reports`` (``(file name, report dict)`` pairs, as
    :func:`read_report` returns them), as described in the module docstring.

    Raises :class:`MergeError` listing every problem: two commits (naming a file of each), a
    benchmark in two shards with different entries (naming it and both files). No report: ``ValueError``.
    """
    if not reports:
        raise ValueError("merge_reports needs at least one report")
    problems: list[str] = []
    commits: dict[Any, str] = {}
    for name, data in reports:
        commits.setdefault(data.get("git_commit"), name)
    if len(commits) > 1:
        problems.append("the shards are of different commits (" + ", ".join(
            f"{c or 'none'} in {name}" for c, name in commits.items()) + "): merge the shards of one run only")
    benchmarks: dict[str, Any] = {}
    owner: dict[str, str] = {}
    for name, data in reports:
        for key, entry in data["benchmarks"].items():
            if key not in benchmarks:
                benchmarks[key], owner[key] = entry, name
            elif benchmarks[key] != entry:
                problems.append(f"benchmark {key} is in both {owner[key]} and {name} with different results: "
                                "each benchmark must run in one shard only (check the shards' -k or file lists)")
    if problems:
        raise MergeError(problems)
    environments: dict[str, Any] = {}
    warnings: list[str] = []
    for _, data in reports:
        for key, env in (data.get("environments") or {}).items():
            environments.setdefault(key, env)
        warnings += [w for w in data.get("warnings") or () if w not in warnings]
    first = reports[0][1]
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "report",
        "created_utc": max((str(d.get("created_utc") or "") for _, d in reports), default=""),
        "git_commit": first.get("git_commit"),
        "environments": environments,
        "benchmarks": {k: benchmarks[k] for k in sorted(benchmarks)},
        "warnings": warnings,
        "merged_from": [{"file": name, "created_utc": d.get("created_utc"), "benchmarks": len(d["benchmarks"])}
                        for name, d in reports],
    }


# ----------------------------------------------------------------------------- baselines


@dataclass
class _Copy:
    """One baseline file of one folder: where it is, its file fields, its entries (raw dicts)."""

    path: Path
    text: str
    device_key: Any
    module: Any
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)


def read_baseline_dir(root: os.PathLike[str] | str) -> dict[str, _Copy]:
    """The baseline files under ``root`` by their path relative to it (``<device key>/<file>.json``,
    "/"-separated), each loaded and validated (:func:`pytest_gpuperf.storage.baseline.parse`).
    Temporary files of interrupted writes (``.<name>.tmp``) are skipped; an empty folder gives ``{}``.

    Raises :class:`MergeError` naming the folder when it does not exist or is not a folder, or
    holds ``.json`` files directly (a device folder was given instead of the baseline folder), and
    naming the file when one is unusable."""
    r = Path(root)
    if not r.is_dir():
        raise MergeError([f"baseline folder {r} " + ("is not a folder" if r.exists() else "does not exist")
                          + " (expected <dir>/<device key>/<module>.json)"])
    loose = sorted(f.name for f in r.glob("*.json") if not f.name.startswith("."))
    if loose:
        raise MergeError([f"{r} holds baseline files directly ({', '.join(loose[:3])}): give the baseline folder, "
                          "whose subfolders are the device keys (<dir>/<device key>/<module>.json)"])
    out: dict[str, _Copy] = {}
    for f in sorted(r.glob("*/*.json")):
        if f.name.startswith(".") or not f.is_file():
            continue
        text, _ = _read_json(f)
        try:
            loaded = parse(f, text)
        except BaselineError as exc:
            raise MergeError([f"unusable baseline file {f}: {exc.problem}"]) from None
        out[f.relative_to(r).as_posix()] = _Copy(
            f, text, loaded.device_key, loaded.module, {bid: dict(e.data) for bid, e in loaded.benchmarks.items()})
    return out


def continues(newer: Mapping[str, Any], older: Mapping[str, Any]) -> bool:
    """Whether baseline entry ``newer`` holds ``older``'s runs and at least one run after them: its
    stored history (:func:`~pytest_gpuperf.verdict.history.history_of`, oldest first) starts with the
    newest runs of ``older``'s, up to and including ``older``'s newest run, and goes on. That is what
    ``--gpuperf-update-baselines`` makes of an entry (it appends the new run and keeps the last
    ``history`` runs), so an update continues the entry it started from. With ``history=1`` an
    entry keeps one run and no update can be told from another: False."""
    hn, ho = history_of(newer), history_of(older)
    last = ho[-1]
    for i in range(len(hn) - 2, -1, -1):  # hn[i] is older's newest run, with runs after it
        if hn[i] == last and i + 1 <= len(ho) and hn[:i + 1] == ho[len(ho) - i - 1:]:
            return True
    return False


def _resolve(bid: str, rel: str, copies: list[tuple[Path, dict[str, Any]]],
             base: dict[str, Any] | None) -> tuple[dict[str, Any] | None, list[str]]:
    """The entry of benchmark ``bid`` from its ``copies`` (``(file, entry)``; ``base``: the output
    folder's entry or None), and the conflicts found (messages)."""
    distinct: list[tuple[Path, dict[str, Any]]] = []
    for path, entry in copies:  # what the base holds, or continues (an older copy), is no change
        if entry != base and all(entry != d for _, d in distinct) and not (base and continues(base, entry)):
            distinct.append((path, entry))
    if not distinct:
        return base, []
    newest = [(p, e) for p, e in distinct if not any(o is not e and continues(o, e) for _, o in distinct)]
    if len(newest) == 1:  # every other copy is continued by one: older copies of this one's line
        return newest[0][1], []
    a, b = (newest if len(newest) >= 2 else distinct)[:2]
    return None, [f"benchmark {bid!r} of {rel} differs between {a[0]} and {b[0]}, and neither continues the other's "
                  "stored runs: it was measured in both shards (each benchmark must run in one shard only)"]


def _file_fields(rel: str, copies: Sequence[_Copy]) -> tuple[Any, Any, list[str]]:
    """The ``device_key`` and ``module`` of the copies of one file; a message when they differ."""
    keys = {(c.device_key, c.module) for c in copies}
    if len(keys) <= 1:
        return copies[0].device_key, copies[0].module, []
    a = copies[0]
    b = next(c for c in copies if (c.device_key, c.module) != (a.device_key, a.module))
    return a.device_key, a.module, [
        f"{a.path} and {b.path} are both {rel} but hold the baselines of different modules or device keys "
        f"({a.module!r} on {a.device_key!r}, {b.module!r} on {b.device_key!r})"]


def merge_baseline_dirs(roots: Sequence[os.PathLike[str] | str],
                        base: os.PathLike[str] | str | None = None) -> dict[str, str]:
    """The merged baseline files of the folders ``roots``: ``{relative path: file text}``, only the
    files that differ from ``base`` (a baseline folder, e.g. the output folder, whose entries count
    as unchanged copies and are kept; None: none), as described in the module docstring.

    Raises :class:`MergeError` naming each unusable folder (the first unusable file of each), or
    else listing every conflict (naming the benchmark and both files)."""
    problems: list[str] = []
    shards: list[dict[str, _Copy]] = []
    for folder in [*roots, *([base] if base is not None else [])]:
        try:
            shards.append(read_baseline_dir(folder))
        except MergeError as exc:  # every unusable folder named, not only the first
            problems += exc.problems
    if problems:
        raise MergeError(problems)
    existing = shards.pop() if base is not None else {}
    out: dict[str, str] = {}
    for rel in sorted({rel for s in shards for rel in s}):
        copies = [s[rel] for s in shards if rel in s]
        old = existing.get(rel)
        device_key, module, trouble = _file_fields(rel, copies + ([old] if old else []))
        problems += trouble
        if trouble:
            continue
        if old is None and all(c.text == copies[0].text for c in copies):
            out[rel] = copies[0].text  # one copy (or identical ones): as it is
            continue
        base_entries = old.entries if old else {}
        benchmarks = dict(base_entries)
        for bid in sorted({bid for c in copies for bid in c.entries}):
            entry, conflicts = _resolve(bid, rel, [(c.path, c.entries[bid]) for c in copies if bid in c.entries],
                                        base_entries.get(bid))
            problems += conflicts
            if entry is not None:
                benchmarks[bid] = entry
        data = {"schema_version": SCHEMA_VERSION, "benchmarks": benchmarks}
        data.update({k: v for k, v in (("device_key", device_key), ("module", module)) if v is not None})
        if old is None or benchmarks != old.entries:
            out[rel] = dumps(data)
    if problems:
        raise MergeError(problems)
    return out
