"""Run Apache Otava's change point detection on series read from JSON (for
``benchmarks/changepoint_study.py``; runs under a virtual environment with ``apache-otava``
installed, never imported by the plugin).

Usage::

    /tmp/otava-venv/bin/python benchmarks/otava_driver.py IN.json OUT.json

IN: ``{"series": [[float, ...], ...], "window_len": 50, "max_pvalue": 0.001}``. OUT:
``{"version": "...", "changes": [[index, ...], ...], "seconds": float}``: per series, the indices
(first value after the change) of ``otava.analysis.compute_change_points`` (Fleming et al. 2023:
e-divisive split in sliding windows, Student's t-test, merge of weak change points), and the time
the calls took in all.
"""

from __future__ import annotations

import json
import sys
import time
from importlib.metadata import version


def main(src: str, dst: str) -> int:
    from otava.analysis import compute_change_points

    spec = json.loads(open(src, encoding="utf-8").read())
    out = []
    start = time.perf_counter()
    for s in spec["series"]:
        cps, _weak = compute_change_points(list(s), window_len=int(spec.get("window_len", 50)),
                                           max_pvalue=float(spec.get("max_pvalue", 0.001)))
        out.append(sorted(int(c.index) for c in cps))
    seconds = time.perf_counter() - start
    with open(dst, "w", encoding="utf-8") as f:
        json.dump({"version": version("apache-otava"), "changes": out, "seconds": seconds}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
