"""How this machine's speed moves while nothing else runs, and whether the A/B's reference probe follows it.

Usage (stdlib only, plus this repository on ``sys.path``)::

    python benchmarks/speed_modes.py [--seconds 60] [--block-ms 62]

Three measurements, one after the other, in this one process (issue 45, docs/verdicts.md "The
VM's speed modes and the reference clock"):

1. **Timescale**: a pure-Python loop timed in ~2.5 ms blocks for ``--seconds`` / 2; each 250 ms
   window printed as a digit, the share of its blocks slower than 1.3x the fastest 5% (0: none, 9:
   all), so runs of 9s and 0s show how long a slow or fast stretch lasts.
2. **Stored stage**: blocks of a benchmark-like call (a JSON round trip, ~3 ms) between two
   reference probes (:func:`pytest_gpuperf.measure.probe.reference_probe`, the product's own) for
   ``--seconds``; then, 2000 times, 3 windows of 0.33 s from the first half against 3 from the second
   (a baseline and a rerun measured in 3 worker processes each, as the stored stage does), the ratio
   of the median of window medians: raw, normalized by the probes beside each block, and the
   windows' 10th percentile. Printed: the share within +-5% and +-10% of 1, and the 2.5/50/97.5%
   quantiles.
3. **A/B blocks**: A/A pairs of adjacent ``--block-ms`` blocks of the same call, rounds of ~0.5 ms
   with the reference probe after every few rounds (about 10% of the time, as the A/B's workers
   time it); the SD and the robust SD (1.4826 x MAD) of the paired log ratios, raw and normalized
   (:attr:`pytest_gpuperf.verdict.paired.Block.referenced`, the product's own reading).

Figures depend on the machine and the minute: report them with the command and the date.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics as st
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_gpuperf.measure.probe import reference_probe  # noqa: E402
from pytest_gpuperf.verdict.paired import Block  # noqa: E402

DATA = json.dumps({"a": [1, 2, 3, {"b": "x" * 20}], "c": 1.5, "d": None})


def work() -> str:
    return json.dumps(json.loads(DATA))


def timed_ms(fn, calls: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - t0) / 1e6


def calls_for(fn, ms: float) -> int:
    c = 1
    while timed_ms(fn, c) < ms:
        c *= 2
    return c


def timescale(seconds: float) -> None:
    probe = reference_probe()
    c = calls_for(probe, 2.5)
    vals = []
    end = time.time() + seconds
    while time.time() < end:
        vals.append((time.time(), timed_ms(probe, c)))
    fast = st.quantiles([v for _, v in vals], n=20)[0]
    t0, windows = vals[0][0], {}
    for t, v in vals:
        windows.setdefault(int((t - t0) * 4), []).append(v > 1.3 * fast)
    digits = "".join(str(min(9, int(10 * sum(x) / len(x)))) for _, x in sorted(windows.items()))
    print(f"1. timescale: {len(vals)} blocks of {st.median(v for _, v in vals):.2f} ms; per 250 ms window, "
          f"the share of blocks > 1.3x the fastest 5% (0-9):")
    for i in range(0, len(digits), 80):
        print("   " + digits[i:i + 80])


def stored_stage(seconds: float, window_s: float = 0.33, trials: int = 2000) -> None:
    probe = reference_probe()
    cw, cp = calls_for(work, 3.0), calls_for(probe, 1.0)
    rows = []
    end = time.time() + seconds
    while time.time() < end:
        t = time.time()
        r1, w, r2 = timed_ms(probe, cp), timed_ms(work, cw), timed_ms(probe, cp)
        rows.append((t, w, math.sqrt(r1 * r2)))
    t0, total = rows[0][0], rows[-1][0] - rows[0][0]

    def window(start: float) -> list[tuple[float, float, float]]:
        return [r for r in rows if start <= r[0] - t0 < start + window_s]

    est = {"raw median": lambda ws: st.median(r[1] for r in ws),
           "normalized median": lambda ws: st.median(r[1] / r[2] for r in ws),
           "10th percentile": lambda ws: sorted(r[1] for r in ws)[len(ws) // 10]}
    res: dict[str, list[float]] = {k: [] for k in est}
    rng = random.Random(1)
    for _ in range(trials):
        a = [window(rng.uniform(0, total / 2 - window_s)) for _ in range(3)]
        b = [window(rng.uniform(total / 2, total - window_s)) for _ in range(3)]
        if min(map(len, a + b)) < 5:
            continue
        for k, f in est.items():
            res[k].append(st.median(f(w) for w in b) / st.median(f(w) for w in a))
    print(f"2. stored stage: {len(rows)} blocks over {total:.0f} s; 3 windows of {window_s} s against 3, "
          f"{len(res['raw median'])} trials:")
    for k, v in res.items():
        q = st.quantiles(v, n=40)
        print(f"   {k:18s} within 5%: {sum(abs(x - 1) < .05 for x in v) / len(v):.2f}, within 10%: "
              f"{sum(abs(x - 1) < .1 for x in v) / len(v):.2f}, 2.5/50/97.5%: {q[0]:.3f} {st.median(v):.3f} {q[-1]:.3f}")


def ab_blocks(seconds: float, block_ms: float, round_ms: float = 0.5) -> None:
    probe = reference_probe()
    cw, cp = calls_for(work, round_ms), calls_for(probe, 0.25)
    every = max(1, math.ceil(0.25 / (0.1 * round_ms)))  # the probe about 10% of the time
    rounds = max(2, int(block_ms / round_ms))

    def block(position: int) -> Block:
        samples, probes = [], []
        for i in range(rounds):
            samples.append(timed_ms(work, cw))
            if (i + 1) % every == 0 or i == rounds - 1:
                probes.append(timed_ms(probe, cp))
        return Block("AB"[position % 2], 0, position, tuple(samples), probe_ms=tuple(probes), probe_every=every)

    raw, norm = [], []
    end = time.time() + seconds
    while time.time() < end:
        a, b = block(0), block(1)
        raw.append(math.log(st.median(b.samples_ms) / st.median(a.samples_ms)))
        norm.append(math.log(st.median(b.referenced.samples_ms) / st.median(a.referenced.samples_ms)))

    def robust(v: list[float]) -> float:
        m = st.median(v)
        return 1.4826 * st.median(abs(x - m) for x in v)

    print(f"3. A/B blocks: {len(raw)} A/A pairs of {block_ms:g} ms blocks ({rounds} rounds, the probe after every "
          f"{every}); SD of the paired log ratios: raw {st.pstdev(raw):.3f} (robust {robust(raw):.3f}), "
          f"normalized {st.pstdev(norm):.3f} (robust {robust(norm):.3f})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="length of measurements 2 and 3 (1: half)")
    ap.add_argument("--block-ms", type=float, default=62.0, help="A/B block length (ms) of measurement 3")
    opts = ap.parse_args(argv)
    timescale(opts.seconds / 2)
    stored_stage(opts.seconds)
    ab_blocks(opts.seconds, opts.block_ms)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
