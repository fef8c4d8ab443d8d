"""``gpuperf merge``: the shards of a sharded CI run made one (issue 34, "sharded CI").

* ``gpuperf merge REPORT... --out merged.json`` merges the shards' ``--gpuperf-json`` reports into
  one report: the union of their benchmarks, of one commit.
* ``gpuperf merge --baselines DIR... --out DIR`` merges the shards' baseline folders (each job's
  ``--gpuperf-baseline-dir`` after ``--gpuperf-update-baselines``) into one baseline folder.

Conflict-free per benchmark (:mod:`pytest_gpuperf.storage.merge`): a benchmark measured in two
shards is an error naming it and both files. An empty shard is no error. Exit codes: 0 merged;
2 unusable input (a missing, corrupt or foreign file, shards of two commits, a conflict) or a bad
command line, and then nothing is written: the report is written to a temporary file and renamed,
a new baseline folder is filled as a temporary folder and renamed, and into an existing one only
after every file was merged, each file replaced whole.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

EXIT_INPUT = 2

_EPILOG = """\
examples:
  {prog} merge shard-*/perf.json --out perf.json
  {prog} merge --baselines shard-*/baselines --out baselines

A benchmark measured in two shards is an error (exit 2) naming it and both files, unless the two
entries are identical; an empty shard is fine. Reports must be of one commit. Baseline copies:
one that another copy continues (holds its runs plus newer ones, as --gpuperf-update-baselines
makes them) yields to it, and one identical to what an existing --out folder holds is no change.
exit codes: 0 merged, 2 unusable input or a conflict (nothing written).
"""


def register(sub: Any, prog: str) -> None:
    """Add ``merge`` to the ``gpuperf`` parser's subparsers ``sub``."""
    m = sub.add_parser("merge", help="merge the JSON reports or baseline folders of CI shards into one",
                       description=__doc__.split("\n\n")[1] if __doc__ else None,
                       epilog=_EPILOG.format(prog=prog), formatter_class=argparse.RawDescriptionHelpFormatter)
    m.add_argument("reports", nargs="*", metavar="REPORT", help="the shards' JSON reports (pytest --gpuperf-json)")
    m.add_argument("--baselines", nargs="+", metavar="DIR", default=None,
                   help="merge these baseline folders (<dir>/<device key>/<module>.json) instead of reports")
    m.add_argument("--out", required=True, metavar="PATH",
                   help="the merged report (a file), or with --baselines the merged baseline folder (created, "
                        "or updated in place: a file of it that no shard has stays as it is)")
    m.set_defaults(func=cmd_merge)


def _fail(message: str) -> int:
    print(f"gpuperf merge: {message}", file=sys.stderr)
    return EXIT_INPUT


def cmd_merge(args: Any) -> int:
    """``gpuperf merge``: reports or (``--baselines``) baseline folders; returns the exit code (0 or 2)."""
    from pytest_gpuperf.storage.merge import MergeError

    if bool(args.reports) == bool(args.baselines):
        return _fail("give the shards' reports (REPORT...) or --baselines DIR..., one of the two")
    try:
        return _merge_baselines(args) if args.baselines else _merge_reports(args)
    except MergeError as exc:
        for problem in exc.problems:
            print(f"gpuperf merge: {problem}", file=sys.stderr)
        return _fail(f"nothing written to {args.out}")
    except OSError as exc:
        return _fail(f"cannot write {args.out}: {exc}")


def _merge_reports(args: Any) -> int:
    from pytest_gpuperf.core.files import write_atomic
    from pytest_gpuperf.storage.baseline import dumps
    from pytest_gpuperf.storage.merge import MergeError, merge_reports, read_report

    reports, problems = [], []
    for f in args.reports:
        try:
            reports.append((f, read_report(f)))
        except MergeError as exc:
            problems += exc.problems
    if problems:
        raise MergeError(problems)
    merged = merge_reports(reports)
    write_atomic(Path(args.out), dumps(merged))
    print(f"{args.out}: {len(merged['benchmarks'])} benchmark(s) from {len(reports)} report(s)")
    return 0


def _merge_baselines(args: Any) -> int:
    from pytest_gpuperf.core.files import write_atomic
    from pytest_gpuperf.storage.merge import merge_baseline_dirs

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        return _fail(f"--out {out} is not a folder (with --baselines it is the merged baseline folder)")
    files = merge_baseline_dirs(args.baselines, base=out if out.is_dir() else None)
    if out.is_dir():
        for rel, text in files.items():  # every file merged first: each replaced whole
            write_atomic(out / rel, text)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
        try:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o777 & ~umask)  # a folder as mkdir makes it (mkdtemp's is private)
            for rel, text in files.items():
                write_atomic(tmp / rel, text)
            os.rename(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    print(f"{out}: {len(files)} baseline file(s) written from {len(args.baselines)} folder(s)")
    return 0
