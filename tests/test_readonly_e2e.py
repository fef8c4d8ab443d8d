"""A project on a read-only filesystem (issue 46's "read-only folders"): a real read-only bind mount
in a private mount namespace (``unshare -m``, root only; skipped with the reason elsewhere).

An update run there fails each test whose baseline it cannot write, naming the file and the
reason, and leaves the stored baseline as it was; a compare run reads the baselines and decides
as anywhere, warning only that the history store could not be opened; ``gpuperf history runs`` and
``gpuperf changes`` read the store there and create nothing. Timings are scripted.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scripted import script_timings

pytest_plugins = ["pytester"]

BODY = """
import pytest

@pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0, device="cpu", counts=False)
def test_a(gpu_bench):
    gpu_bench(sum, range(10))
"""
ONE = ("-p", "no:cacheprovider", "--gpuperf-processes=1")


def _read_only_mount_works(folder: Path) -> str | None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return "a read-only bind mount needs root and unshare"
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind -o ro {shlex.quote(str(folder))} "
                            f"{shlex.quote(str(folder))} && ! touch {shlex.quote(str(folder / 'probe'))}"],
                           capture_output=True, text=True)
    return None if probe.returncode == 0 else f"no read-only bind mount here: {probe.stderr.strip()[:200]}"


def _run_read_only(folder: Path, *args: str, module: str = "pytest") -> subprocess.CompletedProcess:
    inner = shlex.join([sys.executable, "-m", module, *args])
    script = f"mount --bind -o ro {shlex.quote(str(folder))} {shlex.quote(str(folder))} && cd {shlex.quote(str(folder))} && {inner}"
    return subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200"})


def test_a_read_only_project_fails_the_baselines_it_cannot_write_and_still_compares(
        pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory) -> None:
    reason = _read_only_mount_works(pytester.path)
    if reason:
        pytest.skip(reason)
    pytester.makepyfile(test_bench=BODY)
    script_timings(pytester, {"ms": 1.0, "cv": 0.02, "seed": 1})
    pytester.runpytest("--gpuperf-update-baselines", *ONE).assert_outcomes(passed=1)
    (baseline,) = pytester.path.joinpath("baselines").rglob("*.json")
    before = baseline.read_bytes()
    report = tmp_path_factory.mktemp("writable") / "r.json"

    update = _run_read_only(pytester.path, "--gpuperf-update-baselines", *ONE)
    out = update.stdout + update.stderr
    assert update.returncode == 1 and "1 failed" in out, out
    assert "could not write baseline" in out and "Read-only file system" in out
    assert "INTERNALERROR" not in out and "Traceback" not in out
    assert baseline.read_bytes() == before  # untouched

    compare = _run_read_only(pytester.path, "--gpuperf", f"--gpuperf-json={report}", *ONE)
    out = compare.stdout + compare.stderr
    assert compare.returncode == 0 and "1 passed" in out, out
    assert "not recorded in the history" in out and "INTERNALERROR" not in out
    assert '"verdict": "unchanged"' in report.read_text()

    # the reading commands open the store the update run recorded, read-only (immutable: its WAL
    # cannot be made there), and create nothing
    store = pytester.path / ".gpuperf" / "history.sqlite"
    listing = sorted(p.name for p in store.parent.iterdir())
    runs = _run_read_only(pytester.path, "history", "runs", module="pytest_gpuperf")
    assert runs.returncode == 0 and "update" in runs.stdout, runs.stdout + runs.stderr
    changes = _run_read_only(pytester.path, "changes", module="pytest_gpuperf")
    assert changes.returncode == 0, changes.stdout + changes.stderr
    assert sorted(p.name for p in store.parent.iterdir()) == listing
