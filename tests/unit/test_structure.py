"""The structure contract (issue 33, "make room before the next rooms"): sizes that may only shrink.

Each bound is today's figure, so the code cannot grow past it; a change that shrinks a figure
lowers its bound here in the same commit. Issue 33's targets, for the direction: functions over 60
lines <= 3; no class over 400 lines outside the public simulator; ``BenchResult`` <= 20 fields; at
most 5 ``GPUPERF_*`` names in the package; git run from one module.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_gpuperf"

#: today's bounds (lower them as the code shrinks; never raise them)
MAX_LONG_FUNCTIONS = 3  # functions over 60 lines
LONG_CLASSES: set[str] = set()  # classes over 400 lines (pytest_gpuperf/testing.py aside): none
MAX_ENV_NAMES = 4  # GPUPERF_* names
#: Comparison 27: ``clock`` (issue 45: every verdict names the clock it was decided on) was added
#: and no field could go without another issue's change (``median_ratio`` is issue 47's)
MAX_FIELDS = {"BenchResult": 12, "SessionSettings": 35, "Comparison": 27, "BenchContext": 26}


def _trees() -> list[tuple[Path, ast.Module, str]]:
    return [(p, ast.parse(p.read_text(encoding="utf-8")), p.read_text(encoding="utf-8"))
            for p in sorted(PACKAGE.rglob("*.py"))]


def _length(node: ast.AST) -> int:
    return node.end_lineno - node.lineno + 1  # type: ignore[attr-defined]


def test_functions_over_60_lines_do_not_grow() -> None:
    long = sorted((_length(n), f"{p.relative_to(PACKAGE)}::{n.name}") for p, tree, _ in _trees()
                  for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and _length(n) > 60)
    assert len(long) <= MAX_LONG_FUNCTIONS, f"{len(long)} functions over 60 lines (bound {MAX_LONG_FUNCTIONS}): {long}"


def test_no_new_class_over_400_lines() -> None:
    big = {n.name for p, tree, _ in _trees() if p.name != "testing.py"
           for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and _length(n) > 400}
    assert big <= LONG_CLASSES, f"classes over 400 lines beyond today's: {sorted(big - LONG_CLASSES)}"


def test_environment_variable_names_do_not_grow() -> None:
    names = sorted({m for _, _, text in _trees() for m in re.findall(r"GPUPERF_[A-Z_]*[A-Z]", text)})
    assert len(names) <= MAX_ENV_NAMES, f"{len(names)} GPUPERF_* names (bound {MAX_ENV_NAMES}): {names}"


@pytest.mark.parametrize("name", sorted(MAX_FIELDS))
def test_records_do_not_grow(name: str) -> None:
    from pytest_gpuperf.plugin.bench import BenchContext
    from pytest_gpuperf.plugin.settings import SessionSettings
    from pytest_gpuperf.verdict.compare import Comparison
    from pytest_gpuperf.verdict.result import BenchResult

    record = {"BenchResult": BenchResult, "SessionSettings": SessionSettings, "Comparison": Comparison,
              "BenchContext": BenchContext}[name]
    assert len(dataclasses.fields(record)) <= MAX_FIELDS[name]


def test_git_runs_from_one_module() -> None:
    runs_git = sorted(str(p.relative_to(PACKAGE)) for p, _, text in _trees()
                      if re.search(r"""\[\s*["']git["']\s*,""", text))
    assert runs_git == ["core/git.py"]


def test_a_result_is_assembled_in_one_place() -> None:
    """``BenchResult(...)`` is called only by ``BenchResult.from_samples`` (issue 33: one assembly point)."""
    builds = sorted(f"{p.relative_to(PACKAGE)}:{n.lineno}" for p, tree, _ in _trees() for n in ast.walk(tree)
                    if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "BenchResult")
    assert builds == [], f"BenchResult built outside BenchResult.from_samples: {builds}"
