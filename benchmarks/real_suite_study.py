"""Real libraries' pytest-benchmark suites, unmodified, through the plugin (issue 31).

For each suite: a copy of its folder without git history (so the stored stage decides alone, as in a
shallow CI checkout; with ``--git``, the copy is made a git repository of one commit and the
baselines are committed after the update run, so the A/B against the baselines' commit runs, as
for a user with a full clone), one smoke run (which benchmarks pass as tests), one update run, ``--aa`` unchanged
reruns, and one rerun per injected slowdown (``benchmarks/inject_plugin.py``: every benchmarked call
made ``level`` longer; with ``--git`` an untracked file of the working tree says so, so side A of an
A/B runs without it). Every run is the command users run, ``python -m pytest <args> --gpuperf ...``,
with ``--gpuperf-no-ab-confirm`` (without ``--git``); the verdicts come from ``--gpuperf-json`` and JUnit XML.

    python benchmarks/real_suite_study.py --python /work/study/venv/bin/python \\
        --suite tensordict=/work/study/tensordict-src --args tensordict="benchmarks -k 'not cuda'" \\
        --out /tmp/real-study --aa 2 --levels 0.2,0.5 [--plugin-path DIR] [--extra-args "-o gpuperf_max_time=0.2"]

``python benchmarks/real_suite_study.py analyze OUT`` prints, from a finished study, the
process-order effect and the between-process spread of each suite's update run with every run's row.

``--plugin-path DIR`` puts another checkout of the plugin first on ``PYTHONPATH`` (the "before"
figures: e.g. a worktree of the commit before issue 31). Prints a table and writes ``summary.json``.
Runs one process at a time; figures depend on the machine, so report them with the command.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from inject_plugin import SLOWDOWN_FILE  # noqa: E402  (the file the injected slowdown is read from)


def run(python: str, tree: Path, args: list[str], env: dict[str, str], log: Path) -> tuple[int, float]:
    """``python -m pytest <args>`` in ``tree``; its output to ``log``: ``(exit code, wall seconds)``."""
    start = time.monotonic()
    with open(log, "wb") as out:
        rc = subprocess.call([python, "-m", "pytest", *args], cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
    return rc, time.monotonic() - start


def junit_outcomes(path: Path) -> dict[str, str]:
    """Test id -> passed/failed/skipped/error from a JUnit XML file (empty when it is missing)."""
    if not path.exists():
        return {}
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        out[name] = ("failed" if "failure" in kinds else "error" if "error" in kinds
                     else "skipped" if "skipped" in kinds else "passed")
    return out


def verdicts(report: Path) -> dict[str, dict[str, Any]]:
    """Benchmark -> what failed (timing/counts/memory), the timing verdict and its processes."""
    if not report.exists():
        return {}
    out = {}
    for name, b in json.loads(report.read_text())["benchmarks"].items():
        cc, mc = b.get("count_comparison") or {}, b.get("memory_comparison") or {}
        out[name] = {
            "verdict": b.get("verdict"),
            "timing_failed": b.get("verdict") == "regressed",
            "counts_failed": bool(cc.get("failed")),
            "memory_failed": bool(mc.get("verdict") == "regressed" or mc.get("over_budget")),
            "processes": len(b.get("process_medians_ms") or []) or 1,
            "clock": (b.get("comparison") or {}).get("clock"),
            "by_ab": (b.get("comparison") or {}).get("ab_ref") is not None,
            "stored_verdict": _stored_said((b.get("comparison") or {}).get("ab_confirmation")) or b.get("verdict"),
            "unavailable": sorted((b.get("unavailable") or {}).keys()),
        }
    return out


def study_suite(name: str, source: Path, args: list[str], opts: argparse.Namespace) -> dict[str, Any]:
    work = Path(opts.out) / name
    if work.exists():
        shutil.rmtree(work)
    tree = work / "tree"
    shutil.copytree(source, tree, ignore=shutil.ignore_patterns(".git", "__pycache__", ".gpuperf", "baselines"))
    if opts.git:
        (tree / ".gitignore").write_text(".gpuperf/\n__pycache__/\n*.pyc\n.pytest_cache/\n.benchmarks/\n")
        _git(tree, "init", "-q")
        _git(tree, "add", "-A")
        _git(tree, "commit", "-q", "-m", "the suite")
    env = dict(os.environ, GPUPERF_HOST_LOAD=os.environ.get("GPUPERF_HOST_LOAD", "1"))
    paths = [str(HERE)] + ([opts.plugin_path] if opts.plugin_path else [])
    env["PYTHONPATH"] = os.pathsep.join(list(reversed(paths)) + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("GPUPERF_STUDY_SLOWDOWN", None)
    base = [*args, "-p", "no:cacheprovider", "-p", "inject_plugin", *shlex.split(opts.extra_args)]
    result: dict[str, Any] = {"suite": name, "args": args}

    # the plugin's smoke mode (pytest-benchmark, when installed, would measure a plain run)
    rc, wall = run(opts.python, tree, [*base, "-p", "no:benchmark", f"--junitxml={work}/smoke.xml"], env,
                   work / "smoke.log")
    smoke = junit_outcomes(work / "smoke.xml")
    result["smoke"] = {"passed": sum(v == "passed" for v in smoke.values()), "tests": len(smoke), "wall_s": wall}
    print(f"[{name}] smoke: {result['smoke']}", flush=True)

    # pytest-benchmark's own default run of the same selection (this plugin off), for the wall time
    rc, wall = run(opts.python, tree, [*args, "-p", "no:cacheprovider", "-p", "no:gpuperf", "-q"], env,
                   work / "pytest-benchmark.log")
    result["pytest_benchmark"] = {"exit": rc, "wall_s": wall}
    print(f"[{name}] pytest-benchmark's default run: {wall:.0f} s (exit {rc})", flush=True)

    rc, wall = run(opts.python, tree, [*base, "--gpuperf-update-baselines", f"--gpuperf-json={work}/update.json",
                                       f"--junitxml={work}/update.xml"], env, work / "update.log")
    recorded = verdicts(work / "update.json")
    upd = junit_outcomes(work / "update.xml")
    result["update"] = {"wall_s": wall, "recorded": len(recorded), "tests_passed": sum(v == "passed" for v in upd.values()),
                        "tests_failed": sorted(k for k, v in upd.items() if v in ("failed", "error")),
                        "unavailable": {k: v["unavailable"] for k, v in recorded.items() if v["unavailable"]},
                        "processes": {k: v["processes"] for k, v in recorded.items()}}
    print(f"[{name}] update: {wall:.0f} s, {len(recorded)} recorded, failed tests: {len(result['update']['tests_failed'])}",
          flush=True)
    if opts.git:
        _git(tree, "add", "-A")
        _git(tree, "commit", "-q", "-m", "baselines")

    runs = [("aa", 0.0, i) for i in range(opts.aa)] + [("slow", float(x), 0) for x in opts.levels.split(",") if x]
    result["runs"] = []
    for kind, level, i in runs:
        tag = f"{kind}-{level:g}-{i}"
        env_i = dict(env, GPUPERF_STUDY_SLOWDOWN=str(level)) if level and not opts.git else env
        marker = tree / SLOWDOWN_FILE
        if level and opts.git:  # a change of the working tree: side A of the A/B runs the commit without it
            marker.write_text(str(level))
        try:
            rc, wall = run(opts.python, tree, [*base, "--gpuperf", *([] if opts.git else ["--gpuperf-no-ab-confirm"]),
                                               f"--gpuperf-json={work}/{tag}.json", f"--junitxml={work}/{tag}.xml"],
                           env_i, work / f"{tag}.log")
        finally:
            marker.unlink(missing_ok=True)
        v = verdicts(work / f"{tag}.json")
        tests = junit_outcomes(work / f"{tag}.xml")
        failed_tests = sorted(k for k, o in tests.items() if o in ("failed", "error"))
        row = {
            "kind": kind, "level": level, "wall_s": wall, "benchmarks": len(v),
            "timing_failed": sum(x["timing_failed"] for x in v.values()),
            "counts_failed": sum(x["counts_failed"] for x in v.values()),
            "memory_failed": sum(x["memory_failed"] for x in v.values()),
            "any_failed": sum(x["timing_failed"] or x["counts_failed"] or x["memory_failed"] for x in v.values()),
            "failed_tests": len(failed_tests),
            "verdicts": {k: sum(x["verdict"] == k for x in v.values())
                         for k in ("regressed", "inconclusive", "unchanged", "improved", "no-baseline")},
            "processes_mean": (sum(x["processes"] for x in v.values()) / len(v)) if v else None,
            "decided_on_cpu_time": sum(x["clock"] == "cpu" for x in v.values()),
            "measured_by_ab": sum(x["by_ab"] for x in v.values()),
            "stored_verdicts": {k: sum(x["stored_verdict"] == k for x in v.values())
                                for k in ("regressed", "inconclusive", "unchanged", "improved")},
            "failures": {k: [c for c in ("timing", "counts", "memory") if x[f"{c}_failed"]]
                         for k, x in v.items() if x["timing_failed"] or x["counts_failed"] or x["memory_failed"]},
        }
        result["runs"].append(row)
        print(f"[{name}] {tag}: {wall:.0f} s, {row['benchmarks']} benchmarks, verdicts {row['verdicts']}, "
              f"failed: timing {row['timing_failed']} counts {row['counts_failed']} memory {row['memory_failed']}, "
              f"tests failed {row['failed_tests']}, mean processes {row['processes_mean']}, "
              f"decided on CPU time {row['decided_on_cpu_time']}, measured by A/B {row['measured_by_ab']} "
              f"(stored stage said {row['stored_verdicts']})", flush=True)
    return result


def _git(tree: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=study", "-c", "user.email=study@localhost", *args], cwd=tree, check=True)


def _stored_said(note: str | None) -> str | None:
    """The stored stage's verdict from an A/B confirmation's note (``the stored baseline said regressed 1.3x; …``)."""
    prefix = "the stored baseline said "
    return note[len(prefix):].split()[0] if note and note.startswith(prefix) else None


def _quartiles(values: list[float]) -> tuple[float, float, float] | None:
    import statistics

    if len(values) < 2:
        return None
    q1, q2, q3 = statistics.quantiles(values, n=4)
    return q1, q2, q3


def analyze(out: Path) -> dict[str, Any]:
    """From a finished study folder: per suite, the process-order effect of the update run (each
    benchmark's median in process 1 against process 2, and 2 against 3: quartiles of the ratio - 1),
    the between-process SD of the log medians (quartiles), and each run's row of ``summary.json``."""
    import math
    import statistics

    report: dict[str, Any] = {}
    for summary in json.loads((out / "summary.json").read_text()):
        name = summary["suite"]
        update = json.loads((out / name / "update.json").read_text())["benchmarks"]
        first = [b["process_medians_ms"][:3] for b in update.values() if len(b.get("process_medians_ms") or []) >= 3]
        sds = [statistics.stdev(math.log(v) for v in b["process_medians_ms"]) for b in update.values()
               if len(b.get("process_medians_ms") or []) >= 2]
        report[name] = {
            "benchmarks_recorded": len(update),
            "process1_vs_2": _quartiles([m[0] / m[1] - 1 for m in first]),
            "process2_vs_3": _quartiles([m[1] / m[2] - 1 for m in first]),
            "between_process_sd": _quartiles(sds),
            "runs": summary["runs"], "update": {k: v for k, v in summary["update"].items() if k != "processes"},
            "smoke": summary["smoke"],
        }
    return report


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["analyze"]:  # python benchmarks/real_suite_study.py analyze OUT
        print(json.dumps(analyze(Path(argv[1])), indent=1))
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--python", required=True, help="the interpreter of the study environment")
    p.add_argument("--suite", action="append", required=True, help="NAME=DIR (a suite's folder; copied, no git)")
    p.add_argument("--args", action="append", default=[], help="NAME=ARGS (pytest arguments of that suite)")
    p.add_argument("--out", required=True)
    p.add_argument("--aa", type=int, default=2, help="unchanged reruns after the update run")
    p.add_argument("--levels", default="0.2,0.5", help="injected slowdowns, comma-separated fractions")
    p.add_argument("--plugin-path", default=None, help="another checkout of the plugin, first on PYTHONPATH")
    p.add_argument("--git", action="store_true", help="make each copy a git repository, baselines committed: A/B on")
    p.add_argument("--extra-args", default="", help="pytest arguments for every run of every suite")
    opts = p.parse_args(argv)
    args = dict(a.split("=", 1) for a in opts.args)
    Path(opts.out).mkdir(parents=True, exist_ok=True)
    results = []
    for spec in opts.suite:
        name, source = spec.split("=", 1)
        results.append(study_suite(name, Path(source), shlex.split(args.get(name, "")), opts))
    Path(opts.out, "summary.json").write_text(json.dumps(results, indent=1))
    print(f"summary: {Path(opts.out, 'summary.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
