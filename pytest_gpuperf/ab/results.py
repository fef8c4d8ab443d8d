"""A/B verdicts: what the coordinator measured -> one :class:`~pytest_gpuperf.verdict.result.BenchResult` per
benchmark of the working tree, with its A/B comparison, memory comparison and count gate
(pure: no torch, no pytest; the JSON file hands the results to pytest-xdist workers).

For a benchmark measured on both sides: the timing verdict is :func:`pytest_gpuperf.verdict.paired.decide_ab`
on the paired block ratios; peak memory of B is compared with A's (the same rule as a stored
baseline, :func:`pytest_gpuperf.verdict.compare.decide_memory`); the exact counts of B are gated against
A's with the count tolerance and budgets (:func:`pytest_gpuperf.verdict.counts.decide_counts`). A
benchmark of the working tree only is ``no-baseline`` with the note "new"; one of REF only is
listed as removed. Neither fails.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from pytest_gpuperf.verdict.paired import Block
from pytest_gpuperf.verdict.compare import Comparison, Verdict
from pytest_gpuperf.core.options import BenchOptions
from pytest_gpuperf.verdict.result import BenchResult


def options_from_entry(entry: dict[str, Any]) -> BenchOptions:
    """The :class:`BenchOptions` stored in a report entry (see :func:`~pytest_gpuperf.core.options.options_from_dict`)."""
    from pytest_gpuperf.core.options import options_from_dict

    return options_from_dict(entry.get("options"))


def needs_more_pairs(c: Comparison | None) -> bool:
    """Whether an A/B comparison is measured again by more process pairs (the sequential step):
    it says regressed, or its CI straddles 1+T (it could still be a regression)."""
    if c is None or c.ab is None or c.ratio_ci is None:
        return False
    if c.verdict is Verdict.REGRESSED:
        return True
    return c.verdict is Verdict.INCONCLUSIVE and c.ratio_ci[0] < 1 + c.threshold < c.ratio_ci[1]


def ab_result(key: str, blocks: list[Any], entries: dict[str, dict[str, Any]], ref: str,
              errors: dict[str, str] | None = None, confirm_from: int | None = None,
              b_ranks: Sequence[Sequence[float]] | None = None) -> BenchResult | None:
    """The working tree's result for one benchmark (None when B has no entry: it was not measured
    there, or failed). ``blocks``: :class:`~pytest_gpuperf.verdict.paired.Block` of both sides; ``entries``:
    side -> result entry (:func:`~pytest_gpuperf.storage.codec.encode_result`) of that side's first worker; ``confirm_from``:
    the first process pair of a confirmation re-measure (None: none ran); ``b_ranks``: with
    ``--gpuperf-nproc``, each of B's launches' rank medians (ms, rank order), merged by
    :func:`~pytest_gpuperf.verdict.distributed.merged_ranks` (else B's first launch's)."""
    from pytest_gpuperf.verdict.counts import Counts
    from pytest_gpuperf.verdict.gate import Evidence, Reference, evaluate
    from pytest_gpuperf.storage.codec import decode_result

    if "B" not in entries:
        return None
    errors = errors or {}
    b = decode_result(entries["B"])
    options = options_from_entry(entries["B"])
    b_samples = [v for blk in blocks if blk.side == "B" for v in blk.samples_ms] or list(b.samples_ms)
    a_measured = "A" in entries and any(blk.side == "A" for blk in blocks)
    a = decode_result(entries["A"]) if a_measured else None
    b_blocks = tuple(blocks) if any(blk.side == "B" for blk in blocks) else (Block("B", 0, 0, tuple(b_samples)),)
    why = f"A failed: {errors['A']}" if "A" in errors else f"new: not in {ref}"
    reference = Reference.ab(ref, measured=a_measured, peak_memory_bytes=a.peak_memory_bytes if a else None,
                             counts=a.counts if a is not None and isinstance(a.counts, Counts) else None,
                             missing_note=why)
    # other processes took cores while the blocks ran (CPU host load of either side's first worker):
    # they may slow A's and B's processes unequally, so a regression is not trusted (as a throttled
    # GPU) unless both sides' loads were alike and every pair regressed (gate.judge_ab)
    from pytest_gpuperf.verdict.machine import busy_alike

    evidence = Evidence(ab_blocks=b_blocks, peak_memory_bytes=b.peak_memory_bytes,
                        counts=b.counts if isinstance(b.counts, Counts) else None,
                        throttle=b.host_busy or (a.host_busy if a is not None else None), device=b.device,
                        host_busy=b.host_busy or (a.host_busy if a is not None else None),
                        busy_alike=busy_alike(a.telemetry if a is not None else None, b.telemetry))
    ev = evaluate(evidence, reference, options, benchmark_id=key, confirm_from=confirm_from)
    comparison, memory, count_comparison = ev.comparison, ev.memory, ev.counts
    rounds = len(b_samples)
    return BenchResult.from_samples(
        tuple(b_samples), name=b.name, device=b.device, rounds=rounds, calls_per_round=b.calls_per_round,
        warmup_calls=b.warmup_calls, comparison=comparison, peak_memory_bytes=b.peak_memory_bytes,
        memory_comparison=memory, bottleneck=b.bottleneck, telemetry=b.telemetry, benchmark_id=b.benchmark_id,
        group=b.group, options=b.options, counts=b.counts, count_comparison=count_comparison,
        unavailable=b.unavailable, ranks=_b_ranks(b.ranks, b_ranks), cpu=_b_cpu(blocks, rounds),
    )


def _b_cpu(blocks: Sequence[Any], rounds: int) -> Any:
    """Side B's CPU time over its blocks (:class:`~pytest_gpuperf.verdict.cputime.CpuTime`, aligned
    with B's ``rounds`` samples), None unless every B block read it."""
    from pytest_gpuperf.verdict.cputime import CpuTime

    mine = [blk for blk in blocks if blk.side == "B"]
    if not mine or any(blk.cpu is None for blk in mine):
        return None
    cpu = CpuTime(tuple(v for blk in mine for v in blk.cpu_samples_ms),
                  tuple(v for blk in mine for v in blk.process_cpu_samples_ms))
    return cpu if len(cpu.samples_ms) == rounds else None


