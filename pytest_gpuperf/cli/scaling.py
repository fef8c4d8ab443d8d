"""``gpuperf scaling``: the scaling table of every benchmark recorded at several world sizes (issue 35).

Reads the baseline folder (``--baseline-dir``, default ``baselines``): a run without torchrun
stores its baselines in ``<device key>/`` (world size 1), a run under ``torchrun`` with
``WORLD_SIZE=N`` in ``<device key>-wsN/``. Benchmarks are grouped by (device key without the
``-wsN`` suffix, test module, benchmark id); each one recorded at two or more world sizes gets a
table: world size, its newest stored median (ms), the speedup and the efficiency relative to the
smallest world size recorded, and the kind (the benchmark's ``scaling`` option: strong
``T1 / (N·TN)``, weak ``T1 / TN``; :mod:`pytest_gpuperf.verdict.scaling`). Benchmarks recorded at
one world size only are left out, and counted. ``-k TEXT`` keeps the benchmarks whose name
(``module::id``) contains TEXT; ``--json`` prints the same as JSON on standard output.

Exit codes: 0 done (tables printed or not); 2 a missing baseline folder, or an unreadable baseline
file (the others are still shown). Nothing here imports torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXIT_OK = 0
EXIT_INPUT = 2

_EPILOG = """\
examples:
  pytest --gpuperf-update-baselines                                            # world size 1
  torchrun --standalone --nproc-per-node 2 -m pytest --gpuperf-update-baselines  # world size 2
  {prog} scaling
  {prog} scaling --baseline-dir ci/baselines -k test_step --json > scaling.json

