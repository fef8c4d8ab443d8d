"""``gpuperf changes``: the change points of every benchmark's history (issue 34).

Reads the history store read-only (``--history URL``, default the nearest ``.gpuperf/history.sqlite``
in the current folder or a parent, as ``gpuperf history``) and finds, in each benchmark's series of runs (one series per
device key; ``--branch`` keeps one branch's runs, ``--device`` one device key, ``-k TEXT`` the
benchmarks whose name contains TEXT), where it stepped up or down: e-divisive means with a
significance test (:mod:`pytest_gpuperf.verdict.changepoints`). For each change it prints the
commit range (the last run before, the first run after), the medians before and after, the change
in percent, its p-value and, for a slowdown between two commits, the ``gpuperf bisect`` command
that finds the commit. ``--json`` prints the same as JSON on standard output.

Exit codes: 0 done (changes found or not); 2 an unusable store or URL, or a bad option.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from pathlib import Path
from typing import Any

from pytest_gpuperf.cli.argtypes import add_history_option, at_least, history_url

EXIT_INPUT = 2
#: Characters of a commit shown (and passed to ``gpuperf bisect``), as the Linux kernel's
#: convention: unique in all but the largest repositories.
SHORT_SHA = 12

_EPILOG = """\
examples:
  {prog} changes --branch main
  {prog} changes --history postgresql://ci@db/perf --branch main -k test_gemm --device cuda-nvidia-h100-80gb
  {prog} changes --json > changes.json

Each series is the benchmark's runs in the order they were stored, one value per run (the median
of its process medians). A change needs at least --min-runs runs on each side and an adjusted
p-value below --pvalue (Student's t-test on the logs of the two sides' values, the variance of the
whole series, times the number of places the split could have taken). exit codes: 0 done (changes found or not); 2 an unusable store, URL or option.
"""


def register(sub: Any, prog: str) -> None:
    """Add ``changes`` to the ``gpuperf`` parser's subparsers ``sub``."""
    from pytest_gpuperf.verdict.changepoints import DEFAULT_MIN_RUNS, DEFAULT_PVALUE

    c = sub.add_parser(
        "changes", help="change points in each benchmark's history (e-divisive means), with the bisect command",
        description="Find where each benchmark's history stepped up or down (change points, per device key), "
                    "with the commit range, medians before and after, change %% and p-value.",
        epilog=_EPILOG.format(prog=prog), formatter_class=argparse.RawDescriptionHelpFormatter)
    add_history_option(c)
    c.add_argument("--branch", default=None, help="only the runs of this branch (default: all runs)")
    c.add_argument("-k", dest="match", default=None, metavar="TEXT",
                   help="only benchmarks whose name (module::test[::name]) contains TEXT")
    c.add_argument("--device", default=None, metavar="KEY", help="only this device key (e.g. cpu-amd-epyc)")
    c.add_argument("--pvalue", type=_level, default=DEFAULT_PVALUE, metavar="P",
                   help=f"significance level of a change (adjusted p-value; default {DEFAULT_PVALUE})")
    c.add_argument("--min-runs", type=at_least(2), default=DEFAULT_MIN_RUNS, metavar="N",
                   help=f"fewest runs on each side of a change (default {DEFAULT_MIN_RUNS}; at least 2)")
    c.add_argument("--min-change", type=_percent, default=0.0, metavar="PCT",
                   help="leave out changes smaller than PCT percent (default 0: every significant change)")
    c.add_argument("--json", action="store_true", help="print JSON instead of text")
    c.set_defaults(func=cmd_changes)