def _b_ranks(first: Any, launches: Sequence[Sequence[float]] | None) -> Any:
    """Side B's per-rank timing under ``--gpuperf-nproc``: each rank's median over B's launches,
    or ``first`` (B's first launch's) when they do not merge."""
    from pytest_gpuperf.verdict.distributed import RankTiming, merged_ranks

    try:
        merged = merged_ranks([RankTiming.of(x) for x in launches]) if launches else None
    except ValueError:  # a launch reported no positive median
        merged = None
    return merged if merged is not None else first


def ab_results(coordinator: Any, ref: str) -> tuple[dict[str, BenchResult], list[str], list[str]]:
    """``(results by full id, ids removed since REF, notes)`` from a finished
    :class:`~pytest_gpuperf.ab.run.Coordinator`."""
    results: dict[str, BenchResult] = {}
    removed, notes = [], []
    for key in coordinator.order:
        m = coordinator.measured[key]
        r = ab_result(key, m.blocks, m.entries, ref, m.errors, getattr(coordinator, "confirm_from", None),
                      b_ranks=getattr(m, "ranks", {}).get("B"))
        if r is not None:
            results[key] = r
        elif "B" not in m.sides() and "B" not in m.errors:
            removed.append(key)
        for side, err in m.errors.items():
            notes.append(f"A/B: {key} failed on side {side} ({'REF' if side == 'A' else 'working tree'}): {err}")
    return moderated_results(results), removed, notes


def moderated_results(results: dict[str, BenchResult]) -> dict[str, BenchResult]:
    """``results`` with each inconclusive A/B comparison read with this A/B's spread between process
    pairs (:func:`~pytest_gpuperf.verdict.moderation.moderate_ab`; "unchanged" only, issue 45)."""
    from pytest_gpuperf.verdict.moderation import fit_ab_priors, moderate_ab

    priors = fit_ab_priors(r.comparison for r in results.values() if r.comparison is not None)
    if not priors:
        return results
    return {k: r if r.comparison is None else r.replace(comparison=moderate_ab(r.comparison, priors))
            for k, r in results.items()}


def dump_results(path: Path, results: dict[str, Any]) -> None:
    """Write the results for pytest-xdist workers (report entries with their comparisons; a string,
    why a benchmark has no result, as it is)."""
    from pytest_gpuperf.core.files import write_atomic
    from pytest_gpuperf.storage.codec import encode_result

    data = {k: r if isinstance(r, str) else encode_result(r, environment={}, git_commit=None, timestamp_utc="",
                                                           with_comparison=True)
            for k, r in results.items()}
    write_atomic(path, json.dumps(data))


def load_results(path: Path) -> dict[str, BenchResult]:
    """Read what :func:`dump_results` wrote ({} when there is no file)."""
    from pytest_gpuperf.storage.codec import decode_result

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return {k: v if isinstance(v, str) else decode_result(v) for k, v in data.items()}