Efficiency is relative to the smallest world size recorded, N0 (normally 1): strong scaling (the
same problem split over the ranks, the default) (N0·T_N0) / (N·T_N), weak scaling (scaling="weak":
the same work per rank) T_N0 / T_N; 100% is perfect. Each median is the newest stored run's.
exit codes: 0 done; 2 a missing baseline folder or an unreadable baseline file.
"""


def register(sub: Any, prog: str) -> None:
    """Add ``scaling`` to the ``gpuperf`` parser's subparsers ``sub``."""
    c = sub.add_parser(
        "scaling", help="scaling efficiency of benchmarks recorded at several world sizes (torchrun)",
        description="Print a scaling table (world size, median, speedup, efficiency) for every benchmark "
                    "whose baselines were recorded at two or more world sizes (<key>/, <key>-wsN/).",
        epilog=_EPILOG.format(prog=prog), formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("--baseline-dir", default="baselines", metavar="DIR",
                   help="the baseline folder (default: baselines)")
    c.add_argument("-k", dest="match", default=None, metavar="TEXT",
                   help="only benchmarks whose name (module::id) contains TEXT")
    c.add_argument("--json", action="store_true", help="print JSON instead of text")
    c.set_defaults(func=cmd_scaling)


@dataclass
class Series:
    """One benchmark's medians by world size: ``device_key`` (without ``-wsN``), ``module``,
    ``benchmark`` (its id), ``medians_ms`` (world size -> newest stored median, ms), ``kinds``
    (world size -> its ``scaling`` option) and ``files`` (world size -> the baseline file)."""

    device_key: str
    module: str
    benchmark: str
    medians_ms: dict[int, float] = field(default_factory=dict)
    kinds: dict[int, str] = field(default_factory=dict)
    files: dict[int, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.module}::{self.benchmark}"

    @property
    def kind(self) -> str:
        """The kind declared at the largest world size (the multi-rank run's marker)."""
        return self.kinds[max(self.kinds)]


def read_series(root: Path) -> tuple[dict[tuple[str, str, str], Series], list[str]]:
    """Every benchmark's :class:`Series` under the baseline folder ``root``, keyed by
    ``(device key, module, benchmark id)``, and the problems of the files that could not be read
    (one line each, naming the file)."""
    from pytest_gpuperf.core.options import options_from_dict
    from pytest_gpuperf.storage.baseline import BaselineError, load
    from pytest_gpuperf.verdict.scaling import split_world_size

    series: dict[tuple[str, str, str], Series] = {}
    problems: list[str] = []
    for folder in sorted(d for d in root.iterdir() if d.is_dir()):
        key, n = split_world_size(folder.name)
        for f in sorted(p for p in folder.glob("*.json") if p.is_file()):
            try:
                bf = load(f)
            except BaselineError as exc:
                problems.append(f"{f}: unreadable: {exc.problem}")
                continue
            if bf is None:  # removed while listing
                continue
            module = bf.module if isinstance(bf.module, str) and bf.module else f.stem
            for bid, entry in bf.benchmarks.items():
                if not entry.history:
                    continue
                s = series.setdefault((key, module, bid), Series(key, module, bid))
                s.medians_ms[n] = entry.history[-1].median_ms
                s.kinds[n] = options_from_dict(entry.options).scaling
                s.files[n] = str(f)
    return series, problems


def cmd_scaling(args: Any) -> int:
    """``gpuperf scaling``: read the baseline folder, print a table per benchmark recorded at two
    or more world sizes (text or ``--json``). Returns 0, or 2 for a missing folder or an
    unreadable file."""
    root = Path(args.baseline_dir)
    if not root.exists():
        print(f"gpuperf scaling: baseline folder {root} does not exist (record baselines with pytest "
              f"--gpuperf-update-baselines, with and without torchrun; or name the folder with --baseline-dir)",
              file=sys.stderr)
        return EXIT_INPUT
    if not root.is_dir():
        print(f"gpuperf scaling: {root} is not a folder (expected {root}/<device key>[-wsN]/<module>.json)",
              file=sys.stderr)
        return EXIT_INPUT
    series, problems = read_series(root)
    chosen = [s for s in series.values() if not args.match or args.match in s.name]
    several = [s for s in chosen if len(s.medians_ms) >= 2]
    single = len(chosen) - len(several)
    if args.json:
        print(json.dumps(_json(root, args, several, single), indent=2, allow_nan=False))
    else:
        _text(root, args, several, single)
    for line in problems:
        print(f"gpuperf scaling: {line}", file=sys.stderr)
    return EXIT_INPUT if problems else EXIT_OK


def _json(root: Path, args: Any, several: list[Series], single: int) -> dict[str, Any]:
    from pytest_gpuperf.verdict.scaling import scaling_table

    out = []
    for s in several:
        points = scaling_table(s.medians_ms, s.kind)
        out.append({"device_key": s.device_key, "module": s.module, "benchmark": s.benchmark, "kind": s.kind,
                    "points": [{"world_size": p.world_size, "median_ms": p.median_ms, "speedup": p.speedup,
                                "efficiency": p.efficiency, "file": s.files[p.world_size]} for p in points]})
    return {"baseline_dir": str(root), "match": args.match, "benchmarks": out,
            "single_world_size": single}


HEADER = ("world size", "median", "speedup", "efficiency", "kind")


def _text(root: Path, args: Any, several: list[Series], single: int) -> None:
    from pytest_gpuperf.reporting.report import format_table
    from pytest_gpuperf.verdict.scaling import formula, scaling_table

    for i, s in enumerate(several):
        points = scaling_table(s.medians_ms, s.kind)
        if i:
            print()
        print(f"{s.name}  [{s.device_key}]  {s.kind} scaling, efficiency {formula(s.kind, points[0].world_size)}")
        rows = [(str(p.world_size), f"{p.median_ms:.3f} ms", f"{p.speedup:.2f}x", f"{p.efficiency * 100:.1f}%",
                 s.kind) for p in points]
        for line in format_table(rows, header=HEADER, numeric=HEADER[:4]):
            print(f"  {line}")
    where = f" matching {args.match!r}" if args.match else ""
    if single:
        print(("\n" if several else "") + f"{single} benchmark(s){where} recorded at one world size only: no "
              f"scaling table (record them with torchrun --nproc-per-node N too)")
    if not several:
        print(f"no benchmark{where} under {root} recorded at two or more world sizes "
              f"({root}/<device key>/ is world size 1, {root}/<device key>-wsN/ world size N)")