def _level(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a significance level between 0 and 1 (e.g. 0.001), got {text!r}")
    return value


def _percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value >= 0.0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a percentage >= 0 (e.g. 3), got {text!r}")
    return value


def pytest_node_id(benchmark: str) -> str:
    """The pytest node id that selects ``benchmark`` (a history name: ``module::test_id``, plus
    ``::name`` for a named measurement, ``gpu_bench.pedantic(..., name=...)``): the module, its
    classes (parts starting with ``Test``, pytest's ``python_classes`` default) and the first
    other part (the test function, with its parameters ``[...]``); the rest, a measurement's name,
    is left out. A project whose classes are named otherwise gets the class's node id: it
    selects the class's tests, the benchmark among them."""
    parts: list[str] = []
    depth = 0
    for piece in benchmark.split("::"):  # a "::" inside a parameter id "[...]" is not a separator
        if parts and depth > 0:
            parts[-1] += "::" + piece
        else:
            parts.append(piece)
        depth += piece.count("[") - piece.count("]")
    keep = parts[:1]
    for part in parts[1:]:
        keep.append(part)
        if not part.startswith("Test"):
            break
    return "::".join(keep)


def short(commit: str | None) -> str:
    """The first :data:`SHORT_SHA` characters of ``commit``, ``-`` for None."""
    return commit[:SHORT_SHA] if commit else "-"


def bisect_command(cp: Any) -> tuple[str | None, str | None]:
    """``(command, None)``: the ``gpuperf bisect GOOD BAD -- NODE_ID`` command for a change
    :class:`~pytest_gpuperf.verdict.changepoints.ChangePoint`, or ``(None, why not)``: a speedup
    (``gpuperf bisect`` searches for the commit that made a benchmark slower), a run without a
    commit, or both runs of one commit (something other than the code changed)."""
    if not cp.slower:
        return None, "faster: gpuperf bisect searches for slowdowns"
    if not cp.before_commit or not cp.after_commit:
        return None, "a run without a commit: no range to bisect"
    if cp.before_commit == cp.after_commit:
        return None, "the same commit on both sides: the machine, driver or environment changed, not the code"
    node = pytest_node_id(cp.benchmark)
    return f"gpuperf bisect {short(cp.before_commit)} {short(cp.after_commit)} -- {shlex.quote(node)}", None


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


def cmd_changes(args: Any) -> int:
    """``gpuperf changes``: read the store, find the change points, print them (text or
    ``--json``). Returns 0, or 2 for an unusable store or URL (the message names it, password
    hidden)."""
    from pytest_gpuperf.storage.history import HistoryError, HistoryStore
    from pytest_gpuperf.verdict.changepoints import run_series, series_change_points

    url, why = history_url(args.history)
    if url is None:
        print(f"gpuperf changes: {why}", file=sys.stderr)
        return EXIT_INPUT
    try:
        with HistoryStore(url, root=Path.cwd(), read_only=True) as store:
            rows = store.series(device_key=args.device, branch=args.branch)
            shown = store.shown
    except HistoryError as exc:
        print(f"gpuperf changes: {exc}", file=sys.stderr)
        return EXIT_INPUT
    if args.match:
        rows = [r for r in rows if args.match in r["benchmark"]]
    series = run_series(rows)
    found = {key: series_change_points(key[0], key[1], runs, pvalue=args.pvalue, min_runs=args.min_runs,
                                       min_change_pct=args.min_change)
             for key, runs in series.items()}
    if args.json:
        print(json.dumps(_json(shown, args, series, found), indent=2, allow_nan=False))
        return 0
    _text(args, series, found)
    return 0


def _json(shown: str, args: Any, series: dict, found: dict) -> dict[str, Any]:
    changes = []
    for (bench, key), cps in found.items():
        for cp in cps:
            cmd, why = bisect_command(cp)
            changes.append({
                "benchmark": bench, "device_key": key, "index": cp.index, "runs": len(series[(bench, key)]),
                "before_commit": cp.before_commit, "after_commit": cp.after_commit,
                "before_run": cp.before_run, "after_run": cp.after_run,
                "median_before_ms": cp.median_before_ms, "median_after_ms": cp.median_after_ms,
                "change_pct": _finite(cp.change_pct), "pvalue": cp.pvalue, "slower": cp.slower,
                "runs_before": cp.runs_before, "runs_after": cp.runs_after,
                "pytest_node_id": pytest_node_id(bench), "bisect": cmd, "no_bisect_because": why})
    return {"history": shown, "branch": args.branch, "device_key": args.device, "match": args.match,
            "pvalue": args.pvalue, "min_runs": args.min_runs, "min_change_pct": args.min_change,
            "series": len(series), "changes": changes}


def _text(args: Any, series: dict, found: dict) -> None:
    from pytest_gpuperf.core.units import format_ms

    if not series:
        print("no benchmark in the store matches" if (args.match or args.device or args.branch)
              else "no runs stored", file=sys.stderr)
        return
    with_changes = 0
    for (bench, key), cps in found.items():
        if not cps:
            continue
        with_changes += 1
        print(f"{bench}  [{key or '-'}]  {len(series[(bench, key)])} runs")
        for cp in cps:
            n_runs = len(series[(bench, key)])
            print(f"  {'slower' if cp.slower else 'faster'} {cp.change_pct:+.1f}%: {format_ms(cp.median_before_ms)} -> "
                  f"{format_ms(cp.median_after_ms)} from run {cp.index + 1} of {n_runs} ({cp.runs_before} runs before, "
                  f"{cp.runs_after} after), p = {cp.pvalue:.2g}")
            print(f"    commits {short(cp.before_commit)}..{short(cp.after_commit)} (last run before .. first run after)")
            cmd, why = bisect_command(cp)
            print(f"    {cmd}" if cmd else f"    ({why})")
    n = sum(len(c) for c in found.values())
    level = f"adjusted p < {args.pvalue:g}, at least {args.min_runs} runs each side"
    if n == 0:
        print(f"no change in {len(series)} series ({level})")
    else:
        print(f"{n} change(s) in {with_changes} of {len(series)} series ({level})")
