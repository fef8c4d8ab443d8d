"""``gpuperf history``: the history store from the command line (issue 34).

* ``gpuperf history import FILES…`` brings past runs in: this plugin's JSON reports
  (``--gpuperf-json``) and pytest-benchmark's saved runs (``.benchmarks/<machine>/*.json``, with
  their ``commit_info``). Each file is one run, stored once: importing a file again adds nothing
  (its run id is the hash of its content).
* ``gpuperf history runs`` lists the stored runs; ``gpuperf history export`` writes them and their
  rows as JSON.

``--history URL`` as for the plugin (default: the nearest ``.gpuperf/history.sqlite`` in the current folder or a
parent, as git finds its repository; ``runs`` and ``export`` open it read-only and never create one).
Exit codes: 0 done; 2 an unusable file, URL or store (the message names it; nothing of a file that
cannot be read is stored).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from pytest_gpuperf.cli.argtypes import add_history_option, history_url

EXIT_INPUT = 2


def register(sub: Any, prog: str) -> None:
    """Add ``history`` (``import``, ``runs``, ``export``) to the ``gpuperf`` parser's subparsers ``sub``."""
    h = sub.add_parser("history", help="the performance history store: import past runs, list, export",
                       description=__doc__.split("\n\n")[1] if __doc__ else None)
    hs = h.add_subparsers(dest="history_command", metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    add_history_option(common)
    imp = hs.add_parser("import", parents=[common], help="import JSON reports and pytest-benchmark saved runs")
    imp.add_argument("files", nargs="+", metavar="FILE", help="a --gpuperf-json report or a pytest-benchmark "
                                                             "saved run (.benchmarks/<machine>/*.json)")
    imp.add_argument("--branch", default=None, help="the branch to record when a file does not say")
    imp.set_defaults(func=cmd_import)
    runs = hs.add_parser("runs", parents=[common], help="list the stored runs, oldest first")
    runs.add_argument("--branch", default=None, help="only runs of this branch")
    runs.add_argument("--limit", type=int, default=None, metavar="N", help="only the newest N runs")
    runs.add_argument("--json", action="store_true", help="print JSON")
    runs.set_defaults(func=cmd_runs)
    exp = hs.add_parser("export", parents=[common], help="write the stored runs and their rows as JSON")
    exp.add_argument("--out", default="-", metavar="FILE", help="where (default: standard output)")
    exp.add_argument("-k", dest="match", default=None, metavar="TEXT", help="only benchmarks whose name contains TEXT")
    exp.set_defaults(func=cmd_export)
    h.set_defaults(func=lambda args: (h.print_help(sys.stderr), EXIT_INPUT)[1])


def _open(given: str | None, reading: bool = True) -> Any:
    """The store of ``--history`` (``given``) or the project's (:func:`~pytest_gpuperf.cli.argtypes.history_url`),
    read-only for a reading command. Raises ``HistoryError`` when there is none or it cannot be opened."""
    from pytest_gpuperf.storage.history import HistoryError, HistoryStore

    url, why = history_url(given, reading)
    if url is None:
        raise HistoryError(f"pytest-gpuperf: {why}")
    return HistoryStore(url, root=Path.cwd(), read_only=reading)


def run_from_file(path: Path, branch: str | None = None) -> tuple[Any, list[Any]]:
    """The run and rows of one file: a ``--gpuperf-json`` report (``"kind": "report"``) or a
    pytest-benchmark saved run (``machine_info`` and ``benchmarks`` as a list; its times are in
    seconds, stored in ms). Raises ``ValueError`` naming the file and what is accepted."""
    try:
        raw = path.read_bytes()
        data = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read it as JSON: {exc}") from None
    run_id = "import-" + hashlib.sha256(raw).hexdigest()[:32]
    if isinstance(data, dict) and data.get("kind") == "report" and isinstance(data.get("benchmarks"), dict):
        return _from_report(data, run_id, branch)
    if isinstance(data, dict) and isinstance(data.get("benchmarks"), list) and "machine_info" in data:
        return _from_pytest_benchmark(data, run_id, branch)
    raise ValueError(f"{path}: neither a pytest-gpuperf JSON report (--gpuperf-json) nor a pytest-benchmark "
                     "saved run (.benchmarks/<machine>/*.json)")


def _from_report(data: dict[str, Any], run_id: str, branch: str | None) -> tuple[Any, list[Any]]:
    from pytest_gpuperf.storage.history import ResultRow, RunRecord
    from pytest_gpuperf.verdict.counts import Counts

    envs = data.get("environments") or {}
    rows, keys = [], set()
    for name, e in data["benchmarks"].items():
        if e.get("smoke") or not isinstance(e.get("stats"), dict):
            continue
        key = next((k for k, env in envs.items() if env == e.get("environment")), None) or _device_key(e)
        keys.add(key)
        s, c = e["stats"], e.get("comparison") or {}
        ci = s.get("median_ci_ms") or [None, None]
        counts = Counts.from_dict(e["counts"]).totals() if isinstance(e.get("counts"), dict) else None
        rows.append(ResultRow(
            benchmark=name, median_ms=float(s["median_ms"]), rounds=int(e.get("rounds") or 1), device_key=key,
            iqr_ms=s.get("iqr_ms"), ci_low_ms=ci[0], ci_high_ms=ci[1],
            process_medians_ms=tuple(e["process_medians_ms"]) if e.get("process_medians_ms") else None,
            peak_memory_bytes=e.get("peak_memory_bytes"),
            counts=counts or None,
            verdict=c.get("verdict"), ratio=c.get("shown_ratio", c.get("ratio")),
            cpu_median_ms=_cpu_of(e), clock=c.get("clock"),
            estimate_ms=e["estimate_ms"] if _positive(e.get("estimate_ms")) else None,
            instructions=_instructions_of(e), sm_clock_mhz=_clock_of(e)))
    env = next(iter(envs.values()), {}) if envs else {}
    run = RunRecord(run_id=run_id, created_utc=data.get("created_utc") or "", mode="import", commit=data.get("git_commit"),
                    branch=branch, device_key=",".join(sorted(k for k in keys if k)) or None,
                    torch_version=env.get("torch_version"), cuda_version=env.get("cuda_version"),
                    driver_version=env.get("driver_version"), plugin_version=env.get("plugin_version"),
                    options={"source": "pytest-gpuperf report"})
    return run, rows


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _clock_of(entry: dict[str, Any]) -> float | None:
    """A report entry's median SM clock (``gpu_clock.median_mhz``; None: not read)."""
    clock = entry.get("gpu_clock")
    value = clock.get("median_mhz") if isinstance(clock, dict) else None
    return float(value) if _positive(value) else None


def _instructions_of(entry: dict[str, Any]) -> float | None:
    """A report entry's instructions per call (``instructions.per_call``; None: not counted)."""
    inst = entry.get("instructions")
    value = inst.get("per_call") if isinstance(inst, dict) else None
    return float(value) if isinstance(value, (int, float)) and value >= 0 else None


def _cpu_of(entry: dict[str, Any]) -> float | None:
    """A report entry's CPU time per call as the table's CPU column shows it (``cpu_estimate_ms``;
    a report written before it: its ``cpu_time.median_ms``), None where not read."""
    if _positive(entry.get("cpu_estimate_ms")):
        return float(entry["cpu_estimate_ms"])
    cpu = entry.get("cpu_time")
    return cpu.get("median_ms") if isinstance(cpu, dict) else None


def _device_key(entry: dict[str, Any]) -> str | None:
    """The device key of a report entry's own ``environment`` (a merged report's shards may have
    run on several machines of one device key: its ``environments`` holds one of them); None
    when the environment does not say."""
    env = entry.get("environment")
    if not isinstance(env, dict) or not env.get("device_type") or not env.get("device_name"):
        return None
    from pytest_gpuperf.measure.environment import device_key

    return device_key(env)


def _from_pytest_benchmark(data: dict[str, Any], run_id: str, branch: str | None) -> tuple[Any, list[Any]]:
    from pytest_gpuperf.storage.history import ResultRow, RunRecord

    commit = data.get("commit_info") or {}
    machine = data.get("machine_info") or {}
    rows = []
    for b in data["benchmarks"]:
        s = b.get("stats") or {}
        if "median" not in s:
            continue
        rows.append(ResultRow(
            benchmark=b.get("fullname") or b["name"], median_ms=float(s["median"]) * 1e3, rounds=int(s.get("rounds") or 1),
            iqr_ms=float(s["iqr"]) * 1e3 if s.get("iqr") is not None else None))
    run = RunRecord(run_id=run_id, created_utc=data.get("datetime") or commit.get("time") or "", mode="import",
                    commit=commit.get("id"), branch=commit.get("branch") or branch, dirty=commit.get("dirty"),
                    machine=machine.get("node"), options={"source": "pytest-benchmark " + str(data.get("version", ""))},
                    commit_time=commit.get("time"))
    return run, rows


def _with_subject(run: Any) -> Any:
    """``run`` with its commit's subject (and committer date, where the file has none) from the git
    checkout in the current folder, when the commit is there."""
    import dataclasses

    from pytest_gpuperf.core.git import commit_subjects

    if not run.commit or run.subject:
        return run
    subject, date = commit_subjects(Path.cwd(), [run.commit]).get(run.commit, (None, None))
    return dataclasses.replace(run, subject=subject, commit_time=run.commit_time or date) if subject else run


def cmd_import(args: Any) -> int:
    """``gpuperf history import``: each file one run, in one transaction; a file already stored adds nothing."""
    from pytest_gpuperf.storage.history import HistoryError

    loaded = []
    for f in args.files:
        try:
            run, rows = run_from_file(Path(f), args.branch)
            loaded.append((f, _with_subject(run), rows))
        except ValueError as exc:
            print(f"gpuperf history import: {exc}", file=sys.stderr)
            return EXIT_INPUT
    try:
        with _open(args.history, reading=False) as store:
            for f, run, rows in loaded:
                added = store.append(run, rows)
                print(f"{f}: {len(rows)} benchmark(s) " + ("imported" if added else "already in the store"))
    except HistoryError as exc:
        print(f"gpuperf history import: {exc}", file=sys.stderr)
        return EXIT_INPUT
    return 0


def cmd_runs(args: Any) -> int:
    """``gpuperf history runs``: a line per run (time, mode, commit, branch, machine, benchmarks)."""
    from pytest_gpuperf.storage.history import HistoryError

    try:
        with _open(args.history) as store:
            runs = store.runs(branch=args.branch, limit=args.limit)
    except HistoryError as exc:
        print(f"gpuperf history runs: {exc}", file=sys.stderr)
        return EXIT_INPUT
    if args.json:
        print(json.dumps(runs, indent=2, default=str))
        return 0
    for r in runs:
        commit = (r.get("commit") or "-")[:9] + ("+" if r.get("dirty") else "")
        print(f"{r['created_utc']:<21} {r['mode']:<8} {commit:<10} {r.get('branch') or '-':<20} "
              f"{r.get('device_key') or '-':<28} {r['benchmarks']:>4} benchmark(s)")
    if not runs:
        print("no runs stored", file=sys.stderr)
    return 0


def cmd_export(args: Any) -> int:
    """``gpuperf history export``: ``{"runs": [...], "results": [...]}`` as JSON."""
    from pytest_gpuperf.storage.history import HistoryError

    try:
        with _open(args.history) as store:
            runs, rows = store.runs(), store.series()
    except HistoryError as exc:
        print(f"gpuperf history export: {exc}", file=sys.stderr)
        return EXIT_INPUT
    if args.match:
        rows = [r for r in rows if args.match in r["benchmark"]]
    text = json.dumps({"runs": runs, "results": rows}, indent=2, default=str) + "\n"
    if args.out == "-":
        sys.stdout.write(text)
        return 0
    try:
        from pytest_gpuperf.core.files import write_atomic

        write_atomic(Path(args.out), text)
    except OSError as exc:
        print(f"gpuperf history export: cannot write {args.out}: {exc}", file=sys.stderr)
        return EXIT_INPUT
    return 0

