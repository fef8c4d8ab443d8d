"""The change point study of issue 34 on a real recorded history: ``gpuperf changes`` against
Apache Otava on the runs of a small project, each run a real ``pytest --gpuperf`` session.

Usage (repository root; Otava as for ``benchmarks/changepoint_study.py``)::

    python benchmarks/changepoint_real.py --out /tmp/cp-real [--runs 30] [--step-at 20]
        [--otava /tmp/otava-venv/bin/python] [--keep] [--processes N] [--max-time 0.15]
    python benchmarks/changepoint_real.py --out /tmp/cp-real --analyze   # again, on the stored runs

**The history.** In a temporary folder: a git repository with a test module of six CPU torch
benchmarks (``@pytest.mark.gpu_bench(device="cpu", max_time=...)``, each well under 1 ms a call)
whose sizes come from a committed ``work.json``. One commit per run; run 0 is
``--gpuperf-update-baselines`` (its baselines are committed with the next run's commit), every
later run ``--gpuperf`` (the gate, A/B confirmation included, as a user runs it). From run
``--step-at`` on (0-based: its index in the series is the first run after the change),
``test_add`` adds 1.1M floats instead of 1M (+10% work) and ``test_softmax`` has 320 rows instead
of 256 (+25%); the other four are unchanged. Every session is ``python -m pytest --gpuperf
-p no:cacheprovider --gpuperf-history=STORE --gpuperf-processes=3 --gpuperf-max-processes=3
--gpuperf-no-ab-confirm --gpuperf-no-why --gpuperf-no-counts`` in the project's folder, with the
plugin of this checkout (``PYTHONPATH``), the allocator settings of tox's perf environment and one
torch thread (``--threads``: on a 2-core machine shared with other jobs a 2-thread op waits for
its preempted thread). The flags leave the history's values as the plugin's defaults make them
(3 process medians a run) but skip the gate's follow-ups (more processes for an inconclusive
comparison, the A/B confirmation of a regression, op profiles, counts), which would take several
times as long. A session that fails (the gate catching the step) still records its run.

**Analysed:** ``python -m pytest_gpuperf changes --history STORE --json`` (a new process, as users
run it) and Otava's ``compute_change_points`` (defaults: window 50, p < 0.001; through
``changepoint_study.run_otava``) on the same per-run values (each run's median of its process
medians). Scored as the synthetic study (``changepoint_study.score``): a step is detected when a
change is found within +-1 run of it, every other change is false (per 100 runs: over all six
series). **Noise** (per benchmark): the between-process SD of the log process medians (pooled over
runs; about the CV) and the run-to-run SD of the log per-run values (a stepped series: around each
side's mean), beside the same figures of the synthetic study's noise models. Writes ``real.json``,
``real.md`` and ``history.sqlite`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from changepoint_study import MODELS, make_series, run_otava, score  # noqa: E402

BEFORE = {"add_n": 1_000_000, "softmax_rows": 256}
AFTER = {"add_n": 1_100_000, "softmax_rows": 320}
#: The gate's follow-ups that add processes or time but not values to the history: more worker
#: processes for an inconclusive comparison (also capped by --gpuperf-max-processes = processes,
#: so every run has the same number of process medians), A/B confirmation, op profiles, counts.
FOLLOW_UPS_OFF = ("--gpuperf-no-ab-confirm", "--gpuperf-no-why", "--gpuperf-no-counts")
STEPPED = {"test_add": "+10% (1.1M floats, was 1M)", "test_softmax": "+25% (320 rows, was 256)"}

TEST_MODULE = '''\
"""Six cheap CPU benchmarks; test_add's and test_softmax's sizes come from work.json."""
import json
from pathlib import Path

import pytest
import torch

WORK = json.loads((Path(__file__).parent / "work.json").read_text())
MAX_TIME = {max_time!r}


def _randn(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


@pytest.mark.gpu_bench(device="cpu", max_time=MAX_TIME)
def test_matmul_128(gpu_bench):
    a, b = _randn(128, 128), _randn(128, 128)
    gpu_bench(torch.matmul, a, b)


@pytest.mark.gpu_bench(device="cpu", max_time=MAX_TIME)
def test_matmul_256(gpu_bench):
    a, b = _randn(256, 256), _randn(256, 256)
    gpu_bench(torch.matmul, a, b)


@pytest.mark.gpu_bench(device="cpu", max_time=MAX_TIME)
def test_add(gpu_bench):
    n = int(WORK["add_n"])
    a, b = _randn(n), _randn(n)
    gpu_bench(torch.add, a, b)


@pytest.mark.gpu_bench(device="cpu", max_time=MAX_TIME)
def test_softmax(gpu_bench):
    x = _randn(int(WORK["softmax_rows"]), 1024)
    gpu_bench(torch.softmax, x, 1)


@pytest.mark.gpu_bench(device="cpu", max_time=MAX_TIME)
def test_conv(gpu_bench):
    conv = torch.nn.Conv2d(16, 16, 3, padding=1)
    x = _randn(1, 16, 32, 32)
    with torch.no_grad():
        gpu_bench(conv, x)


@pytest.mark.gpu_bench(device="cpu", max_time=MAX_TIME)
def test_sum(gpu_bench):
    x = _randn(1_000_000)
    gpu_bench(torch.sum, x)
'''


def git(project: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="study", GIT_AUTHOR_EMAIL="study@example.org",
               GIT_COMMITTER_NAME="study", GIT_COMMITTER_EMAIL="study@example.org")
    return subprocess.run(["git", *args], cwd=project, env=env, check=True, capture_output=True, text=True).stdout


def make_project(project: Path, max_time: float) -> None:
    """The project of the module's docstring at ``project`` (a new git repository, nothing committed)."""
    project.mkdir(parents=True)
    (project / "test_bench.py").write_text(TEST_MODULE.format(max_time=max_time))
    (project / "work.json").write_text(json.dumps(BEFORE) + "\n")
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / ".gitignore").write_text(".gpuperf/\n__pycache__/\n")
    git(project, "init", "-q", "-b", "main")


