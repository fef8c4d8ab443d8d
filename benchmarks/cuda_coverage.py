"""Statement coverage of the plugin's CUDA-only code, run on the simulated CUDA device (issue 22).

Usage (from the repository root, plugin and coverage installed)::

    python benchmarks/cuda_coverage.py [--min PERCENT] [--list] [-- PYTEST ARGS]

Runs ``coverage run --source=pytest_gpuperf -m pytest`` (default arguments: ``tests/unit -q -p
no:cacheprovider``, in one process: the simulator's unit tests drive the CUDA paths in-process),
then counts the **CUDA-only statements** of ``pytest_gpuperf`` (the simulator itself,
``testing.py``, and the scripted-timing helpers, ``_testing.py``, left out):

* every statement of a function, method or class whose name says CUDA or NVML
  (``_measure_cuda``, ``_CudaProber``... ``cuda``/``nvml`` in the name, any case; not "gpu",
  which names the whole product: ``GpuBench`` runs on the CPU too);
* every statement in the branch of an ``if`` that runs on CUDA only (a test that mentions
  ``cuda``: the body, or with ``not``/``!=`` the ``else``);
* every other statement on a line that calls ``torch.cuda.``, ``ProfilerActivity.CUDA`` or ``pynvml.``.

It prints how many of them ran, per file and in total, and with ``--list`` the line numbers that
did not; exit 1 when the total is below ``--min`` (default: report only).
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pytest_gpuperf"
SKIP = {"testing.py", "_testing.py"}
NAME = re.compile(r"cuda|nvml", re.IGNORECASE)
CALL = re.compile(r"torch\.cuda\.|ProfilerActivity\.CUDA|pynvml\.")


def _span(node: ast.AST) -> set[int]:
    return set(range(node.lineno, (getattr(node, "end_lineno", None) or node.lineno) + 1))


def _body_lines(stmts: list[ast.stmt]) -> set[int]:
    out: set[int] = set()
    for s in stmts:
        out |= _span(s)
    return out


def cuda_only_lines(path: Path) -> set[int]:
    """Line numbers of ``path`` inside CUDA-only code (see the module doc)."""
    text = path.read_text()
    tree = ast.parse(text)
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and NAME.search(node.name):
            lines |= _body_lines(node.body)
        elif isinstance(node, ast.If):
            test = ast.get_source_segment(text, node.test) or ""
            if "cuda" not in test.lower():
                continue
            negated = test.lstrip().startswith("not ") or "!=" in test
            lines |= _body_lines(node.orelse if negated else node.body)
    for i, line in enumerate(text.splitlines(), start=1):
        if CALL.search(line) and not line.lstrip().startswith("#"):
            lines.add(i)
    return lines


def cuda_unit_tests() -> list[str]:
    """The unit test files (``tests/unit/test_*.py``, relative to the checkout) whose text mentions
    CUDA or NVML (any case): the ones that can run the CUDA-only statements. In CI they give the
    same figure within a few tenths of a percent as all of ``tests/unit``, in about 60% of its time."""
    return [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "tests" / "unit").glob("test_*.py"))
            if NAME.search(p.read_text(encoding="utf-8"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--min", type=float, default=None, help="fail (exit 1) below this percentage")
    parser.add_argument("--list", action="store_true", help="list the CUDA-only lines that did not run")
    parser.add_argument("--cuda-unit-tests", action="store_true",
                        help="run the unit test files that mention CUDA or NVML (tests/unit/test_*.py; "
                             "cuda_unit_tests()) before the pytest arguments: the ones that can run CUDA-only code; "
                             "without the tests marked subprocess (their work is in a child process)")
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest arguments (default: tests/unit)")
    args = parser.parse_args(argv)
    data = ROOT / ".coverage.cuda"
    pytest_args = args.pytest_args or ["tests/unit", "-q", "-p", "no:cacheprovider"]
    if args.cuda_unit_tests:  # without the tests whose work runs in a child process: coverage sees none of it
        pytest_args = [*cuda_unit_tests(), "-m", "not subprocess", *args.pytest_args]
    run = subprocess.run([sys.executable, "-m", "coverage", "run", f"--data-file={data}", "--source=pytest_gpuperf",
                          "-m", "pytest", *pytest_args], cwd=ROOT)
    if run.returncode not in (0, 5):
        print(f"cuda_coverage: the tests failed (exit {run.returncode})", file=sys.stderr)
        return run.returncode

    import coverage

    cov = coverage.Coverage(data_file=str(data))
    cov.load()
    total = ran = 0
    rows = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent == PACKAGE and path.name in SKIP:
            continue
        _, statements, _, missing, _ = cov.analysis2(str(path))
        cuda = cuda_only_lines(path) & set(statements)
        if not cuda:
            continue
        hit = cuda - set(missing)
        total += len(cuda)
        ran += len(hit)
        rows.append((str(path.relative_to(PACKAGE)), len(hit), len(cuda), sorted(cuda - hit)))
    data.unlink(missing_ok=True)
    print("\nCUDA-only statements run on the simulated device (benchmarks/cuda_coverage.py):")
    for name, hit, n, missed in rows:
        print(f"  {name:28s} {hit:4d} / {n:4d}  ({hit / n * 100:5.1f}%)")
        if args.list and missed:
            print(f"      not run: {', '.join(map(str, missed))}")
    share = ran / total * 100 if total else 100.0
    print(f"  {'total':28s} {ran:4d} / {total:4d}  ({share:5.1f}%)")
    if args.min is not None and share < args.min:
        print(f"cuda_coverage: {share:.1f}% < --min {args.min:g}%", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
