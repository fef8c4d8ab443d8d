"""Measure what the installed gpuperf plugin costs a plain ``pytest`` run that has no benchmark.

Usage (stdlib only, Python >= 3.10; the interpreter must have pytest-gpuperf pip-installed so the
plugin loads through its ``pytest11`` entry point)::

    python benchmarks/startup_overhead.py [--runs 15] [--python PATH] [--json out.json] [--no-check-imports]
    python benchmarks/startup_overhead.py --against DIR [--runs 15]   # this plugin vs another checkout's

It writes a throw-away project (``test_one.py`` with one trivial test and an empty ``pytest.ini``, so
that folder is the rootdir) and times, with ``time.perf_counter`` around ``subprocess.run``,
``PY -m pytest -q -p no:cacheprovider`` ("with plugin") and the same plus ``-p no:gpuperf``
("no:gpuperf"), ``--runs`` times each. The two variants are interleaved in every repetition (the
order flips every other repetition) to cancel drift, after one discarded warm-up pair.
PYTEST_ADDOPTS and PYTEST_DISABLE_PLUGIN_AUTOLOAD are removed from the children's environment.

It prints a table (variant, median s, min s), the difference of the medians and the median of the
per-pair differences in ms, and the verdict line
``plugin overhead: +X ms (median of N paired runs; target < 50 ms)`` (X = median pair difference).
Unless ``--no-check-imports``, one more child runs ``pytest.main(["-q", "-p", "no:cacheprovider"])``
in-process and reports which of torch, numpy and scipy ended up in ``sys.modules``
(``heavy modules imported by a plain run: none`` or e.g. ``numpy, scipy``).
``--json PATH`` writes the raw timings.

``--against DIR`` compares two versions of the plugin instead, paired the same way: "this tree" (the
installed plugin) against "DIR" (a checkout of another revision, e.g. ``git worktree add /tmp/old
f3de8da``, whose ``pytest_gpuperf`` is put first on the children's ``PYTHONPATH``; the entry point
is the installed one, so the package name must be the same), and prints
``this tree vs DIR: +X ms (median of N paired runs)``. Exit status: 0 whatever the figures, 1 if a pytest run failed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEAVY = ("torch", "numpy", "scipy")
BASE_ARGS = ["-m", "pytest", "-q", "-p", "no:cacheprovider"]
VARIANTS = {"with plugin": [], "no:gpuperf": ["-p", "no:gpuperf"]}
CHECK_CODE = f"""\
import json, sys, pytest
rc = pytest.main(["-q", "-p", "no:cacheprovider"])
print("@@RESULT@@" + json.dumps({{"rc": int(rc), "plugin": "pytest_gpuperf.plugin" in sys.modules,
                                   "heavy": [m for m in {HEAVY!r} if m in sys.modules]}}))
