"""The A/B worker's boot (``pytest_gpuperf.ab.run._BOOT``) in a project whose config makes every
warning an error (pydantic-core's ``filterwarnings = ['error']``): the worker imports the plugin
before pytest starts, and pytest's "Module already imported so cannot be rewritten;
pytest_gpuperf" (raised at config time for a plugin distribution that lists the package) stopped
every A/B worker there (issue 45's study: the A/B against the baselines' commit never ran)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest_gpuperf
from pytest_gpuperf.ab.run import _BOOT

ROOT = Path(pytest_gpuperf.__file__).resolve().parents[1]


def test_an_ab_worker_starts_where_warnings_are_errors(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    project.joinpath("pytest.ini").write_text("[pytest]\nfilterwarnings = error\n")
    project.joinpath("test_x.py").write_text("def test_x():\n    pass\n")
    # a plugin distribution that lists the package, as a regular (not editable) install's does:
    # pytest marks its modules for assertion rewriting at start-up (same entry-point name as the
    # real one, so the plugin is not registered twice)
    dist = tmp_path / "site" / "pytest_gpuperf_listed-0.dist-info"
    dist.mkdir(parents=True)
    dist.joinpath("METADATA").write_text("Metadata-Version: 2.1\nName: pytest-gpuperf-listed\nVersion: 0\n")
    dist.joinpath("entry_points.txt").write_text("[pytest11]\ngpuperf = pytest_gpuperf.plugin\n")
    dist.joinpath("RECORD").write_text("pytest_gpuperf/__init__.py,,\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), str(ROOT)]),
               GPUPERF_AB_WORKER=json.dumps({"plugin_path": str(ROOT)}))
    proc = subprocess.run([sys.executable, "-c", _BOOT, "-q", "-p", "no:cacheprovider"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cannot be rewritten" not in proc.stdout + proc.stderr
