"""``gpuperf dashboard``: the history store as a static web site (issue 34).

``gpuperf dashboard [--history URL] [--out DIR] [--limit N]`` reads the store's runs and rows, finds
the change points of each series, takes the commits' subjects from ``git log`` in the current
folder (when it is a checkout that has them; otherwise the hover shows no subject) and writes the
site with :func:`pytest_gpuperf.reporting.dashboard.write_site`: ``DIR/index.html``,
``DIR/regressions.html``, a page per benchmark and device key under ``DIR/bench/`` and Plotly's
JavaScript once under ``DIR/assets/``. Nothing is loaded from the network: open ``index.html``
from a CI artifact or publish ``DIR`` on GitHub Pages.

Exit codes: 0 written; 2 plotly missing (``pip install "pytest-gpuperf[dashboard]"``), an unusable
store or URL (named, password hidden), or a folder that cannot be written.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Sequence

from pytest_gpuperf.cli.argtypes import add_history_option, at_least, history_url

EXIT_INPUT = 2
_EPILOG = """\
examples:
  {prog} dashboard --out site
  {prog} dashboard --history postgresql://ci@db/perf --out site --limit 200

Needs plotly: pip install "pytest-gpuperf[dashboard]". Commit subjects come from git log in the
current folder when it has those commits. exit codes: 0 written; 2 plotly missing, an unusable
store or URL, or a folder that cannot be written.
"""


def register(sub: Any, prog: str) -> None:
    """Add ``dashboard`` to the ``gpuperf`` parser's subparsers ``sub``."""
    import argparse

    d = sub.add_parser("dashboard", help="write the history as a static web site (plots, change points, regressions)",
                       description="Write the history store as a static web site into DIR: index.html (a row per\n"
                                   "benchmark), a page per benchmark and device key (the median over the runs with its\n"
                                   "CI, process medians, change points, memory, counts) and regressions.html. Nothing\n"
                                   "is loaded from the network: open index.html from a CI artifact or publish DIR on\n"
                                   "GitHub Pages.",
                       epilog=_EPILOG.format(prog=prog), formatter_class=argparse.RawDescriptionHelpFormatter)
    add_history_option(d)
    d.add_argument("--out", default="gpuperf-dashboard", metavar="DIR",
                   help="the folder to write the site into (default gpuperf-dashboard)")
    d.add_argument("--limit", type=at_least(1), default=None, metavar="N", help="only the newest N runs")
    d.set_defaults(func=cmd_dashboard)


def _series_of(rows: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """``rows`` split into series: one per benchmark, device key and branch, each in run order."""
    groups: dict[tuple[Any, Any, Any], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["benchmark"], r.get("device_key"), r.get("branch")), []).append(r)
    return list(groups.values())


def _changes(rows: Sequence[dict[str, Any]]) -> list[Any]:
    """The change points (:class:`~pytest_gpuperf.verdict.changepoints.ChangePoint`) of every series
    in ``rows`` (one per benchmark, device key and branch: a branch's runs are a series of their
    own), by :func:`pytest_gpuperf.verdict.changepoints.find_change_points` at its defaults."""
    from pytest_gpuperf.verdict.changepoints import find_change_points

    return [c for series in _series_of(rows) for c in find_change_points(series)]


def cmd_dashboard(args: Any) -> int:
    """``gpuperf dashboard``: read the store, find the change points, write the site."""
    from pytest_gpuperf.core.git import commit_subjects
    from pytest_gpuperf.reporting.dashboard import DashboardError, plotly_js, write_site
    from pytest_gpuperf.storage.history import HistoryError, HistoryStore

    url, why = history_url(args.history)
    if url is None:
        print(f"gpuperf dashboard: {why}", file=sys.stderr)
        return EXIT_INPUT
    try:
        js = plotly_js()  # before reading: a missing extra fails at once
        with HistoryStore(url, root=Path.cwd(), read_only=True) as store:
            runs = store.runs(limit=args.limit)
            rows = store.series()
    except (DashboardError, HistoryError) as exc:
        print(f"gpuperf dashboard: {exc}", file=sys.stderr)
        return EXIT_INPUT
    if args.limit is not None:
        kept = {r["run_id"] for r in runs}
        rows = [r for r in rows if r["run_id"] in kept]
    # the subject each run recorded (schema version 2), else the checkout's, where it has the commit
    subjects = {r["commit"]: r["subject"] for r in runs if r.get("commit") and r.get("subject")}
    missing = [r.get("commit") for r in runs if r.get("commit") and r["commit"] not in subjects]
    subjects.update({c: s for c, (s, _date) in commit_subjects(Path.cwd(), missing).items()})
    try:
        site = write_site(args.out, runs, rows, _changes(rows), subjects=subjects, js=js)
    except DashboardError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_INPUT
    print(f"gpuperf dashboard: {len(site.pages)} page(s) from {len(runs)} run(s) written to {site.out} "
          f"(open {site.out / 'index.html'}; largest page {site.largest_page_bytes / 1e3:,.1f} KB)")
    return 0
