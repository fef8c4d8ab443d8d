"""The verdict study of issue 21: A/A false failures, power and wall time of the default pipeline.

Usage (from a clean checkout of the repository root, the plugin installed; ``MALLOC_*`` as in tox)::

    python benchmarks/verdict_study.py --suite tests/perf --out /tmp/study-perf [--aa 4] [--levels 0.1,0.2,0.5]
        [--stage-runs 2] [--full-runs 1] [--neighbour] [--processes 3]

Everything runs through the command users run (``pytest --gpuperf``), one pytest process per run:

1. **one** ``--gpuperf-update-baselines`` run records the baselines (into ``<out>/baselines``, at
   the checkout's commit, which must be clean: the A/B confirmation re-measures that commit);
2. one ``--gpuperf-processes=1 --gpuperf-no-ab-confirm`` run: the single-process behaviour before
   issue 21, for its wall time and its verdicts;
3. ``--aa`` A/A runs of the default pipeline (worker processes, stored decision, A/B confirmation of
   any regression against the baselines' commit): every final ``regressed`` is a false failure; the
   stored stage's own verdict is read from the confirmation note;
4. power of the stored stage alone (``--gpuperf-no-ab-confirm``): ``--stage-runs`` runs per level with
   ``GPUPERF_INJECT=slowdown:<level>:test_`` (every benchmark of the suite slowed by that fraction at
   once; each benchmark is decided on its own, so one run gives one trial per benchmark);
5. power of the whole pipeline at +20% (with the A/B confirmation): ``--full-runs`` runs; the
   difference of their wall time and step 4's at +20% is what the confirmation adds.

``--neighbour`` keeps one core busy during every run (``benchmarks/noisy_neighbour.py --cores 1``).
Writes every run's JSON report and ``summary.md`` (the table for docs/verdicts.md) under ``--out``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run(args: argparse.Namespace, name: str, extra: list[str], inject: str | None = None) -> dict:
    """One pytest run; returns its JSON report plus ``wall_s`` and ``exit``."""
    out = Path(args.out)
    report = out / f"{name}.json"
    env = dict(os.environ)
    env.pop("GPUPERF_INJECT", None)
    if inject:
        env["GPUPERF_INJECT"] = inject
    cmd = [sys.executable, "-m", "pytest", args.suite, "-p", "no:cacheprovider", f"--gpuperf-baseline-dir={out / 'baselines'}",
           f"--gpuperf-processes={args.processes}", *extra]
    if "--gpuperf-update-baselines" not in extra:
        cmd += ["--gpuperf", f"--gpuperf-json={report}"]
    neighbour = None
    if args.neighbour:
        neighbour = subprocess.Popen([sys.executable, str(HERE / "noisy_neighbour.py"), "--cores", "1", "--seconds", "1800"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    finally:
        if neighbour is not None:
            neighbour.terminate()
            neighbour.wait()
    wall = time.monotonic() - start
    (out / f"{name}.log").write_text(proc.stdout + proc.stderr)
    data = json.loads(report.read_text()) if report.exists() else {"benchmarks": {}}
    data.update(wall_s=wall, exit=proc.returncode, inject=inject)
    print(f"{name}: exit {proc.returncode}, {wall:.0f} s", file=sys.stderr, flush=True)
    return data


def stored_said(entry: dict) -> str:
    """The stored stage's verdict: from the A/B confirmation note when there was one."""
    c = entry.get("comparison") or {}
    note = c.get("ab_confirmation") or ""
    if note.startswith("the stored baseline said "):
        return note[len("the stored baseline said "):].split(" ", 1)[0]
    if note.startswith("not confirmed by A/B"):
        return "regressed"
    return c.get("verdict") or "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--aa", type=int, default=4)
    ap.add_argument("--levels", default="0.1,0.2,0.5")
    ap.add_argument("--stage-runs", type=int, default=2)
    ap.add_argument("--full-runs", type=int, default=1)
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--neighbour", action="store_true")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    levels = [float(x) for x in args.levels.split(",") if x]
    runs: dict[str, dict] = {}
    t0 = time.monotonic()
    runs["update"] = run(args, "update", ["--gpuperf-update-baselines", f"--gpuperf-json={out / 'update.json'}"])
    runs["single"] = run(args, "single", ["--gpuperf-processes=1", "--gpuperf-no-ab-confirm"])
    for i in range(args.aa):
        runs[f"aa{i}"] = run(args, f"aa{i}", [])
    for level in levels:
        for i in range(args.stage_runs):
            runs[f"stage{level}-{i}"] = run(args, f"stage{level}-{i}", ["--gpuperf-no-ab-confirm"],
                                            inject=f"slowdown:{level}:test_")
    for i in range(args.full_runs):
        runs[f"full0.2-{i}"] = run(args, f"full0.2-{i}", [], inject="slowdown:0.2:test_")
    total = time.monotonic() - t0

    names = sorted({k.split("::", 1)[1] for r in runs.values() for k in r.get("benchmarks", {})})

    def verdicts(prefix: str, stage: bool = False) -> dict[str, list[str]]:
        got: dict[str, list[str]] = collections.defaultdict(list)
        for key, r in runs.items():
            if not key.startswith(prefix):
                continue
            for bkey, e in r["benchmarks"].items():
                got[bkey.split("::", 1)[1]].append(stored_said(e) if stage else (e.get("verdict") or "-"))
        return got

    aa_final, aa_stage = verdicts("aa"), verdicts("aa", stage=True)
    single = verdicts("single")
    stage = {lv: verdicts(f"stage{lv}-") for lv in levels}
    full = verdicts("full0.2-")
    hdr = ["benchmark", "A/A final regressed", "A/A stored stage regressed", "single-process run"]
    hdr += [f"stored stage +{lv * 100:g}%" for lv in levels] + ["pipeline +20% (A/B-confirmed)"]
    lines = ["| " + " | ".join(hdr) + " |", "|" + " --- |" * len(hdr)]

    def frac(vs: list[str]) -> str:
        return f"{sum(v == 'regressed' for v in vs)}/{len(vs)}" if vs else "-"

    for n in names:
        cells = [n, frac(aa_final[n]), frac(aa_stage[n]), (single[n] or ["-"])[0]]
        cells += [frac(stage[lv][n]) for lv in levels] + [frac(full[n])]
        lines.append("| " + " | ".join(cells) + " |")
    walls = {k: r["wall_s"] for k, r in runs.items()}
    aa_walls = [w for k, w in walls.items() if k.startswith("aa")]
    stage20 = [w for k, w in walls.items() if k.startswith("stage0.2-")]
    full20 = [w for k, w in walls.items() if k.startswith("full0.2-")]
    summary = [
        f"suite {args.suite}, {len(names)} benchmarks, --gpuperf-processes {args.processes}"
        f"{', one core kept busy (noisy_neighbour --cores 1)' if args.neighbour else ', quiet'}; study took {total / 60:.1f} min",
        "",
        *lines,
        "",
        f"A/A false failures (final): {sum(any(v == 'regressed' for v in aa_final[n]) for n in names)} benchmark(s) with any; "
        f"{sum(v == 'regressed' for n in names for v in aa_final[n])} of {sum(len(aa_final[n]) for n in names)} benchmark-runs",
        f"wall time: update {walls['update']:.0f} s; single-process run {walls['single']:.0f} s; default A/A runs "
        + ", ".join(f"{w:.0f}" for w in aa_walls) + " s"
        + (f"; +20% stored stage only {', '.join(f'{w:.0f}' for w in stage20)} s" if stage20 else "")
        + (f"; +20% with A/B confirmation {', '.join(f'{w:.0f}' for w in full20)} s" if full20 else ""),
        "exit codes: " + ", ".join(f"{k} {r['exit']}" for k, r in runs.items()),
    ]
    text = "\n".join(summary)
    print(text)
    (out / "summary.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
