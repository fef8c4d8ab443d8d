"""One redaction for every URL and DSN shown or stored (issue 46): table-driven, no password survives."""

from __future__ import annotations

import pytest

from pytest_gpuperf.core.secrets import redact

SECRET = "hunter2-XQ"

#: (text holding SECRET, what redact must return)
FORMS = [
    (f"postgresql://ci:{SECRET}@db:5432/perf", "postgresql://ci:***@db:5432/perf"),
    (f"postgresql+psycopg://ci:{SECRET}@db/perf", "postgresql+psycopg://ci:***@db/perf"),
    (f"postgres://ci:{SECRET}@db/perf", "postgres://ci:***@db/perf"),
    (f"postgresql://:{SECRET}@db/perf", "postgresql://:***@db/perf"),
    # a password with an unencoded @ or / (libpq accepts it; RFC 3986 does not)
    (f"postgresql://ci2:a@{SECRET}/w@db:5432/perf", "postgresql://ci2:***@db:5432/perf"),
    (f"postgresql://ci:{SECRET}%40x@db/perf", "postgresql://ci:***@db/perf"),
    # query parameters
    (f"postgresql://ci@db/perf?password={SECRET}", "postgresql://ci@db/perf?password=***"),
    (f"postgresql://ci@db/perf?sslmode=require&sslpassword={SECRET}&application_name=ci",
     "postgresql://ci@db/perf?sslmode=require&sslpassword=***&application_name=ci"),
    (f"postgresql://db/perf?user=a@b.example&PASSWORD={SECRET}", "postgresql://db/perf?user=a@b.example&PASSWORD=***"),
    (f"https://api.example/v1?api_key={SECRET}&q=1", "https://api.example/v1?api_key=***&q=1"),
    (f"https://ci.example/x?access_token={SECRET}", "https://ci.example/x?access_token=***"),
    # key=value DSNs (libpq), quoted or not, and a scheme written with one slash
    (f"host=db user=ci password={SECRET} dbname=perf", "host=db user=ci password=*** dbname=perf"),
    (f"host=db password='{SECRET} it\\'s' dbname=perf", "host=db password=*** dbname=perf"),
    (f"postgresql:/ci:{SECRET}@db/perf", "postgresql:/ci:***@db/perf"),
    # quoted inside a message, on a command line, in an environment listing
    (f'connection to "postgresql://ci:{SECRET}@db:5/perf" failed: timeout',
     'connection to "postgresql://ci:***@db:5/perf" failed: timeout'),
    (f"pytest --gpuperf-history 'postgresql://ci@db/x?password={SECRET}' -q",
     "pytest --gpuperf-history 'postgresql://ci@db/x?password=***' -q"),
    (f"PGPASSWORD={SECRET} pytest", "PGPASSWORD=*** pytest"),
    (f"--password={SECRET} --x", "--password=*** --x"),
]


@pytest.mark.parametrize(("text", "expected"), FORMS)
def test_every_form_is_masked_and_the_rest_kept(text: str, expected: str) -> None:
    assert SECRET not in redact(text)
    assert redact(text) == expected


@pytest.mark.parametrize("text", ["postgresql://ci@db:5432/perf", "sqlite:////tmp/h.sqlite", "sqlite:///rel/h.db",
                                  "/home/ci/history.sqlite", "a plain message: 3 benchmark(s) passed"])
def test_text_without_a_secret_is_unchanged(text: str) -> None:
    assert redact(text) == text
