"""Regenerate the dashboard screenshot of the docs (``docs/img/dashboard.png``, docs/history.md).

Usage (pytest-gpuperf, plotly and playwright installed; Debian's ``chromium`` at /usr/bin/chromium)::

    python benchmarks/dashboard_screenshot.py [--out docs/img/dashboard.png] [--keep DIR]

It makes a throw-away git repository of 40 commits with ordinary subjects, a SQLite store of one
run per commit and 6 benchmarks (``benchmarks/dashboard_scale.py``'s :func:`fill`: seeded, 2% noise,
a 15% step from the 27th run in the first benchmark), finds the change points as ``gpuperf dashboard``
does (``verdict.changepoints.find_change_points`` per series), writes the site with the commits' subjects from the repository, opens the first
benchmark's page (branch ``main``) in headless chromium (1200 px wide), shows the hover of the newest
run and saves the top of the page — the plot and the change-point table — as a PNG.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from dashboard_scale import fill  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
SUBJECTS = ["gemm: pick the tile size from the problem shape", "ci: cache the pip wheels", "docs: fix a typo",
            "conv: fuse the bias add", "softmax: one pass over the row", "tests: more shapes for layernorm",
            "attention: causal mask without a copy", "build: bump torch to 2.13", "gemm: split-k for tall matrices",
            "refactor: move the kernels' helpers"]


def _repo(path: Path, n: int) -> list[str]:
    env = dict(os.environ, GIT_AUTHOR_NAME="dev", GIT_AUTHOR_EMAIL="dev@example.org", GIT_COMMITTER_NAME="dev",
               GIT_COMMITTER_EMAIL="dev@example.org")
    subprocess.run(["git", "init", "-q", str(path)], check=True, env=env)
    shas = []
    for i in range(n):
        subject = "gemm: switch to the new autotuner defaults" if i == 2 * n // 3 else SUBJECTS[i % len(SUBJECTS)]
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = f"2026-03-{1 + i // 2:02d}T{8 + i % 2 * 6:02d}:00:00+00:00"
        subprocess.run(["git", "-C", str(path), "commit", "-q", "--allow-empty", "-m", subject], check=True, env=env)
        shas.append(subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], check=True, capture_output=True,
                                   text=True).stdout.strip())
    return shas


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(HERE.parent / "docs" / "img" / "dashboard.png"))
    p.add_argument("--keep", default=None, metavar="DIR", help="write the site here (default: a temporary folder)")
    args = p.parse_args(argv)
    from playwright.sync_api import sync_playwright

    from pytest_gpuperf.cli.dashboard import _changes
    from pytest_gpuperf.core.git import commit_subjects
    from pytest_gpuperf.reporting.dashboard import page_name, write_site
    from pytest_gpuperf.storage.history import HistoryStore

    n = 40
    with tempfile.TemporaryDirectory() as tmp:
        shas = _repo(Path(tmp) / "repo", n)
        db, site = Path(tmp) / "history.sqlite", Path(args.keep or Path(tmp) / "site")
        fill(db, n, 6, commits=shas, step_every=6, step=0.15)
        with HistoryStore(db) as store:
            runs, rows = store.runs(), store.series()
        changes = _changes(rows)  # the real detector, as gpuperf dashboard runs it
        if not changes:
            raise SystemExit("dashboard_screenshot: the detector found no change point in the synthetic history")
        subjects = {c: s for c, (s, _) in commit_subjects(Path(tmp) / "repo", shas).items()}
        write_site(site, runs, rows, changes, subjects=subjects)
        page = site / "bench" / page_name(rows[0]["benchmark"], rows[0]["device_key"])
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            pg = browser.new_page(viewport={"width": 1200, "height": 900})
            pg.goto(page.as_uri() + "?branch=main")
            pg.wait_for_selector("#gp-time .annotation")
            pg.evaluate("Plotly.Fx.hover('gp-time', [{curveNumber: 3, "  # the newest run (its label goes left)
                        "pointNumber: document.getElementById('gp-time').data[3].x.length - 1}])")
            box = pg.locator("#gp-changes").bounding_box()
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            pg.screenshot(path=args.out, clip={"x": 0, "y": 0, "width": 1200, "height": box["y"] + box["height"] + 16},
                          full_page=True)
            browser.close()
    print(f"wrote {args.out} ({Path(args.out).stat().st_size / 1e3:.0f} kB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
