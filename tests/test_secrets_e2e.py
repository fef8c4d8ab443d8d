"""No output or file of a session holds a password (issue 46), with a real PostgreSQL server.

A passing session records its run in a store whose URL's userinfo password holds an unencoded
``@`` and ``/`` (libpq's users write them; the store reads the password whole); a failing one (an
injected 2x slowdown) gives a wrong password in the query (``?password=``, a form libpq accepts and
the old redaction missed), so the store refuses it. Every line either session printed, every file
under the project (reports, baselines, worker logs, the dashboard's site), and the output of
``gpuperf history runs`` and ``export`` (the store's own rows), of ``gpuperf dashboard`` and of
the commands given a wrong password in either form or a libpq key=value DSN (refused) are searched
for every password and the pieces of the one with ``@`` and ``/``. Timings are scripted
(tests/scripted.py).
"""

from __future__ import annotations

import importlib.util
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
#: a userinfo password with an unencoded @ and / (the right one, and a wrong one)
AT_PW, WRONG_AT = "at@Pw/sl-8Kd", "wr@Ng/at-5Vx"
RUN = ("-p", "no:cacheprovider", "--gpuperf-processes=2", "--gpuperf-max-processes=2", "--gpuperf-no-why",
       "--gpuperf-json=r.json", "--gpuperf-markdown=r.md", "-rA", "-v")


def _everything(pytester: pytest.Pytester) -> str:
    """The text of every file under the project (binary files too, as latin-1)."""
    return "\n".join(p.read_bytes().decode("latin-1") for p in Path(pytester.path).rglob("*") if p.is_file())


def _role_url(pg, password: str) -> str:
    """The URL of the role ``gpuci`` (created with :data:`AT_PW`) with ``password`` unencoded in its userinfo."""
    return f"postgresql://gpuci:{password}@127.0.0.1:{pg.port}/postgres"


def _create_role(pg) -> None:
    """The role ``gpuci`` whose password is :data:`AT_PW` (in-process: no psql started)."""
    import psycopg

    with psycopg.connect(pg.url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE gpuci LOGIN SUPERUSER PASSWORD '{AT_PW}'")


def _pieces(secret: str) -> list[str]:
    """``secret`` and its tails after its ``@`` and after its ``/`` (what a URL parser that cut it there
    would show as a host or a database)."""
    return [secret, secret.split("@", 1)[1], secret.rsplit("/", 1)[1]]


def test_no_output_or_file_of_a_passing_or_failing_session_holds_the_password(
        pytester: pytest.Pytester, pg, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_gpuperf.cli import main

    _create_role(pg)
    url = pg.url.replace(f":{PASSWORD}@", "@") + f"?password={PASSWORD}"
    dsn = f"host=127.0.0.1 port={pg.port} user=postgres password={PASSWORD} dbname=postgres"
    pytester.makepyfile(test_bench=BODY)
    script_timings(pytester, {"ms": 1.0, "cv": 0.02, "seed": 1})
    ok = pytester.runpytest("--gpuperf-update-baselines", f"--gpuperf-history={_role_url(pg, AT_PW)}", *RUN)
    ok.assert_outcomes(passed=1)
    set_timings(pytester, {"ms": 2.0, "cv": 0.02, "seed": 2})
    bad = pytester.runpytest("--gpuperf", "--gpuperf-no-ab-confirm", f"--gpuperf-history={url.replace(PASSWORD, WRONG)}",
                             *RUN)
    bad.assert_outcomes(failed=1)
    bad.stdout.fnmatch_lines(["*the run was not recorded in the history*password=***"])
    assert main(["history", "runs", "--history", url]) == 0  # the same store, the password in the query
    assert main(["history", "export", "--history", _role_url(pg, AT_PW)]) == 0
    assert main(["history", "runs", "--history", url.replace(PASSWORD, WRONG)]) == 2
    assert main(["history", "runs", "--history", _role_url(pg, WRONG_AT)]) == 2
    site = pytester.path / "site"
    dashboard = main(["dashboard", "--history", _role_url(pg, AT_PW), "--out", str(site)])
    assert dashboard == (0 if importlib.util.find_spec("plotly") else 2)  # 2: plotly missing, named
    assert main(["dashboard", "--history", dsn, "--out", str(site)]) == 2  # a key=value DSN is refused, named
    printed = capsys.readouterr()
    shown = "\n".join([ok.stdout.str(), ok.stderr.str(), bad.stdout.str(), bad.stderr.str(), printed.out,
                       printed.err, _everything(pytester)])
    assert json.loads(pytester.path.joinpath("r.json").read_text())["benchmarks"]  # the reports were written
    assert "update" in printed.out  # the run was recorded and listed
    assert "password authentication failed" in printed.err  # both wrong passwords reached the server
    assert "key=value connection string" in printed.err and "password=***" in printed.err
    assert dashboard != 0 or (site / "index.html").is_file()
    for secret in (PASSWORD, WRONG, *_pieces(AT_PW), *_pieces(WRONG_AT)):
        assert secret not in shown