def session_env(threads: int | None = None) -> dict[str, str]:
    """The sessions' environment: this checkout's plugin first (``PYTHONPATH``), tox's perf allocator
    settings, and ``threads`` torch threads (``OMP_NUM_THREADS``) when given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GPUPERF_"))}
    env.update(PYTHONPATH=str(ROOT), MALLOC_MMAP_THRESHOLD_="4294967296", MALLOC_TRIM_THRESHOLD_="4294967296")
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return env


def record(args: argparse.Namespace, out: Path, store: Path) -> list[dict]:
    """Make the project, commit and measure ``args.runs`` runs into ``store``: a dict per run."""
    tmp = Path(tempfile.mkdtemp(prefix="cp-real-"))
    project = tmp / "project"
    make_project(project, args.max_time)
    logs = out / "sessions"
    logs.mkdir(exist_ok=True)
    env = session_env(args.threads)
    sessions = []
    try:
        for i in range(args.runs):
            if i == args.step_at:
                (project / "work.json").write_text(json.dumps(AFTER) + "\n")
            git(project, "add", "-A")
            git(project, "commit", "-q", "--allow-empty", "-m", f"run {i}" + (" (more work)" if i == args.step_at else ""))
            commit = git(project, "rev-parse", "HEAD").strip()
            mode = "--gpuperf-update-baselines" if i == 0 else "--gpuperf"
            # "--opt=VALUE": pytest finds the rootdir before it knows the plugin's options, so a path
            # given as a separate argument would count as a test path and move the rootdir
            cmd = [sys.executable, "-m", "pytest", mode, "-q", "-p", "no:cacheprovider", f"--gpuperf-history={store}",
                   f"--gpuperf-json={logs / f'run{i:02d}.json'}", f"--gpuperf-processes={args.processes}",
                   f"--gpuperf-max-processes={args.processes}", *FOLLOW_UPS_OFF]
            start = time.monotonic()
            with open(logs / f"run{i:02d}.log", "wb") as log:
                rc = subprocess.call(cmd, cwd=project, env=env, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
            wall = time.monotonic() - start
            verdicts = {}
            report = logs / f"run{i:02d}.json"
            if report.exists():
                verdicts = {k.split("::")[-1]: b.get("verdict") for k, b in json.loads(report.read_text())["benchmarks"].items()}
            sessions.append({"run": i, "commit": commit, "rc": rc, "wall_s": round(wall, 1), "verdicts": verdicts})
            print(f"run {i:2d}: rc {rc}, {wall:5.1f} s, " + ", ".join(f"{k} {v}" for k, v in verdicts.items()), flush=True)
        if args.keep:
            print(f"project kept at {project}")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return sessions


def noise(process_medians: list[list[float]], split: int | None = None) -> dict[str, float]:
    """Noise of one series of runs (``process_medians``: per run, its process medians, ms):
    ``between_process``: the SD of the log process medians within a run, pooled over the runs (the
    square root of their mean variance; about the CV); ``run_to_run``: the SD of the log per-run
    values (median of the process medians) around the mean of their side of ``split`` (the first
    run after a step; None: one side)."""
    import numpy as np

    logs = [np.log(np.asarray(p, dtype=float)) for p in process_medians]
    within = [float(np.var(v, ddof=1)) for v in logs if len(v) >= 2]
    values = np.log([float(np.median(p)) for p in process_medians])
    sides = [values] if split is None else [values[:split], values[split:]]
    dev = np.concatenate([s - s.mean() for s in sides if len(s)])
    return {"between_process": math.sqrt(sum(within) / len(within)) if within else math.nan,
            "run_to_run": float(np.sqrt(np.sum(dev ** 2) / (len(dev) - len(sides))))}


def synthetic_noise(runs: int, series: int = 200) -> dict[str, dict[str, float]]:
    """:func:`noise` of the synthetic study's models (flat series of ``runs`` runs, seeded): the
    mean over ``series`` series of each figure."""
    import numpy as np

    out = {}
    for mi, (model, kw) in enumerate(MODELS.items()):
        rng = np.random.default_rng([34, 99, mi])
        figs = [noise(make_series(rng, runs, 0.0, **kw)[0].tolist()) for _ in range(series)]
        out[model] = {k: float(np.mean([f[k] for f in figs])) for k in figs[0]}
    return out


def ours(store: Path) -> tuple[list[dict], float]:
    """``gpuperf changes --history STORE --json``'s changes (a new process) and its wall time (s)."""
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest_gpuperf", "changes", "--history", str(store), "--json"],
                          capture_output=True, text=True, env=session_env(), timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"gpuperf changes failed ({proc.returncode}): {proc.stderr.strip()}")
    return json.loads(proc.stdout)["changes"], time.monotonic() - start


