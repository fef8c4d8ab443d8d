"""A/A false-failure rate and power of the regression rule, against three reference rules.

Usage (from the repository root, with the plugin installed in the environment)::

    python benchmarks/stat_power.py [--trials 400] [--processes 24] [--reuse]
                                    [--seed 20251121] [--data benchmarks/stat_power_data.json]
                                    [--out benchmarks/stat_power.md] [--max-time 1.0]
                                    [--threads 0] [--sources real,synthetic] [--jobs 1]

Every rule decides "fail" (= regression detected) or "pass" for one comparison of a current run
with its baseline. A rule's **A/A false-failure rate** is how often it fails when nothing changed
(delta 0); its **power** at +delta is how often it fails when the current run's times are
multiplied by ``1 + delta`` (delta = +2%, +5%, +10%, +20%). Each cell of the tables is the share
of ``--trials`` Monte Carlo trials (default 400) that failed. Trials are seeded per trial
(``numpy.random.default_rng`` on ``(seed, table, trial)``) and the same draw is reused for every
delta (common random numbers), so the rows of one table differ only by the rule and the delta.

Rules (all compare the current run with the baseline):

* **ours** - the plugin's single-process path (``--gpuperf-processes 1``; the default, several
  worker processes, is studied by ``benchmarks/verdict_study.py``):
  :func:`pytest_gpuperf.verdict.gate.evaluate` (the plugin's one evaluation function) with ``threshold=0.05``,
  ``alpha=0.01``, a history of K=10 stored baseline runs (their medians as ``run_medians_ms``,
  oldest first; the newest run's samples as ``baseline_ms``), and ONE confirmation: when the first
  decision is ``REGRESSED``, ``evaluate`` re-measures: ``remeasure`` returns a second
  measurement from the same run/process, and that final verdict counts. Fails iff the final
  verdict is ``Verdict.REGRESSED``. Two extra rows, for information: the first decision alone (no
  confirmation), and strict mode (``--gpuperf-strict``: a final ``INCONCLUSIVE`` fails too).
* **fixed 5% on mean** - pytest-benchmark ``--benchmark-compare-fail=mean:5%``:
  fail iff ``mean(current) > 1.05 * mean(newest baseline run)``.
* **gpucheck** - one-sided Mann-Whitney U (``scipy.stats.mannwhitneyu``, ``alternative="greater"``)
  ``p < 0.05`` AND ``median(current) / median(newest baseline run) >= 1.1``.
* **MWU p<0.01** - one-sided Mann-Whitney U ``p < 0.01`` alone, current vs newest baseline run.

The reference rules see the current run's first measurement only (they have no re-measure).

Data sources:

(a) **Real CPU timings.** The script spawns ``--processes`` worker processes (default 24) one after
    another (never in parallel): ``python benchmarks/stat_power.py --collect FILE``. Each imports
    torch afresh and times three ops on the CPU with :func:`pytest_gpuperf.measure.timing.measure` at the
    plugin's default options (``BenchOptions()``: max_time 1 s, target_precision 0.5%,
    min_rounds 10; ``--max-time`` overrides max_time for quick checks only): a 256x256 fp32
    matmul, an elementwise add of two 2^22-float tensors, and a small conv2d forward
    (8x16x32x32 input, 32 3x3 filters). Each op is measured TWICE in a row in each process; the
    second measurement plays the confirmation re-measure (as the plugin does it: same process,
    fresh warmup). All processes are cached in ``--data`` (JSON); ``--reuse`` analyses the cached
    file without collecting again. A trial draws 11 distinct processes with a seeded RNG: the
    first 10 drawn are the baseline history (put in collection order; each contributes the median
    of its first measurement, and the newest of them also its samples), the 11th is the current
    run (its first measurement; its second as the confirmation). For power the current run's
    samples (both measurements) are multiplied by ``1 + delta``. Processes are treated as
    exchangeable; with P processes there are P!/(P-11)! ordered draws, so trials overlap and
    the real-data cells are less independent than ``--trials`` suggests. One table per op; the
    header gives the measured run-to-run CV of the process medians (first measurements) and the
    rounds per measurement (the plugin's n). ``--threads N`` sets ``torch.set_num_threads(N)`` in
    the workers (default: torch's own default, as under the plugin). On a 2-core machine shared
    with other work, torch's default 2 threads can see multi-millisecond scheduler stalls (an
    OpenMP thread waits for a core), which dominate the timings; ``--threads 1`` avoids that.

(b) **Synthetic noise models**, n = 100 samples per measurement (a typical round count at the
    default 1 s budget is tens to hundreds), base time 1 ms. Every sample carries log-normal jitter
    ``exp(N(0, 0.03))``; models add on top of it:

    * ``jitter``: nothing else (3% log-normal jitter only);
    * ``stalls``: each sample with probability 0.05 multiplied by U(1.5, 3);
    * ``bimodal``: each sample with probability 0.3 multiplied by 1.15 (two clock states);
    * ``offset SD s`` (s = 0%, 1%, 3%): every run's samples all multiplied by ``exp(N(0, s))``.

    The 10 history runs and the current run get independent offsets; the current run's
    confirmation measurement SHARES the current run's offset (same process) with fresh jitter.
    ``jitter``, ``stalls`` and ``bimodal`` have no run offset. ``offset SD 0%`` is the same model
    as ``jitter`` drawn from an independent seed stream (a replicate: the difference between the
    two tables is Monte Carlo noise).

Targets, stated per table for ``ours`` (measured, never tuned here): A/A false failures <= 1% in
every noise model; power >= 95% at +10% and >= 80% at +5% wherever the run-offset SD is <= 1%
(for real data: the measured run-to-run SD of the log process medians).

Runtime on 2 CPU cores at the defaults: collection about 24 x 10 s; analysis a few minutes
(``evaluate`` takes ~10 ms). ``--jobs 2`` splits the analysis over two processes (at most 2).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
import dataclasses
from pathlib import Path
from typing import Any, Sequence

import numpy as np

try:
    from pytest_gpuperf.storage.baseline import BaselineEntry
    from pytest_gpuperf.verdict.compare import Verdict
    from pytest_gpuperf.verdict.gate import Evidence, Reference, evaluate
    from pytest_gpuperf.core.options import DEFAULTS, BenchOptions
except ImportError as exc:  # pragma: no cover - environment problem
    raise SystemExit(
        f"cannot import pytest_gpuperf ({exc}); install the plugin first (pip install -e .)"
    ) from None

HERE = Path(__file__).resolve().parent
DELTAS = (0.0, 0.02, 0.05, 0.10, 0.20)
HISTORY = 10  # K: stored baseline runs (the plugin's default ``history``)
THRESHOLD = DEFAULTS.threshold  # the plugin's default threshold
ALPHA = DEFAULTS.alpha  # the plugin's default alpha
SYN_N = 100  # samples per synthetic measurement
SYN_JITTER = 0.03  # log-normal jitter SD (log space)
SYN_BASE_MS = 1.0

#: Synthetic noise models: name -> (run-offset SD, stalls?, bimodal?).
SYN_MODELS: dict[str, tuple[float, bool, bool]] = {
    "jitter": (0.0, False, False),
    "stalls": (0.0, True, False),
    "bimodal": (0.0, False, True),
    "offset SD 0%": (0.0, False, False),
    "offset SD 1%": (0.01, False, False),
    "offset SD 3%": (0.03, False, False),
}
SYN_DESCRIPTIONS = {
    "jitter": "log-normal jitter, sigma 3%; no run offset",
    "stalls": "3% log-normal jitter + 5% stalls (each sample with p=0.05 multiplied by U(1.5, 3)); no run offset",
    "bimodal": "3% log-normal jitter + bimodal clock states (each sample with p=0.3 multiplied by 1.15); no run offset",
    "offset SD 0%": "3% log-normal jitter + per-run offset exp(N(0, 0%)) (replicate of 'jitter', independent seeds)",
    "offset SD 1%": "3% log-normal jitter + per-run offset exp(N(0, 1%)); confirmation shares the current run's offset",
    "offset SD 3%": "3% log-normal jitter + per-run offset exp(N(0, 3%)); confirmation shares the current run's offset",
}

#: Rules in table order: key -> label. The first four are the comparison asked for; the
#: "info" rows show what the confirmation and strict mode change.
RULES: dict[str, str] = {
    "ours": "ours (K=10 history, T 5%, alpha 0.01, 1 confirmation)",
    "mean5": "fixed 5% on mean (pytest-benchmark mean:5%)",
    "gpucheck": "gpucheck (MWU p<0.05 and median ratio >= 1.1)",
    "mwu01": "MWU p<0.01",
    "ours_first": "(info) ours, first decision only, no confirmation",
    "ours_strict": "(info) ours --gpuperf-strict (inconclusive also fails)",
    "ours_t3": "(info) ours with --gpuperf-threshold 0.03 (not the default)",
}

# ----------------------------------------------------------------------------- collection

#: Real-data ops: name -> description.
OPS = {
    "matmul": "256x256 fp32 matmul (torch.mm)",
    "add": "elementwise add of two 2^22-float fp32 tensors (torch.add)",
    "conv2d": "conv2d forward, input 8x16x32x32 fp32, 32 filters 3x3, padding 1",
}


def collect_worker(path: str, max_time: float | None, threads: int) -> None:
    """Worker process: time every op twice with the plugin's measure() and write JSON to ``path``."""
    import torch
    import torch.nn.functional as F

    from pytest_gpuperf.measure.timing import measure, resolve_device

    if threads > 0:
        torch.set_num_threads(threads)
    options = BenchOptions() if max_time is None else BenchOptions(max_time=max_time)
    device = resolve_device("cpu")
    torch.manual_seed(0)
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    x, y = torch.randn(1 << 22), torch.randn(1 << 22)
    inp, w = torch.randn(8, 16, 32, 32), torch.randn(32, 16, 3, 3)
    calls = {
        "matmul": (torch.mm, (a, b), {}),
        "add": (torch.add, (x, y), {}),
        "conv2d": (F.conv2d, (inp, w), {"padding": 1}),
    }
    out: dict[str, Any] = {
        "pid": os.getpid(),
        "started": time.time(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "options": {"max_time": options.max_time, "target_precision": options.target_precision,
                    "min_rounds": options.min_rounds},
        "ops": {},
    }
    with torch.no_grad():
        for name, (fn, args, kwargs) in calls.items():
            runs = []
            for _ in range(2):  # first measurement, then the confirmation re-measure
                t = measure(fn, args, kwargs, options=options, device=device)
                runs.append({"samples_ms": list(t.samples_ms), "rounds": t.rounds,
                             "calls_per_round": t.calls_per_round})
            out["ops"][name] = runs
    Path(path).write_text(json.dumps(out))


def collect(processes: int, data_path: Path, max_time: float | None, threads: int) -> dict[str, Any]:
    """Spawn ``processes`` collection workers one after another; write and return the data."""
    procs = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(processes):
            path = Path(tmp, f"proc{i}.json")
            cmd = [sys.executable, str(Path(__file__).resolve()), "--collect", str(path)]
            if max_time is not None:
                cmd += ["--max-time", repr(max_time)]
            if threads > 0:
                cmd += ["--threads", str(threads)]
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0 or not path.exists():
                sys.stderr.write(res.stdout[-3000:] + res.stderr[-3000:])
                raise SystemExit(f"collection process {i} failed (exit {res.returncode})")
            procs.append(json.loads(path.read_text()))
            print(f"collected process {i + 1}/{processes} ({time.perf_counter() - t0:.0f} s)",
                  file=sys.stderr, flush=True)
    data = {
        "meta": {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "max_time": BenchOptions().max_time if max_time is None else max_time,
            "torch_threads": procs[0]["threads"] if procs else None,
            "collected": time.strftime("%Y-%m-%d %H:%M:%S"),
            "collect_seconds": round(time.perf_counter() - t0, 1),
        },
        "processes": procs,
    }
    data_path.parent.mkdir(parents=True, exist_ok=True)
    data_path.write_text(json.dumps(data))
    return data


# ----------------------------------------------------------------------------- rules


def apply_rules(cur: np.ndarray, conf: np.ndarray, base: np.ndarray, run_medians: Sequence[float]) -> dict[str, bool]:
    """Decide every rule for one comparison; True = fail (regression detected)."""
    from scipy.stats import mannwhitneyu

    entry = BaselineEntry.from_samples("study", base, run_medians)
    ours = dataclasses.replace(DEFAULTS, threshold=THRESHOLD, alpha=ALPHA, confirm=1)
    t3_options = dataclasses.replace(ours, threshold=0.03)
    # the plugin's single-process path (--gpuperf-processes 1): gate.evaluate, as bench.py calls it
    evidence, reference = Evidence(samples_ms=tuple(cur)), Reference.stored(entry)
    first = evaluate(evidence, reference, ours).comparison  # the first measurement alone (no confirmation)
    final = evaluate(evidence, reference, ours, remeasure=lambda: conf).comparison
    t3 = evaluate(evidence, reference, t3_options, remeasure=lambda: conf).comparison
    p = float(mannwhitneyu(cur, base, alternative="greater").pvalue)
    return {
        "ours": final.verdict is Verdict.REGRESSED,
        "mean5": float(np.mean(cur)) > 1.05 * float(np.mean(base)),
        "gpucheck": p < 0.05 and float(np.median(cur)) / float(np.median(base)) >= 1.1,
        "mwu01": p < 0.01,
        "ours_first": first.verdict is Verdict.REGRESSED,
        "ours_strict": final.verdict in (Verdict.REGRESSED, Verdict.INCONCLUSIVE),
        "ours_t3": t3.verdict is Verdict.REGRESSED,
    }


def _trial_rng(seed: int, table: int, trial: int) -> np.random.Generator:
    return np.random.default_rng([seed, table, trial])


def _syn_measure(rng: np.random.Generator, offset: float, stalls: bool, bimodal: bool) -> np.ndarray:
    x = SYN_BASE_MS * offset * np.exp(rng.normal(0.0, SYN_JITTER, SYN_N))
    if stalls:
        hit = rng.random(SYN_N) < 0.05
        x[hit] *= rng.uniform(1.5, 3.0, int(hit.sum()))
    if bimodal:
        x[rng.random(SYN_N) < 0.3] *= 1.15
    return x


def synthetic_trial(model: str, table: int, seed: int, trial: int) -> list[dict[str, bool]]:
    """One trial of a synthetic model: results per delta (same draw for every delta)."""
    sd, stalls, bimodal = SYN_MODELS[model]
    rng = _trial_rng(seed, table, trial)

    def offset() -> float:
        return float(np.exp(rng.normal(0.0, sd))) if sd > 0 else 1.0

    history = [_syn_measure(rng, offset(), stalls, bimodal) for _ in range(HISTORY)]
    cur_off = offset()
    cur = _syn_measure(rng, cur_off, stalls, bimodal)
    conf = _syn_measure(rng, cur_off, stalls, bimodal)  # same process: shares the offset
    medians = [float(np.median(h)) for h in history]
    return [apply_rules(cur * (1 + d), conf * (1 + d), history[-1], medians) for d in DELTAS]


def real_trial(runs: list[list[np.ndarray]], table: int, seed: int, trial: int) -> list[dict[str, bool]]:
    """One trial on real data: ``runs[p] = [first, second]`` sample arrays of process p."""
    rng = _trial_rng(seed, table, trial)
    pick = rng.choice(len(runs), HISTORY + 1, replace=False)
    hist = sorted(int(i) for i in pick[:HISTORY])  # collection order: the last is the newest
    cur_p = int(pick[HISTORY])
    medians = [float(np.median(runs[i][0])) for i in hist]
    base = runs[hist[-1]][0]
    cur, conf = runs[cur_p]
    return [apply_rules(cur * (1 + d), conf * (1 + d), base, medians) for d in DELTAS]


def _run_chunk(job: tuple) -> np.ndarray:
    """Worker: trials [lo, hi) of one table -> counts[delta, rule]."""
    kind, key, table, seed, lo, hi, payload = job
    counts = np.zeros((len(DELTAS), len(RULES)), dtype=np.int64)
    for trial in range(lo, hi):
        res = synthetic_trial(key, table, seed, trial) if kind == "syn" else real_trial(payload, table, seed, trial)
        for di, r in enumerate(res):
            counts[di] += [r[k] for k in RULES]
    return counts


def run_table(kind: str, key: str, table: int, seed: int, trials: int, payload: Any,
              pool: ProcessPoolExecutor | None) -> np.ndarray:
    """Fail counts[delta, rule] over ``trials`` trials of one table."""
    if pool is None:
        return _run_chunk((kind, key, table, seed, 0, trials, payload))
    step = max(1, math.ceil(trials / 8))
    jobs = [(kind, key, table, seed, lo, min(trials, lo + step), payload) for lo in range(0, trials, step)]
    return sum(pool.map(_run_chunk, jobs))


# ----------------------------------------------------------------------------- report


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson 95% interval of a proportion k/n."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (max(0.0, mid - half), min(1.0, mid + half))


def table_lines(counts: np.ndarray, trials: int) -> list[str]:
    head = "| rule | A/A false failures % | power +2% | power +5% | power +10% | power +20% |"
    lines = [head, "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for ri, label in enumerate(RULES.values()):
        cells = [f"{100 * counts[di, ri] / trials:.1f}" for di in range(len(DELTAS))]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def target_line(counts: np.ndarray, trials: int, offset_sd: float, offset_what: str) -> tuple[str, bool, bool | None]:
    """Per-table line on ``ours`` vs the targets; returns (line, A/A met, power met or None)."""
    ri = list(RULES).index("ours")
    aa_k = int(counts[0, ri])
    aa = aa_k / trials
    lo, hi = wilson(aa_k, trials)
    aa_ok = aa <= 0.01
    text = (f"**Targets (ours):** A/A false failures {100 * aa:.1f}% (95% CI {100 * lo:.1f}-{100 * hi:.1f}%) "
            f"{'<=' if aa_ok else '>'} 1%: {'met' if aa_ok else 'NOT met'}; ")
    p5, p10 = counts[DELTAS.index(0.05), ri] / trials, counts[DELTAS.index(0.10), ri] / trials
    if offset_sd <= 0.01:
        ok5, ok10 = p5 >= 0.80, p10 >= 0.95
        text += (f"power at +5% {100 * p5:.1f}% (target >= 80%): {'met' if ok5 else 'NOT met'}; "
                 f"power at +10% {100 * p10:.1f}% (target >= 95%): {'met' if ok10 else 'NOT met'} "
                 f"({offset_what} {100 * offset_sd:.2f}% <= 1%, so the power targets apply).")
        return text, aa_ok, ok5 and ok10
    text += (f"power targets do not apply ({offset_what} {100 * offset_sd:.2f}% > 1%); "
             f"for reference, power at +5% {100 * p5:.1f}%, at +10% {100 * p10:.1f}%.")
    return text, aa_ok, None


def real_summary(data: dict[str, Any], op: str) -> tuple[list[list[np.ndarray]], dict[str, float]]:
    runs = [[np.asarray(m["samples_ms"], dtype=np.float64) for m in p["ops"][op]] for p in data["processes"]]
    meds = np.array([np.median(r[0]) for r in runs])
    meds2 = np.array([np.median(r[1]) for r in runs])
    n = np.array([r[0].size for r in runs] + [r[1].size for r in runs])
    cpr = [m["calls_per_round"] for p in data["processes"] for m in p["ops"][op]]
    info = {
        "median_ms": float(np.median(meds)),
        "cv": float(np.std(meds, ddof=1) / np.mean(meds)),
        "log_sd": float(np.std(np.log(meds), ddof=1)),
        "robust_sd": float(1.4826 * np.median(np.abs(np.log(meds) - np.median(np.log(meds))))),
        "max_dev": float(np.max(np.abs(meds / np.median(meds) - 1))),
        "within_sd": float(np.std(np.log(meds2 / meds), ddof=1)) if len(runs) > 1 else float("nan"),
        "n_median": float(np.median(n)), "n_min": int(n.min()), "n_max": int(n.max()),
        "cpr": int(np.median(cpr)),
    }
    return runs, info


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=400, help="Monte Carlo trials per cell (default 400)")
    ap.add_argument("--processes", type=int, default=24,
                    help="separate collection processes for the real CPU data (default 24, at least 11)")
    ap.add_argument("--seed", type=int, default=20251121, help="seed of every trial's RNG (default 20251121)")
    ap.add_argument("--data", default=str(HERE / "stat_power_data.json"),
                    help="cache of the collected real timings (default benchmarks/stat_power_data.json)")
    ap.add_argument("--reuse", action="store_true", help="analyse the cached --data file instead of collecting")
    ap.add_argument("--out", default=str(HERE / "stat_power.md"),
                    help="Markdown report (default benchmarks/stat_power.md)")
    ap.add_argument("--max-time", type=float, default=None,
                    help="override max_time (s) of each collection measurement, for quick checks only "
                         f"(default: the plugin default, {BenchOptions().max_time:g} s)")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch.set_num_threads in the collection processes (default 0: torch's own "
                         "default, as under the plugin)")
    ap.add_argument("--sources", default="real,synthetic",
                    help="comma-separated data sources to analyse: real, synthetic (default both)")
    ap.add_argument("--jobs", type=int, default=1, choices=(1, 2),
                    help="analysis processes (1 or 2; default 1)")
    ap.add_argument("--collect", metavar="FILE", help=argparse.SUPPRESS)  # worker mode
    args = ap.parse_args(argv)
    if args.max_time is not None and not args.max_time > 0:
        ap.error("--max-time must be > 0")
    if args.threads < 0:
        ap.error("--threads must be >= 0")
    if args.collect:
        collect_worker(args.collect, args.max_time, args.threads)
        return 0
    sources = {s.strip() for s in args.sources.split(",") if s.strip()}
    if not sources or sources - {"real", "synthetic"}:
        ap.error("--sources takes real and/or synthetic")
    if args.trials < 1:
        ap.error("--trials must be >= 1")

    t_start = time.perf_counter()
    data = None
    if "real" in sources:
        data_path = Path(args.data)
        if args.reuse:
            if not data_path.exists():
                raise SystemExit(f"--reuse: {data_path} does not exist; run once without --reuse to collect")
            data = json.loads(data_path.read_text())
            print(f"reusing {len(data['processes'])} processes from {data_path}", file=sys.stderr)
        else:
            if args.processes < HISTORY + 1:
                ap.error(f"--processes must be >= {HISTORY + 1} (10 history runs + 1 current)")
            data = collect(args.processes, data_path, args.max_time, args.threads)
        if len(data["processes"]) < HISTORY + 1:
            raise SystemExit(f"{args.data}: {len(data['processes'])} processes, need >= {HISTORY + 1}")

    t_analysis = time.perf_counter()
    command = "python benchmarks/stat_power.py" + ("" if not argv else " " + shlex.join(argv))
    out: list[str] = [
        "# A/A false failures and power of the regression rules",
        "",
        f"Command: `{command}`",
        "",
        f"n per cell: {args.trials} trials (seed {args.seed}; trial t of table j draws from "
        f"`default_rng([{args.seed}, j, t])`, the same draw for every delta). Cells are % of trials "
        "that failed. Rules: **ours** = `gate.evaluate(threshold=0.05, alpha=0.01, confirm=1)` with K=10 history run "
        "medians + newest run's samples, plus one confirmation re-measure when the first verdict is "
        "REGRESSED (fails iff the final verdict is REGRESSED); **fixed 5% on mean** = "
        "mean(current) > 1.05 x mean(newest baseline run); **gpucheck** = one-sided MWU p < 0.05 and "
        "median ratio >= 1.1; **MWU p<0.01** = one-sided MWU p < 0.01 (reference rules: current's "
        "first measurement vs the newest baseline run). Targets for ours: A/A <= 1% everywhere; "
        "power >= 80% at +5% and >= 95% at +10% where the run-offset SD <= 1%.",
        "",
    ]
    summary: list[str] = []
    tables: list[tuple[str, str, str, int, Any, list[str], float, str]] = []
    if data is not None:
        meta = data.get("meta", {})
        for oi, op in enumerate(OPS):
            runs, info = real_summary(data, op)
            header = [
                f"Real CPU timings, {len(runs)} separate processes collected sequentially "
                f"({meta.get('collected', '?')}, max_time {meta.get('max_time', '?')} s, "
                f"{meta.get('torch_threads', '?')} torch thread(s), {meta.get('cpu_count', '?')} CPUs). Process median {info['median_ms']:.4g} ms; "
                f"**run-to-run CV of the process medians {100 * info['cv']:.2f}%** "
                f"(SD of log medians {100 * info['log_sd']:.2f}%, robust SD 1.4826 x MAD "
                f"{100 * info['robust_sd']:.2f}%, largest deviation from the median "
                f"{100 * info['max_dev']:.1f}%); SD of log(second/first median) within a process "
                f"{100 * info['within_sd']:.2f}%. Rounds per measurement (n): median "
                f"{info['n_median']:.0f}, range {info['n_min']}-{info['n_max']} "
                f"({info['cpr']} call(s) per round).",
            ]
            tables.append(("real", op, f"Real CPU data: {op} - {OPS[op]}", 1000 + oi, runs, header,
                           info["log_sd"], "measured run-to-run SD"))
    if "synthetic" in sources:
        for mi, model in enumerate(SYN_MODELS):
            header = [f"Synthetic: {SYN_DESCRIPTIONS[model]}. n = {SYN_N} samples per measurement "
                      f"(a typical round count at the default 1 s budget is tens to hundreds), "
                      f"K = {HISTORY} history runs, base time {SYN_BASE_MS:g} ms."]
            tables.append(("syn", model, f"Synthetic: {model}", mi, None, header,
                           SYN_MODELS[model][0], "run-offset SD"))

    pool = ProcessPoolExecutor(max_workers=2) if args.jobs == 2 else None
    all_aa, all_power = True, True
    try:
        for kind, key, title, table, payload, header, offset_sd, offset_what in tables:
            t0 = time.perf_counter()
            counts = run_table(kind, key, table, args.seed, args.trials, payload, pool)
            line, aa_ok, power_ok = target_line(counts, args.trials, offset_sd, offset_what)
            all_aa &= aa_ok
            if power_ok is not None:
                all_power &= power_ok
            block = [f"## {title}", "", *header, "", *table_lines(counts, args.trials), "", line, ""]
            out.extend(block)
            print("\n".join(block), flush=True)
            print(f"({title}: {time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
            summary.append(f"- {title}: A/A {100 * counts[0, 0] / args.trials:.1f}%, "
                           f"+5% {100 * counts[2, 0] / args.trials:.1f}%, "
                           f"+10% {100 * counts[3, 0] / args.trials:.1f}%"
                           + ("" if power_ok is not None else " (power targets n/a)"))
    finally:
        if pool is not None:
            pool.shutdown()
    tail = [
        "## Summary (ours)",
        "",
        *summary,
        "",
        f"A/A target (<= 1%) met in every table: {'yes' if all_aa else 'NO'}. "
        f"Power targets met wherever they apply: {'yes' if all_power else 'NO'}.",
        "",
        f"Analysis time {time.perf_counter() - t_analysis:.0f} s (total with collection "
        f"{time.perf_counter() - t_start:.0f} s).",
    ]
    out.extend(tail)
    print("\n".join(tail))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(out) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
