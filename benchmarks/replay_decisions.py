"""Replay the worker-process decision on a finished real-suite study, under other rules (issue 45).

``benchmarks/real_suite_study.py`` leaves each run's JSON report with every benchmark's process
medians. This script decides every A/A pair of runs (the update run and the unchanged reruns, each
against each other) and every injected slowdown against the update run again, on the first 3
process medians of each side (``--processes``), under:

* ``t``: the plugin's rule (:func:`pytest_gpuperf.verdict.compare.decide_replicates`: a process a
  slow period disturbed set aside, :func:`~pytest_gpuperf.verdict.compare.set_aside_slow`, then the
  Student t over the log process medians at 99%), at each ``--thresholds``;
* ``t-all``: the Student t over every process median (the rule before the set-aside), at a
  two-sided ``--confidence`` (0.98: each bound a one-sided 99% bound, the non-inferiority reading);
* ``median``: the ratio of the medians of the process medians against the threshold alone (no CI);
* ``robust``: the same t rule with the median for the centre and the MAD (x1.4826, x sqrt(pi/2) for
  the median's efficiency) for the spread, so that one slow process of three moves neither;
* ``t-restore``: the plugin's rule, but a process set aside as a slow period is kept when the other
  side has a process at its level (tried, not adopted); ``t-reproduced``: kept only when the other
  side's median process runs at its level (tried, not adopted);
* any of them after :func:`localized` (``--local W``): each process's local speed, read from its
  neighbouring benchmarks, divided out within each run (tried, not adopted);
* ``t-mod``: the plugin's rule with each pair of runs' spread as every benchmark's prior
  (:mod:`pytest_gpuperf.verdict.moderation`: Smyth's moderated t, for "unchanged" only), and the
  injected slowdowns it passed as unchanged;
* ``t-mod-2+1``: ``t-mod`` as a compare run decides now (issue 45): on the first 2 current
  processes, and on all 3 only where those 2 did not decide a pass; with how many benchmark-runs
  needed the 3rd process.

It prints, per suite and rule: A/A decided (not inconclusive) and false regressions out of all A/A
benchmark-runs, and slowdowns caught. Pure replay: no process is started, nothing is timed.

With ``--cpu`` it replays the CPU-time prior on a busy study's verdicts decided on CPU time
(:func:`cpu_replay`). With ``--escalation`` it replays the escalation prediction instead
(:func:`pytest_gpuperf.verdict.escalation.predict`, at ``--gpuperf-max-processes`` 10) on a study whose
runs escalated every thin benchmark (the plugin before issue 45): of the comparisons inconclusive
on their first 3 processes, how many it stops, and how many of those the added processes had
decided (``--sd-scale``: the SD scaled first, e.g. 1/0.65 to undo the optimistic reading).

    python benchmarks/replay_decisions.py /work/study/out/after-quiet --thresholds 0.05,0.1,0.2
    python benchmarks/replay_decisions.py /work/study/out/before-busy --escalation
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_gpuperf.verdict.compare import decide_replicates, process_level_test, shift_verdict  # noqa: E402

Rule = Callable[[Sequence[float], Sequence[float], float, float], str]


def t_rule(cur: Sequence[float], base: Sequence[float], threshold: float, _confidence: float) -> str:
    """The plugin's decision (:func:`pytest_gpuperf.verdict.compare.decide_replicates`: a process a slow
    period disturbed set aside, then the Student t over the process medians), at 99%."""
    return decide_replicates([[v] for v in cur], list(base), threshold=threshold).verdict.value


def t_all_rule(cur: Sequence[float], base: Sequence[float], threshold: float, confidence: float) -> str:
    """The Student t over every process median (no process set aside: the rule before 2026-11-27),
    at a two-sided ``confidence``."""
    r, ci, ps, pf, _df, _sd = process_level_test(cur, base, confidence=confidence)
    return shift_verdict(r, ci, ps, pf, floor=threshold, alpha=0.01)[0].value


def median_rule(cur: Sequence[float], base: Sequence[float], threshold: float, _confidence: float) -> str:
    r = statistics.median(cur) / statistics.median(base)
    return "regressed" if r > 1 + threshold else "improved" if r < 1 / (1 + threshold) else "unchanged"


def robust_rule(cur: Sequence[float], base: Sequence[float], threshold: float, confidence: float) -> str:
    from scipy import stats as sps

    lc, lb = [math.log(x) for x in cur], [math.log(x) for x in base]
    mc, mb = statistics.median(lc), statistics.median(lb)

    def mad(xs: list[float], m: float) -> float:
        return 1.4826 * statistics.median(abs(x - m) for x in xs)

    sd = math.sqrt((mad(lc, mc) ** 2 + mad(lb, mb) ** 2) / 2)
    n, m = len(cur), len(base)
    df = n + m - 2
    se = max(sd, 1e-9) * math.sqrt(math.pi / 2) * math.sqrt(1 / n + 1 / m)
    d = mc - mb
    h = float(sps.t.ppf(0.5 + confidence / 2, df)) * se
    t = d / se
    return shift_verdict(math.exp(d), (math.exp(d - h), math.exp(d + h)), float(sps.t.sf(t, df)),
                         float(sps.t.cdf(t, df)), floor=threshold, alpha=0.01)[0].value


def t_restore_rule(cur: Sequence[float], base: Sequence[float], threshold: float, _confidence: float) -> str:
    """The plugin's rule, except that a process set aside as a slow period is kept when the other
    side has a process at its level (min <= it <= max of the other side's): read as a second speed
    of the benchmark, not a slow period. Tried for issue 45, not adopted (docs/verdicts.md, "The
    extras after the timing")."""
    from pytest_gpuperf.verdict.compare import noninferior
    from pytest_gpuperf.verdict.estimate import set_aside_slow

    def kept(xs: Sequence[float], other: Sequence[float]) -> list[float]:
        rest, i = set_aside_slow(xs)
        return list(xs) if i is not None and min(other) <= xs[i] <= max(other) else rest

    kc, kb = kept(cur, base), kept(base, cur)
    r, ci, ps, pf, _df, sd = process_level_test(kc, kb)
    return noninferior(shift_verdict(r, ci, ps, pf, floor=threshold, alpha=0.01, test="t test"), r, ci, sd,
                       (len(kc), len(kb)), threshold)[0].value


def t_reproduced_rule(cur: Sequence[float], base: Sequence[float], threshold: float, _confidence: float) -> str:
    """The plugin's rule, except that a process set aside as a slow period is kept when the other
    side's median process runs at its level (at least its median / (1 + OTHERS_AGREE)): the
    other run's typical process reproduces it, so it is a speed of the benchmark, not a slow period."""
    from pytest_gpuperf.verdict.compare import noninferior
    from pytest_gpuperf.verdict.estimate import OTHERS_AGREE, set_aside_slow

    def kept(xs: Sequence[float], other: Sequence[float]) -> list[float]:
        rest, i = set_aside_slow(xs)
        return list(xs) if i is not None and statistics.median(other) * (1 + OTHERS_AGREE) >= xs[i] else rest

    kc, kb = kept(cur, base), kept(base, cur)
    r, ci, ps, pf, _df, sd = process_level_test(kc, kb)
    return noninferior(shift_verdict(r, ci, ps, pf, floor=threshold, alpha=0.01, test="t test"), r, ci, sd,
                       (len(kc), len(kb)), threshold)[0].value


RULES: dict[str, Rule] = {"t": t_rule, "t-all": t_all_rule, "median": median_rule, "robust": robust_rule,
                          "t-restore": t_restore_rule, "t-reproduced": t_reproduced_rule}


def medians(report: Path, first: int = 3) -> dict[str, list[float]]:
    """Each benchmark's first ``first`` process medians (ms) in a JSON report (those with at least 2)."""
    return {k: b["process_medians_ms"][:first] for k, b in json.loads(report.read_text())["benchmarks"].items()
            if len(b.get("process_medians_ms") or []) >= min(2, first)}


def localized(run: dict[str, list[float]], window: int) -> dict[str, list[float]]:
    """One run's process medians with each process's local speed divided out (``--local``; tried for
    issue 45, not adopted): a benchmark's process k is divided by exp(the median, over the ``window``
    benchmarks before and after it in run order, itself left out, of process k's log deviation from
    that benchmark's median process), those factors centred on the benchmark (their mean log is 0),
    so a slow period of one process is taken out and the run's own level is kept."""
    keys = list(run)
    dev = {}
    for k in keys:
        logs = [math.log(x) for x in run[k]]
        mid = statistics.median(logs)
        dev[k] = [x - mid for x in logs]
    out = {}
    for i, k in enumerate(keys):
        near = [keys[j] for j in range(max(0, i - window), min(len(keys), i + window + 1)) if j != i]
        f = [statistics.median(dev[n][p] for n in near if p < len(dev[n])) if near else 0.0 for p in range(len(run[k]))]
        centre = statistics.fmean(f)
        out[k] = [x / math.exp(fp - centre) for x, fp in zip(run[k], f)]
    return out


def replay(study: Path, thresholds: Sequence[float], confidence: float, first: int = 3,
           local: int = 0) -> list[str]:
    lines = []
    for suite_dir in sorted(p for p in study.iterdir() if (p / "update.json").exists() or (p / "record.json").exists()):
        # real_suite_study.py's runs, or compat_corpus.py --compare's (record: the update, compare: an A/A rerun)
        names = {"update": "update", "record": "update", "compare": "aa-compare"}
        runs = {names.get(p.stem, p.stem): medians(p, first) for p in suite_dir.glob("*.json")
                if p.stem in names or p.stem.startswith(("aa-", "slow-"))}
        if local:
            runs = {name: localized(run, local) for name, run in runs.items()}
        aa = [r for r in runs if r == "update" or r.startswith("aa-")]
        pairs = [(b, c) for b in aa for c in aa if b != c and c != "update"]
        slow = sorted(r for r in runs if r.startswith("slow-"))
        for threshold in thresholds:
            for name, rule in RULES.items():
                n = dec = ff = 0
                for b, c in pairs:
                    for k, cur in runs[c].items():
                        if k in runs[b]:
                            v = rule(cur, runs[b][k], threshold, confidence)
                            n, dec, ff = n + 1, dec + (v != "inconclusive"), ff + (v == "regressed")
                caught = []
                for s in slow:
                    got = [rule(cur, runs["update"][k], threshold, confidence) for k, cur in runs[s].items()
                           if k in runs["update"]]
                    caught.append(f"{s.split('-')[1]}: {sum(v == 'regressed' for v in got)}/{len(got)}")
                lines.append(f"{suite_dir.name} T={threshold:g} {name:6s} A/A decided {dec}/{n}, false regressions "
                             f"{ff}; caught " + ", ".join(caught))
            lines.append(_moderated_line(suite_dir.name, runs, pairs, slow, threshold))
            lines.append(_two_stage_line(suite_dir.name, runs, pairs, slow, threshold))
    return lines


def _two_stage(cur: dict[str, list[float]], base: dict[str, list[float]], threshold: float) -> tuple[list[str], int]:
    """The plugin's compare run (``t-mod``) in two stages: every benchmark decided on its first 2
    current processes; one decided passing (``unchanged``, ``improved``) keeps that verdict, the
    others are decided on all 3 (the coordinator's ``_last_process``). Returns the verdicts and how
    many benchmarks the 3rd process measured."""
    keys = [k for k in cur if k in base and len(cur[k]) >= 3]
    first = dict(zip(keys, _moderated_pair({k: cur[k][:2] for k in keys}, {k: base[k] for k in keys}, threshold)))
    full = dict(zip(keys, _moderated_pair({k: cur[k] for k in keys}, {k: base[k] for k in keys}, threshold)))
    open_ = [k for k in keys if first[k] not in ("unchanged", "improved")]
    return [full[k] if k in open_ else first[k] for k in keys], len(open_)


def _two_stage_line(suite: str, runs: dict, pairs: list, slow: list, threshold: float) -> str:
    """``t-mod-2+1``: :func:`_two_stage` on every A/A pair and injected slowdown, with the share of
    benchmark-runs the 3rd process measured."""
    n = dec = ff = third = 0
    for b, c in pairs:
        got, o = _two_stage(runs[c], runs[b], threshold)
        n, dec, ff, third = n + len(got), dec + sum(v != "inconclusive" for v in got), ff + got.count("regressed"), third + o
    caught = []
    for s in slow:
        got, o = _two_stage(runs[s], runs["update"], threshold)
        caught.append(f"{s.split('-')[1]}: {got.count('regressed')}/{len(got)} (passed {got.count('unchanged')}, "
                      f"3rd process {o})")
    return (f"{suite} T={threshold:g} t-mod-2+1 A/A decided {dec}/{n}, false regressions {ff}, 3rd process for "
            f"{third}; caught " + ", ".join(caught))


def _moderated_pair(cur: dict[str, list[float]], base: dict[str, list[float]], threshold: float) -> list[str]:
    """The plugin's verdicts of one pair of runs, each read with the pair's spread as its prior
    (:mod:`pytest_gpuperf.verdict.moderation`, as the coordinator reads a session)."""
    from pytest_gpuperf.verdict.moderation import fit_prior, moderate, spread

    keys = [k for k in cur if k in base]
    prior = fit_prior([x for x in (spread(cur[k], base[k]) for k in keys) if x is not None])
    return [moderate(decide_replicates([[v] for v in cur[k]], base[k], threshold=threshold), prior).verdict.value
            for k in keys]


def _moderated_line(suite: str, runs: dict, pairs: list, slow: list, threshold: float) -> str:
    """``t-mod``: the plugin's rule with the suite's spread as each benchmark's prior (issue 45), and
    how many injected slowdowns it passed as unchanged."""
    n = dec = ff = 0
    for b, c in pairs:
        got = _moderated_pair(runs[c], runs[b], threshold)
        n, dec, ff = n + len(got), dec + sum(v != "inconclusive" for v in got), ff + got.count("regressed")
    caught = []
    for s in slow:
        got = _moderated_pair(runs[s], runs["update"], threshold)
        caught.append(f"{s.split('-')[1]}: {got.count('regressed')}/{len(got)} (passed {got.count('unchanged')})")
    return f"{suite} T={threshold:g} t-mod  A/A decided {dec}/{n}, false regressions {ff}; caught " + ", ".join(caught)


def _cpu_medians(entry: dict) -> list[float] | None:
    m = (entry.get("cpu_time") or {}).get("process_medians_ms")
    return m[:3] if m and len(m) >= 2 else None


def cpu_replay(study: Path, threshold: float = 0.05) -> list[str]:
    """The ``--cpu`` lines: per run of each suite, the verdicts the plugin decided on CPU time and
    left inconclusive (a busy host), and how many of them the session's CPU-time prior
    (:mod:`pytest_gpuperf.verdict.moderation`, fitted to every benchmark's CPU-time process medians
    against the update run's) passes as unchanged, on the first 3 process medians a side."""
    from pytest_gpuperf.verdict.moderation import fit_priors, moderate

    lines = []
    for suite_dir in sorted(p for p in study.iterdir() if (p / "update.json").exists()):
        base = json.loads((suite_dir / "update.json").read_text())["benchmarks"]
        for report in sorted(suite_dir.glob("*.json")):
            if not report.stem.startswith(("aa-", "slow-")):
                continue
            cur = json.loads(report.read_text())["benchmarks"]
            keys = [k for k in cur if k in base and _cpu_medians(cur[k]) and _cpu_medians(base[k])]
            prior = fit_priors((), [(_cpu_medians(cur[k]), _cpu_medians(base[k])) for k in keys]).cpu
            left = [k for k in keys if cur[k]["verdict"] == "inconclusive" and cur[k]["comparison"].get("clock") == "cpu"]
            moved = sum(moderate(decide_replicates([[v] for v in _cpu_medians(cur[k])], _cpu_medians(base[k]),
                                                   threshold=threshold), prior).verdict.value == "unchanged"
                        for k in left)
            decided = sum(v["verdict"] != "inconclusive" for v in cur.values())
            lines.append(f"{suite_dir.name} {report.stem}: decided {decided}/{len(cur)} by the plugin; {len(left)} left "
                         f"inconclusive on CPU time, {moved} of them unchanged with the CPU-time prior")
    return lines


def escalation_replay(study: Path, sd_scale: float = 1.0) -> list[str]:
    """The ``--escalation`` lines: per suite, the thin comparisons (inconclusive on 3 processes a
    side) the prediction stops or lets escalate, against each one's final verdict in the study."""
    import dataclasses

    from pytest_gpuperf.verdict import escalation
    from pytest_gpuperf.verdict.compare import decide_replicates

    lines = []
    for suite_dir in sorted(p for p in study.iterdir() if (p / "update.json").exists()):
        base = json.loads((suite_dir / "update.json").read_text())["benchmarks"]
        tally = {"stopped, later decided": 0, "stopped, still inconclusive": 0, "escalated, decided": 0,
                 "escalated, still inconclusive": 0}
        for report in sorted(suite_dir.glob("*.json")):
            if not report.stem.startswith(("aa-", "slow-0.2")):
                continue
            for k, b in json.loads(report.read_text())["benchmarks"].items():
                first = decide_replicates([[v] for v in b["process_medians_ms"][:3]], base[k]["process_medians_ms"])
                if first.verdict.value != "inconclusive":
                    continue
                first = dataclasses.replace(first, run_sd=(first.run_sd or 0.0) * sd_scale)
                p = escalation.predict(first, 0.05, 10)
                stopped, decided = p is not None and not p.decides, b["verdict"] != "inconclusive"
                tally[("stopped" if stopped else "escalated") + (", later decided" if stopped and decided else
                                                               ", decided" if decided else ", still inconclusive")] += 1
        lines.append(f"{suite_dir.name}: " + ", ".join(f"{k} {v}" for k, v in tally.items()))
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("study", help="a real_suite_study.py --out folder")
    p.add_argument("--thresholds", default="0.05,0.1,0.2")
    p.add_argument("--confidence", type=float, default=0.99, help="two-sided confidence of the CIs (default 0.99)")
    p.add_argument("--escalation", action="store_true", help="replay the escalation prediction instead")
    p.add_argument("--sd-scale", type=float, default=1.0, help="with --escalation: scale the SD first")
    p.add_argument("--cpu", action="store_true", help="replay the CPU-time prior on a busy study instead")
    p.add_argument("--local", type=int, default=0, metavar="W",
                   help="divide out each process's local speed first (median over W neighbours a side)")
    p.add_argument("--processes", type=int, default=3,
                   help="decide on each side's first N process medians (default 3, the plugin's first processes)")
    opts = p.parse_args(argv)
    if opts.cpu:
        print("\n".join(cpu_replay(Path(opts.study))))
        return 0
    if opts.escalation:
        print("\n".join(escalation_replay(Path(opts.study), opts.sd_scale)))
        return 0
    for line in replay(Path(opts.study), [float(x) for x in opts.thresholds.split(",")], opts.confidence,
                       opts.processes, opts.local):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