"""


def make_project(root: Path) -> None:
    """Write the trivial test project (``test_one.py`` and an empty ``pytest.ini``) into ``root``."""
    (root / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    (root / "pytest.ini").write_text("[pytest]\n")


def child_env() -> dict[str, str]:
    """The environment for the pytest children: ours minus variables that would skew the comparison."""
    env = dict(os.environ)
    for var in ("PYTEST_ADDOPTS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTEST_PLUGINS"):
        env.pop(var, None)
    return env


def timed_run(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    """Run ``cmd`` in ``cwd`` with output captured; return its wall time in seconds.

    Raises SystemExit (after printing the child's output) if the exit code is not 0.
    """
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        print(proc.stdout, proc.stderr, sep="\n", file=sys.stderr)
        raise SystemExit(f"pytest run failed (exit {proc.returncode}): {' '.join(cmd)}")
    return elapsed


def measure(python: str, runs: int, cwd: Path, env: dict[str, str],
            variants: dict[str, tuple[list[str], dict[str, str]]] | None = None) -> dict[str, list[float]]:
    """Time each variant (name -> extra pytest arguments and environment; default :data:`VARIANTS`
    in ``env``) ``runs`` times, interleaved A/B (ABBA order); return seconds per variant."""
    variants = variants or {name: (extra, env) for name, extra in VARIANTS.items()}
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for rep in range(runs + 1):  # repetition 0 is a discarded warm-up
        for name in names if rep % 2 == 0 else names[::-1]:
            extra, venv = variants[name]
            t = timed_run([python, *BASE_ARGS, *extra], cwd, venv)
            if rep:
                times[name].append(t)
    return times


def against(python: str, runs: int, other: Path) -> int:
    """``--against``: this tree's plugin against ``other``'s, paired; prints the difference."""
    if not (other / "pytest_gpuperf" / "__init__.py").is_file():
        raise SystemExit(f"--against {other}: no pytest_gpuperf/__init__.py there (give a checkout of this project)")
    env = child_env()
    old_env = dict(env, PYTHONPATH=os.pathsep.join([str(other.resolve()), *filter(None, [env.get("PYTHONPATH")])]))
    with tempfile.TemporaryDirectory(prefix="gpuperf-startup-") as tmp:
        cwd = Path(tmp)
        make_project(cwd)
        times = measure(python, runs, cwd, env, {"this tree": ([], env), str(other): ([], old_env)})
    new_s, old_s = times["this tree"], times[str(other)]
    pair_ms = [(a - b) * 1e3 for a, b in zip(new_s, old_s)]
    print(f"python: {python}")
    print(f"{'variant':<40}{'median s':>10}{'min s':>10}")
    for name, ts in times.items():
        print(f"{name[-40:]:<40}{statistics.median(ts):>10.3f}{min(ts):>10.3f}")
    print(f"this tree vs {other}: {statistics.median(pair_ms):+.0f} ms (median of {runs} paired runs)")
    return 0


def check_imports(python: str, cwd: Path, env: dict[str, str]) -> dict:
    """Run pytest in-process in a child; return ``{"rc", "plugin" (loaded?), "heavy" (module names)}``."""
    proc = subprocess.run([python, "-c", CHECK_CODE], cwd=cwd, env=env, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("@@RESULT@@")]
    if proc.returncode != 0 or not lines or json.loads(lines[-1][10:])["rc"] != 0:
        print(proc.stdout, proc.stderr, sep="\n", file=sys.stderr)
        raise SystemExit(f"in-process pytest run failed (exit {proc.returncode})")
    return json.loads(lines[-1][10:])


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the process exit status."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15, help="timed runs of each variant (default 15)")
    ap.add_argument("--python", default=sys.executable, help="interpreter to run pytest with (default: this one)")
    ap.add_argument("--json", metavar="PATH", help="write the raw timings (seconds) to this JSON file")
    ap.add_argument("--check-imports", action=argparse.BooleanOptionalAction, default=True,
                    help="also report which heavy modules a plain run imports (default on)")
    ap.add_argument("--against", metavar="DIR", type=Path,
                    help="compare this plugin with the one in DIR (a checkout of another revision), paired")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error(f"--runs must be >= 1, got {args.runs}")
    if args.against is not None:
        return against(args.python, args.runs, args.against)
    env = child_env()
    with tempfile.TemporaryDirectory(prefix="gpuperf-startup-") as tmp:
        cwd = Path(tmp)
        make_project(cwd)
        times = measure(args.python, args.runs, cwd, env)
        imports = check_imports(args.python, cwd, env) if args.check_imports else None
    with_s, without_s = times["with plugin"], times["no:gpuperf"]
    pair_ms = [(a - b) * 1e3 for a, b in zip(with_s, without_s)]
    med_diff_ms = (statistics.median(with_s) - statistics.median(without_s)) * 1e3
    med_pair_ms = statistics.median(pair_ms)
    print(f"python: {args.python}")
    print(f"{'variant':<14}{'median s':>10}{'min s':>10}")
    for name, ts in times.items():
        print(f"{name:<14}{statistics.median(ts):>10.3f}{min(ts):>10.3f}")
    print(f"difference of medians: {med_diff_ms:+.1f} ms")
    print(f"median of per-pair differences: {med_pair_ms:+.1f} ms")
    print(f"plugin overhead: {med_pair_ms:+.0f} ms (median of {args.runs} paired runs; target < 50 ms)")
    if imports is not None:
        if not imports["plugin"]:
            print("warning: pytest_gpuperf.plugin was not loaded; is the plugin installed in this interpreter?")
        print(f"heavy modules imported by a plain run: {', '.join(imports['heavy']) or 'none'}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "python": args.python, "runs": args.runs, "with_plugin_s": with_s, "no_gpuperf_s": without_s,
            "pair_diff_ms": pair_ms, "median_diff_ms": med_diff_ms, "median_pair_diff_ms": med_pair_ms,
            "plugin_loaded": None if imports is None else imports["plugin"],
            "heavy_modules": None if imports is None else imports["heavy"]}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
