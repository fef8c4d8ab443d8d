"""No output or file of a session holds a password (issue 46), with a real PostgreSQL server.

The store's URL carries its password in the query (``?password=``, a form libpq accepts and the
old redaction missed). A passing session records its run there; a failing one (an injected 2x
slowdown) gives a wrong password in the same form, so the store refuses it. Every line either
session printed, every file under the project (reports, baselines, worker logs), the output of
``gpuperf history runs`` and ``export`` (the store's own rows) are searched for both passwords.
Timings are scripted (tests/scripted.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pgcluster import PASSWORD
from scripted import script_timings, set_timings

pytest_plugins = ["pytester"]

BODY = """
import pytest

@pytest.mark.gpu_bench(device="cpu", counts=False)
def test_a(gpu_bench):
    gpu_bench.pedantic(sum, args=(range(10),), rounds=20, warmup_rounds=1)
"""
WRONG = "wr0ng-Pw-Zq"
RUN = ("-p", "no:cacheprovider", "--gpuperf-processes=2", "--gpuperf-max-processes=2", "--gpuperf-no-why",
       "--gpuperf-json=r.json", "--gpuperf-markdown=r.md", "-rA", "-v")


def _everything(pytester: pytest.Pytester) -> str:
    """The text of every file under the project (binary files too, as latin-1)."""
    return "\n".join(p.read_bytes().decode("latin-1") for p in Path(pytester.path).rglob("*") if p.is_file())


def test_no_output_or_file_of_a_passing_or_failing_session_holds_the_password(
        pytester: pytest.Pytester, pg, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_gpuperf.cli import main

    url = pg.url.replace(f":{PASSWORD}@", "@") + f"?password={PASSWORD}"
    pytester.makepyfile(test_bench=BODY)
    script_timings(pytester, {"ms": 1.0, "cv": 0.02, "seed": 1})
    ok = pytester.runpytest("--gpuperf-update-baselines", f"--gpuperf-history={url}", *RUN)
    ok.assert_outcomes(passed=1)
    set_timings(pytester, {"ms": 2.0, "cv": 0.02, "seed": 2})
    bad = pytester.runpytest("--gpuperf", "--gpuperf-no-ab-confirm", f"--gpuperf-history={url.replace(PASSWORD, WRONG)}",
                             *RUN)
    bad.assert_outcomes(failed=1)
    bad.stdout.fnmatch_lines(["*the run was not recorded in the history*password=***"])
    assert main(["history", "runs", "--history", url]) == 0
    assert main(["history", "export", "--history", url]) == 0
    assert main(["history", "runs", "--history", url.replace(PASSWORD, WRONG)]) == 2
    printed = capsys.readouterr()
    shown = "\n".join([ok.stdout.str(), ok.stderr.str(), bad.stdout.str(), bad.stderr.str(), printed.out,
                       printed.err, _everything(pytester)])
    assert json.loads(pytester.path.joinpath("r.json").read_text())["benchmarks"]  # the reports were written
    assert "update" in printed.out  # the run was recorded and listed
    for secret in (PASSWORD, WRONG):
        assert secret not in shown
