"""Measured: ``gpuperf bisect`` on real workloads (issue 25).

Builds a git repository of ``--commits`` commits holding the bundled perf suite (``tests/perf``); at
commit ``--at`` the suite's conftest starts injecting a slowdown of ``--slowdown`` (a busy wait of
that fraction of each call's own time, the ``GPUPERF_INJECT`` mechanism of ``tests/perf/conftest.py``)
into the benchmarks whose id contains ``--target``, and every later commit keeps it. Then it runs the
real command, ``gpuperf bisect <first> HEAD -- tests/perf -k <target>``, ``--runs`` times, and
prints per run the commit found, whether it is the injected one, the number of A/B steps and the
wall time; with ``--json`` it writes them.

    python benchmarks/bisect_study.py [--commits 16] [--at 11] [--slowdown 0.2] [--target "test_gemm and fp32"]
    python benchmarks/noisy_neighbour.py --cores 1 -- python benchmarks/bisect_study.py   # under a busy core

It uses the ``gpuperf`` of the Python running it (``python -m pytest_gpuperf``), so it measures the
code path users run. The repository goes to a temporary folder (``--keep`` keeps it).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Appended to the suite's conftest from commit ``--at`` on: the injection becomes part of the code.
INJECTED = '''

# bisect study: a slowdown committed into the code from this commit on (both sides of an A/B run
# that measures this commit run it, unlike GPUPERF_INJECT, which only side B applies)
def _injections(test_id):
    kind, amount, target = {spec!r}.split(":")
    return [(kind, float(amount))] if target in test_id else []
'''


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def build(repo: Path, commits: int, at: int, spec: str, record: list[str] | None = None) -> list[str]:
    """The study's repository; returns the shas, oldest first. ``record``: pytest arguments with which
    baselines are recorded at the first commit (they are committed with the second)."""
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "study@example.com")
    git(repo, "config", "user.name", "study")
    shutil.copytree(ROOT / "tests" / "perf", repo / "tests" / "perf")
    (repo / "pytest.ini").write_text("[pytest]\n")
    conftest = repo / "tests" / "perf" / "conftest.py"
    original = conftest.read_text()
    shas = []
    for k in range(commits):
        if k == at:
            conftest.write_text(original + INJECTED.format(spec=spec))
        (repo / "CHANGES.txt").write_text(f"change {k}\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", f"change {k}" + (" (the slowdown)" if k == at else ""))
        shas.append(git(repo, "rev-parse", "HEAD"))
        if k == 0 and record:
            subprocess.run([sys.executable, "-m", "pytest", *record, "--gpuperf-update-baselines"], cwd=repo,
                           check=True, capture_output=True)
    return shas


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--commits", type=int, default=16)
    ap.add_argument("--at", type=int, default=11, help="index of the commit that adds the slowdown")
    ap.add_argument("--slowdown", type=float, default=0.2)
    ap.add_argument("--target", default="test_gemm and fp32", help="pytest -k expression of the benchmark(s)")
    ap.add_argument("--inject", default="test_gemm[fp32", help="substring of the test id the slowdown hits")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--mode", choices=("cli", "pytest", "on-regression"), default="cli",
                    help="cli: gpuperf bisect; pytest: pytest --gpuperf-bisect FIRST..HEAD; on-regression: baselines "
                         "recorded at the first commit, then pytest --gpuperf --gpuperf-bisect-on-regression 1 at HEAD "
                         "(the gate, its A/B confirmation and the bisection in one run)")
    ap.add_argument("--json", help="write the runs' figures here")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="gpuperf-bisect-study-"))
    repo = folder / "repo"
    repo.mkdir()
    select = ["tests/perf", "-k", a.target, "-p", "no:cacheprovider"]
    shas = build(repo, a.commits, a.at, f"slowdown:{a.slowdown}:{a.inject}",
                 record=select if a.mode == "on-regression" else None)
    print(f"study: {a.commits} commits in {repo}, +{a.slowdown:.0%} on {a.inject!r} from commit {a.at} "
          f"({shas[a.at][:7]})", flush=True)
    runs = []
    print(f"mode: {a.mode}", flush=True)
    for i in range(a.runs):
        report_path = folder / f"run{i}.json"
        if a.mode == "cli":
            cmd = [sys.executable, "-m", "pytest_gpuperf", "bisect", shas[0], "HEAD", "--json", str(report_path),
                   "--", *select]
        elif a.mode == "pytest":
            cmd = [sys.executable, "-m", "pytest", *select, f"--gpuperf-bisect={shas[0]}..HEAD",
                   f"--gpuperf-json={report_path}"]
        else:
            cmd = [sys.executable, "-m", "pytest", *select, "--gpuperf", "--gpuperf-bisect-on-regression=1"]
        t0 = time.monotonic()
        proc = subprocess.run(cmd, cwd=repo, capture_output=True, text=True)
        wall = time.monotonic() - t0
        print(proc.stdout + proc.stderr, flush=True)
        found, steps = [], None
        try:
            report = json.loads(report_path.read_text())
            steps = report["steps"]
            for key, b in report["benchmarks"].items():
                for c in b["culprits"][:1]:
                    found.append((key, c["first_bad"], c["single"]))
        except (OSError, ValueError, KeyError):  # on-regression mode writes no bisect JSON: read the summary
            for m in re.finditer(r"first bad commit ([0-9a-f]{7}) ", proc.stdout):
                found.append(("", next((s for s in shas if s.startswith(m.group(1))), m.group(1)), True))
        hit = any(sha == shas[a.at] and single for _, sha, single in found)
        m = re.search(r"bisect: (\d+) A/B step", proc.stdout)
        runs.append({"run": i + 1, "exit": proc.returncode, "found": [f[1][:7] for f in found], "correct": hit,
                     "steps": steps if steps is not None else (int(m.group(1)) if m else None), "wall_s": round(wall, 1)})
        print(f"run {i + 1}/{a.runs}: exit {proc.returncode}, found {runs[-1]['found']} (injected at "
              f"{shas[a.at][:7]}: {'correct' if hit else 'WRONG'}), {runs[-1]['steps']} steps, {wall:.0f} s", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"mode": a.mode, "commits": a.commits, "at": a.at, "slowdown": a.slowdown,
                                            "target": a.target, "runs": runs}, indent=1))
    if not a.keep:
        shutil.rmtree(folder, ignore_errors=True)
    return 0 if all(r["correct"] for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