def analyze(args: argparse.Namespace, out: Path, store: Path) -> dict:
    from pytest_gpuperf.storage.history import HistoryStore
    from pytest_gpuperf.verdict.changepoints import run_series

    with HistoryStore(store) as hs:
        rows = hs.series()
        run_ids = [r["run_id"] for r in hs.runs()]  # oldest first
    position = {rid: i for i, rid in enumerate(run_ids)}
    series = run_series(rows)
    changes, cli_s = ours(store)
    keys = sorted(series)
    otava = run_otava(args.otava, [[p.value_ms for p in series[k]] for k in keys], out)
    methods = {"ours": {k: [] for k in keys}}
    for c in changes:
        methods["ours"][(c["benchmark"], c["device_key"])].append(position[c["after_run"]])
    notes = {}
    if isinstance(otava, dict):
        name = f"Apache Otava {otava['version']}"
        methods[name] = {k: [position[series[k][i].run_id] for i in found] for k, found in zip(keys, otava["changes"])}
    else:
        notes["otava"] = otava
    benchmarks = []
    for k in keys:
        short = k[0].split("::")[-1]
        stepped = short in STEPPED
        at = args.step_at if stepped else None
        pm = [list(p.process_medians_ms) for p in series[k]]
        positions = [position[p.run_id] for p in series[k]]
        split = positions.index(at) if stepped and at in positions else None
        values = [p.value_ms for p in series[k]]
        row = {"benchmark": k[0], "device_key": k[1], "runs": len(values), "stepped": STEPPED.get(short),
               "median_ms": sorted(values)[len(values) // 2], "noise": noise(pm, split)}
        if split is not None:
            row["measured_step_pct"] = 100 * (statistics.median(values[split:]) / statistics.median(values[:split]) - 1)
        for name, found in methods.items():
            hit, false = score(found[k], at)
            row[name] = {"changes_at": found[k], "detected": bool(hit) if stepped else None, "false": false}
        benchmarks.append(row)
    total_runs = sum(b["runs"] for b in benchmarks)
    summary = {name: {"stepped_detected": sum(1 for b in benchmarks if b[name]["detected"]),
                      "stepped": sum(1 for b in benchmarks if b["stepped"]),
                      "false": sum(b[name]["false"] for b in benchmarks),
                      "false_per_100_runs": 100 * sum(b[name]["false"] for b in benchmarks) / total_runs}
               for name in methods}
    return {"runs": len(run_ids), "step_at": args.step_at, "methods": list(methods), "benchmarks": benchmarks,
            "summary": summary, "gpuperf_changes_s": cli_s, "synthetic_noise": synthetic_noise(len(run_ids)),
            "notes": notes}


def markdown(result: dict) -> str:
    names = result["methods"]
    lines = [f"{result['runs']} runs, step from run index {result['step_at']} (0-based; run {result['step_at'] + 1}"
             f" of {result['runs']})", "",
             "| benchmark | work | measured step | median | between-process SD | run-to-run SD | "
             + " | ".join(f"{n}: changes at" for n in names) + " |",
             "|" + " --- |" * (6 + len(names))]
    for b in result["benchmarks"]:
        step = f"{b['measured_step_pct']:+.1f}%" if "measured_step_pct" in b else "-"
        cells = []
        for n in names:
            r = b[n]
            mark = "" if b["stepped"] is None else (" (detected)" if r["detected"] else " (missed)")
            cells.append((", ".join(map(str, r["changes_at"])) or "none") + mark)
        lines.append(f"| {b['benchmark'].split('::')[-1]} | {b['stepped'] or 'unchanged'} | {step} | "
                     f"{b['median_ms'] * 1000:.0f} µs | {b['noise']['between_process']:.1%} | "
                     f"{b['noise']['run_to_run']:.1%} | " + " | ".join(cells) + " |")
    lines.append("")
    for n, s in result["summary"].items():
        lines.append(f"{n}: {s['stepped_detected']} of {s['stepped']} steps detected; {s['false']} false change(s), "
                     f"{s['false_per_100_runs']:.2f} per 100 runs")
    lines.append("synthetic models, same figures (flat series of as many runs): " + "; ".join(
        f"{m} between-process {v['between_process']:.1%}, run-to-run {v['run_to_run']:.1%}"
        for m, v in result["synthetic_noise"].items()))
    if "sessions" in result:
        s = result["sessions"]
        lines.append(f"sessions: {len(s)}, {sum(x['wall_s'] for x in s):.0f} s in all; failed (rc != 0): "
                     + (", ".join(str(x["run"]) for x in s if x["rc"] != 0) or "none"))
    lines.append(f"gpuperf changes --json took {result['gpuperf_changes_s']:.1f} s")
    for k, v in result["notes"].items():
        lines.append(f"{k}: {v}")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for real.json, real.md, history.sqlite and the sessions' logs")
    p.add_argument("--runs", type=int, default=30, help="runs (commits) in the history (default 30)")
    p.add_argument("--step-at", type=int, default=20, help="the first run with more work, 0-based (default 20)")
    p.add_argument("--otava", default="/tmp/otava-venv/bin/python", help="python of a venv with apache-otava")
    p.add_argument("--keep", action="store_true", help="keep the temporary project (its path is printed)")
    p.add_argument("--processes", type=int, default=3, help="--gpuperf-processes (default 3, the plugin's)")
    p.add_argument("--max-time", type=float, default=0.15, help="the benchmarks' max_time in seconds (default 0.15)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (OMP_NUM_THREADS; default 1, 0: torch's)")
    p.add_argument("--analyze", action="store_true", help="only analyse the store already under --out")
    args = p.parse_args()
    if not 4 <= args.step_at <= args.runs - 3:
        p.error(f"--step-at must leave at least 3 runs on each side (4 to {args.runs - 3}), got {args.step_at}")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    store = out / "history.sqlite"
    sessions, recorded_s, before = None, None, {}
    if args.analyze:
        old = out / "real.json"
        if old.exists():
            before = json.loads(old.read_text())
        sessions, recorded_s = before.get("sessions"), before.get("recorded_s")
    else:
        if store.exists():
            store.unlink()
        start = time.monotonic()
        sessions = record(args, out, store)
        recorded_s = round(time.monotonic() - start)
        print(f"recorded {args.runs} runs in {recorded_s} s", flush=True)
    result = analyze(args, out, store)
    result["config"] = {k: getattr(args, k) for k in ("runs", "step_at", "processes", "max_time", "threads")}
    result["command"] = before.get("command") if args.analyze else " ".join(["python", *sys.argv])
    if recorded_s is not None:
        result["recorded_s"] = recorded_s
    if sessions is not None:
        result["sessions"] = sessions
    (out / "real.json").write_text(json.dumps(result, indent=1))
    text = markdown(result)
    (out / "real.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
