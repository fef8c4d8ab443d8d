"""The change point study of issue 34: detection rate and false changes of ``gpuperf changes``'
method (:mod:`pytest_gpuperf.verdict.changepoints`) against Apache Otava's on the same seeded
synthetic series, and the time ``gpuperf changes`` takes over a store of 500 runs x 200 benchmarks.

Usage (repository root)::

    python3 -m venv /tmp/otava-venv && /tmp/otava-venv/bin/pip install apache-otava
    python benchmarks/changepoint_study.py --out /tmp/cp-study [--series 100] [--runs 60]
        [--otava /tmp/otava-venv/bin/python] [--scale | --scale-only] [--short | --short-only]

**Noise model** (one series = ``--runs`` runs of one benchmark, oldest first): each run has 3
worker processes (the plugin's default); run i's level is ``L_i * exp(j_i)``, run-level jitter
``j_i ~ N(0, J)`` (another CI machine of the same key, another time of day), and each process
median is that times ``exp(e)``, ``e ~ N(0, CV)`` (the between-process spread the gate models).
``quiet``: CV 2%, J 1%; ``noisy``: CV 5%, J 2%, and 2% of the runs slowed by 20% on all their
processes (a noisy neighbour). ``L_i`` is 1 before the step and ``1 + step`` from a run drawn
uniformly in [10, runs - 10] on. Each method gets one value per run, the median of its process
medians (what ``gpuperf changes`` analyses).

**Scored:** a step is *detected* when a change is found within +-1 run of it; every other change
found is *false*, reported per 100 runs (on the flat series, step 0, all changes are false).

**Methods:** ours (defaults: adjusted p < 0.001, 3 runs a side); ours at p < 0.01; ours with the
raw p-values (no adjustment for the split's choice, as Otava tests); ours before issue 47 (the
t-test on ms, each change's variance from its two sides); Apache Otava ``compute_change_points`` with
its defaults (window 50, p < 0.001), run by ``benchmarks/otava_driver.py`` under ``--otava`` (its
own virtual environment: it pins numpy 2.2). Writes ``study.json`` and ``study.md`` under ``--out``.

**Short series (issue 47)**, ``--short`` (or ``--short-only``): per model -- the two above,
``outliers`` (noisy, but 5% of the runs 1.5x slower) and ``shared`` (CV 10%, J 10%, 5% of the runs
1.5x slower: a shared CI runner; the recorded history of docs/history.md was noisier still) -- the
false changes per 100 runs of ``--series`` flat series of ``--runs`` runs, and the share of
``--series`` 9-run series (3 runs at level 1, 3 at 1.5, 2 or 3, 3 at 1.1) whose two steps were
both found (within +-1 run, no other change); for the method before issue 47 (t-test on ms,
each change's variance from its two sides: ``detect(log=False, pooled=False)``) and ours at
p < 0.0005, 0.001, 0.002 and 0.005.

``--scale`` also builds a SQLite store of 500 runs x 200 benchmarks (3 process medians each; 10%
of the benchmarks with a 10% step) through ``HistoryStore.append`` and times ``gpuperf changes
--json`` on it, the command as users run it (a new process), and its two parts in process.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
STEPS = (0.0, 0.03, 0.05, 0.10, 0.20, 0.50)
MODELS = {"quiet": dict(cv=0.02, jitter=0.01, outliers=0.0), "noisy": dict(cv=0.05, jitter=0.02, outliers=0.02)}
#: The short-series part (issue 47): models, with the outlier runs' slow-down, and the 3+3+3 steps.
SHORT_MODELS = {**MODELS, "outliers": dict(cv=0.05, jitter=0.02, outliers=0.05, slow=1.5),
                "shared": dict(cv=0.10, jitter=0.10, outliers=0.05, slow=1.5)}
SHORT_STEPS = (1.5, 2.0, 3.0)
#: (name, detect's keywords) of the short-series part: the method before issue 47 and ours at 4 levels.
SHORT_METHODS = (("before (ms, two sides), p < 0.001", {"log": False, "pooled": False}),
                 ("ours, p < 0.0005", {"pvalue": 0.0005}), ("ours, p < 0.001", {}),
                 ("ours, p < 0.002", {"pvalue": 0.002}), ("ours, p < 0.005", {"pvalue": 0.005}))


def make_series(rng, runs: int, step: float, cv: float, jitter: float, outliers: float, processes: int = 3,
                slow: float = 1.2, levels=None):
    """``(process medians (runs x processes), step position or None)`` of one series (see the
    module's docstring); ``levels``: the runs' levels instead of a step (``runs`` and ``step`` unused)."""
    import numpy as np

    level = np.ones(runs) if levels is None else np.asarray(levels, dtype=float)
    runs, at = level.size, None
    if step and levels is None:
        at = int(rng.integers(10, runs - 10 + 1))
        level[at:] *= 1 + step
    run = level * np.exp(rng.normal(0, jitter, runs))
    if outliers:
        run *= np.where(rng.random(runs) < outliers, slow, 1.0)
    return run[:, None] * np.exp(rng.normal(0, cv, (runs, processes))), at


def score(found: list[int], at: int | None) -> tuple[int, int]:
    """``(detected 0/1, false changes)`` of the changes ``found`` for a step at ``at`` (None: flat)."""
    hit = at is not None and any(abs(i - at) <= 1 for i in found)
    false = sum(1 for i in found if at is None or abs(i - at) > 1)
    return int(hit), false


def run_otava(python: str, series: list[list[float]], workdir: Path) -> dict | str:
    """Otava's change indices per series (see otava_driver.py), or why it could not run."""
    if not Path(python).is_file():
        return f"not run: {python} not found (python3 -m venv /tmp/otava-venv && /tmp/otava-venv/bin/pip install apache-otava)"
    src, dst = workdir / "otava-in.json", workdir / "otava-out.json"
    src.write_text(json.dumps({"series": series, "window_len": 50, "max_pvalue": 0.001}))
    proc = subprocess.run([python, str(HERE / "otava_driver.py"), str(src), str(dst)], capture_output=True, text=True,
                          timeout=1800)
    if proc.returncode != 0:
        return f"not run: the driver failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}"
    return json.loads(dst.read_text())


def study(args: argparse.Namespace) -> dict:
    import numpy as np

    from pytest_gpuperf.verdict.changepoints import detect

    cases = []  # (model, step, index in all_series, at)
    all_series: list[list[float]] = []
    for mi, (model, kw) in enumerate(MODELS.items()):
        for si, step in enumerate(STEPS):
            rng = np.random.default_rng([34, mi, si])
            for _ in range(args.series):
                pm, at = make_series(rng, args.runs, step, **kw)
                cases.append((model, step, len(all_series), at))
                all_series.append([float(v) for v in np.median(pm, axis=1)])
    methods: dict[str, list[list[int]]] = {}
    seconds: dict[str, float] = {}
    for name, kw in (("ours", {}), ("ours, p < 0.01", {"pvalue": 0.01}), ("ours, raw p-values", {"adjust": False}),
                     ("before issue 47", {"log": False, "pooled": False})):
        start = time.perf_counter()
        methods[name] = [[i for i, _ in detect(s, **kw)] for s in all_series]
        seconds[name] = time.perf_counter() - start
    otava = run_otava(args.otava, all_series, Path(args.out))
    notes = {}
    if isinstance(otava, dict):
        name = f"Apache Otava {otava['version']}"
        methods[name], seconds[name] = otava["changes"], otava["seconds"]
    else:
        notes["otava"] = otava
    table = []
    for model in MODELS:
        for step in STEPS:
            sel = [(i, at) for m, s, i, at in cases if m == model and s == step]
            row = {"model": model, "step_pct": round(step * 100)}
            for name, found in methods.items():
                scores = [score(found[i], at) for i, at in sel]
                row[name] = {"detected": sum(h for h, _ in scores) / len(sel),
                             "false_per_100_runs": 100 * sum(f for _, f in scores) / (len(sel) * args.runs)}
            table.append(row)
    return {"series_per_case": args.series, "runs": args.runs, "methods": list(methods), "seconds": seconds,
            "table": table, "notes": notes}


def short_study(args: argparse.Namespace) -> list[dict]:
    """Issue 47: per model of SHORT_MODELS and method of SHORT_METHODS, the false changes per 100
    runs of ``args.series`` flat series of ``args.runs`` runs, and the share of ``args.series``
    short series (3 runs at 1, 3 at the step, 3 at 1.1) whose both steps were found (within +-1
    run; no other change)."""
    import numpy as np

    from pytest_gpuperf.verdict.changepoints import detect

    rows = []
    for mi, (model, kw) in enumerate(SHORT_MODELS.items()):
        rng = np.random.default_rng([47, mi])
        flat = [np.median(make_series(rng, args.runs, 0.0, **kw)[0], axis=1) for _ in range(args.series)]
        short = {s: [np.median(make_series(rng, 9, 0.0, levels=[1.0] * 3 + [s] * 3 + [1.1] * 3, **kw)[0], axis=1)
                     for _ in range(args.series)] for s in SHORT_STEPS}
        for name, mkw in SHORT_METHODS:
            row = {"model": model, "method": name, "false_per_100_runs":
                   100 * sum(len(detect(x, **mkw)) for x in flat) / (args.series * args.runs)}
            for s, series in short.items():
                found = [[i for i, _ in detect(x, **mkw)] for x in series]
                row[f"{s:g}x"] = sum(len(f) == 2 and abs(f[0] - 3) <= 1 and abs(f[1] - 6) <= 1
                                     for f in found) / len(series)
            rows.append(row)
    return rows


def short_markdown(rows: list[dict], runs: int) -> str:
    """The short-series table of :func:`short_study` in Markdown."""
    head = (f"| noise | method | flat {runs} runs: false /100 runs | "
            + " | ".join(f"3+3+3 at {s:g}x: both found" for s in SHORT_STEPS) + " |")
    lines = [head, "|" + " --- |" * (3 + len(SHORT_STEPS))]
    for r in rows:
        lines.append(f"| {r['model']} | {r['method']} | {r['false_per_100_runs']:.2f} | "
                     + " | ".join(f"{r[f'{s:g}x']:.0%}" for s in SHORT_STEPS) + " |")
    return "\n".join(lines) + "\n"


def markdown(result: dict) -> str:
    names = result["methods"]
    head = "| noise | step | " + " | ".join(f"{n}: detected | {n}: false /100 runs" for n in names) + " |"
    lines = [head, "|" + " --- |" * (2 + 2 * len(names))]
    for row in result["table"]:
        cells = []
        for n in names:
            det = "-" if row["step_pct"] == 0 else f"{row[n]['detected']:.0%}"
            cells += [det, f"{row[n]['false_per_100_runs']:.2f}"]
        lines.append(f"| {row['model']} | {'+' + str(row['step_pct']) + '%' if row['step_pct'] else 'none'} | "
                     + " | ".join(cells) + " |")
    lines.append("")
    lines.append("time for all series: " + ", ".join(f"{n} {s:.1f} s" for n, s in result["seconds"].items()))
    for k, v in result["notes"].items():
        lines.append(f"{k}: {v}")
    return "\n".join(lines) + "\n"


def scale(out: Path, runs: int = 500, benchmarks: int = 200) -> dict:
    """Build a store of ``runs`` x ``benchmarks`` and time ``gpuperf changes --json`` on it."""
    import numpy as np

    from pytest_gpuperf.storage.history import HistoryStore, ResultRow, RunRecord
    from pytest_gpuperf.verdict.changepoints import find_change_points

    db = out / "scale.sqlite"
    if db.exists():
        db.unlink()
    rng = np.random.default_rng(500)
    steps = {b: int(rng.integers(50, runs - 50)) for b in range(0, benchmarks, 10)}  # 10% of them step +10%
    start = time.perf_counter()
    with HistoryStore(db) as store:
        for r in range(runs):
            jit = np.exp(rng.normal(0, 0.01, benchmarks))
            pm = np.exp(rng.normal(0, 0.02, (benchmarks, 3))) * jit[:, None]
            rows = [ResultRow(benchmark=f"tests/perf/test_suite.py::test_b{b:03d}",
                              median_ms=float(np.median(pm[b])) * (1.1 if b in steps and r >= steps[b] else 1.0),
                              rounds=20, device_key="cpu-x",
                              process_medians_ms=tuple(float(v) * (1.1 if b in steps and r >= steps[b] else 1.0)
                                                       for v in pm[b]))
                    for b in range(benchmarks)]
            store.append(RunRecord(run_id=f"run{r:04d}", created_utc=f"2025-01-01T00:00:{r:04d}", mode="compare",
                                   commit=hashlib.sha1(f"commit {r}".encode()).hexdigest(), branch="main", device_key="cpu-x"), rows)
    built = time.perf_counter() - start
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest_gpuperf", "changes", "--history", str(db), "--json"],
                          capture_output=True, text=True, env=env, timeout=600)
    cli = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    found = json.loads(proc.stdout)["changes"]
    start = time.perf_counter()
    with HistoryStore(db) as store:
        rows = store.series()
    read = time.perf_counter() - start
    start = time.perf_counter()
    cps = find_change_points(rows)
    analysed = time.perf_counter() - start
    hits = sum(1 for c in cps if int(c.benchmark[-3:]) in steps and abs(c.index - steps[int(c.benchmark[-3:])]) <= 1)
    return {"runs": runs, "benchmarks": benchmarks, "rows": len(rows), "build_s": built, "cli_s": cli,
            "read_s": read, "analysis_s": analysed, "changes": len(found), "steps": len(steps), "steps_found": hits,
            "command": f"gpuperf changes --history {db} --json"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for study.json, study.md (and scale.sqlite)")
    p.add_argument("--series", type=int, default=100, help="series per noise model and step (default 100)")
    p.add_argument("--runs", type=int, default=60, help="runs per series (default 60)")
    p.add_argument("--otava", default="/tmp/otava-venv/bin/python", help="python of a venv with apache-otava")
    p.add_argument("--scale", action="store_true", help="also time gpuperf changes on 500 runs x 200 benchmarks")
    p.add_argument("--scale-only", action="store_true", help="only the timing of --scale")
    p.add_argument("--short", action="store_true", help="also the short-series part (issue 47: 3+3+3 steps)")
    p.add_argument("--short-only", action="store_true", help="only the short-series part")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT))
    skip = args.scale_only or args.short_only
    result = {"methods": [], "seconds": {}, "table": [], "notes": {}} if skip else study(args)
    if args.scale or args.scale_only:
        result["scale"] = scale(out)
    if args.short or args.short_only:
        result["short"] = short_study(args)
    (out / "study.json").write_text(json.dumps(result, indent=1))
    text = "" if skip else markdown(result)
    if "short" in result:
        text += "\n" + short_markdown(result["short"], args.runs)
    if "scale" in result:
        s = result["scale"]
        text += (f"\nscale: {s['runs']} runs x {s['benchmarks']} benchmarks ({s['rows']} rows): `{s['command']}` "
                 f"took {s['cli_s']:.1f} s (a new process); in process: reading {s['read_s']:.1f} s, analysis "
                 f"{s['analysis_s']:.1f} s; {s['changes']} change(s), {s['steps_found']} of the {s['steps']} "
                 f"steps found (store built in {s['build_s']:.0f} s)\n")
    (out / "study.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
