"""``gpuperf bisect GOOD BAD -- <pytest args>``: the command line of :mod:`pytest_gpuperf.bisect.run`
(registered as a subcommand of the ``gpuperf`` command by :mod:`pytest_gpuperf.cli`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from pytest_gpuperf.cli.argtypes import at_least

_EPILOG = """\
examples:
  {prog} bisect v1.4 HEAD -- tests/perf -k test_conv
  {prog} bisect 3f2a9c1 main --json bisect.json --markdown bisect.md -- tests/perf/test_workloads.py::test_gemm

Each step measures a commit against GOOD with the plugin's paired A/B run (interleaved worker
processes of both commits, each in its own git worktree under .gpuperf/bisect, removed at the end);
a step that cannot decide measures more pairs first. Commits where a benchmark cannot run are
skipped, as `git bisect skip` does. exit codes: 0 a first bad commit found for every benchmark
slower at BAD; 1 none (BAD not slower, spread over several commits, inconclusive, cannot measure);
2 bad revisions or a bad command line.
"""


def split_pytest_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(gpuperf's arguments, the pytest arguments)``: split at the first ``--`` (argparse cannot
    take options of its own after positionals and a ``--`` tail at once)."""
    argv = list(argv)
    if "--" not in argv:
        return argv, []
    i = argv.index("--")
    return argv[:i], argv[i + 1:]


def register(sub: Any, prog: str, pytest_args: Sequence[str] = ()) -> None:
    """Add the ``bisect`` subcommand to the ``gpuperf`` parser's subparsers ``sub``; ``pytest_args``:
    what followed ``--`` on the command line (see :func:`split_pytest_args`)."""
    b = sub.add_parser(
        "bisect", help="find the commit that made a benchmark slower (binary search with A/B steps)",
        usage=f"{prog} bisect [-h] [options] GOOD BAD -- PYTEST_ARGS",
        description="Binary search over the first-parent commits from GOOD to BAD for the first commit "
                    "where the benchmarks that the pytest arguments (after --) select got slower.",
        epilog=_EPILOG.format(prog=prog), formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    b.add_argument("good", metavar="GOOD", help="a commit where the benchmark was fast (older)")
    b.add_argument("bad", metavar="BAD", help="a commit where it is slow (newer; e.g. HEAD)")
    b.add_argument("--processes", type=at_least(1), default=1, metavar="N",
                   help="pairs of worker processes per step (default 1; a step that cannot decide adds its "
                        "benchmark's `confirm` pairs)")
    b.add_argument("--max-pairs", type=at_least(1), default=6, metavar="N",
                   help="a step that cannot decide measures more, one pair of worker processes at a time, up to N "
                        "pairs (default 6)")
    b.add_argument("--max-regressions", type=at_least(1), default=3, metavar="N",
                   help="regressions searched per benchmark (default 3): after a culprit, BAD is measured "
                        "against it and the search goes on while it is still slower")
    b.add_argument("--nproc", type=at_least(1), default=None, metavar="N",
                   help="each side's worker a torchrun launch of N ranks on this node (as pytest's "
                        "--gpuperf-nproc; default: one process)")
    b.add_argument("--pythonpath", default="", metavar="PATHS",
                   help="import roots of your code relative to the repository's top, comma-separated (as "
                        "gpuperf_ab_pythonpath), when an installed package would shadow each commit's code")
    b.add_argument("--no-why", dest="why", action="store_false",
                   help="do not profile a culprit's own step on both sides (why it got slower, op by op; "
                        "a few more pairs of worker processes per culprit)")
    b.add_argument("--json", metavar="PATH", help="write the report as JSON")
    b.add_argument("--markdown", metavar="PATH", help="write the report as Markdown (a PR comment or job summary)")
    b.set_defaults(func=cmd_bisect, pytest_args=list(pytest_args))


def cmd_bisect(args: argparse.Namespace) -> int:
    """Run ``gpuperf bisect``; returns its exit code (see the epilog). SIGTERM (a cancelled CI job)
    ends it as Ctrl-C does: the worktrees are removed."""
    pytest_args = list(args.pytest_args)
    roots = [r.strip() for r in args.pythonpath.split(",") if r.strip()]
    from pytest_gpuperf.core.signals import sigterm_raises

    with sigterm_raises():
        return _bisect(args, pytest_args, roots)


def _bisect(args: argparse.Namespace, pytest_args: list[str], roots: list[str]) -> int:
    from pytest_gpuperf.bisect.report import EXIT_USAGE, exit_code, json_dict, markdown, summary_lines
    from pytest_gpuperf.bisect.run import BisectError, Bisector, repository
    from pytest_gpuperf.core.signals import Terminated

    try:
        here = Path.cwd()
        bisector = Bisector(repository(here), here, pytest_args, processes=args.processes, import_roots=roots,
                            progress=lambda line: print(line, flush=True), max_regressions=args.max_regressions,
                            max_pairs=args.max_pairs, why=args.why,
                            nproc=args.nproc if args.nproc and args.nproc > 1 else None)
        run = bisector.run(args.good, args.bad)
    except BisectError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("bisect: interrupted; its worktrees were removed", file=sys.stderr)
        return 130
    except Terminated:
        print("bisect: terminated (SIGTERM); its worktrees were removed", file=sys.stderr)
        return 143
    for line in summary_lines(run, pytest_args):
        print(line)
    from pytest_gpuperf.core.files import write_atomic

    for path, text in ((args.json, lambda: json.dumps(json_dict(run, pytest_args), indent=1)),
                       (args.markdown, lambda: markdown(run, pytest_args))):
        if path:
            try:
                write_atomic(Path(path), text())
                print(f"written to {path}")
            except OSError as exc:
                print(f"error: could not write {path}: {exc}", file=sys.stderr)
                return EXIT_USAGE
    return exit_code(run)
