"""One redaction for every URL and DSN shown or stored (issue 46): table-driven, no password survives:
neither the secret nor any tail of it of three characters or more, and the rest (host, database,
the other parameters) is kept where it is unambiguous."""

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

#: (the secret, text holding it, what redact must return): the forms an audit found leaking (a
#: value cut at a comma, parenthesis or quote; a space, @, /, :, # or ? in a URL's password)
LEAKS = [
    # key=value DSNs: an unquoted value runs to whitespace; a quoted one (' or ", backslash escapes) is masked whole
    (f"ab,{SECRET}", f"host=db password=ab,{SECRET} dbname=perf", "host=db password=*** dbname=perf"),
    (f"ab){SECRET}", f"host=db password=ab){SECRET} dbname=perf", "host=db password=*** dbname=perf"),
    (f"ab\"{SECRET}", f'host=db password=ab"{SECRET} dbname=perf', "host=db password=*** dbname=perf"),
    (f'"{SECRET}"', f'host=db password="{SECRET}" dbname=perf', "host=db password=*** dbname=perf"),
    (f"se cret\\'x{SECRET}", f"host=db password='se cret\\'x{SECRET}' dbname=perf", "host=db password=*** dbname=perf"),
    ("se cret\\'x", "host=db password='se cret\\'x' dbname=perf", "host=db password=*** dbname=perf"),
    (f"a {SECRET}", f"host=db password='a {SECRET}", "host=db password=***"),  # an unclosed quote: to the end
    # the closing quote of a quoted DSN is kept
    (SECRET, f"PGCONN='host=db password={SECRET}' psql", "PGCONN='host=db password=***' psql"),
    # URL query: a value ends only at &, #, whitespace or the end
    (f"a'{SECRET}", f"postgresql://ci@db/x?password=a'{SECRET}", "postgresql://ci@db/x?password=***"),
    (f'a"{SECRET}', f'postgresql://ci@db/x?password=a"{SECRET}&x=1', "postgresql://ci@db/x?password=***&x=1"),
    (f"a;{SECRET}", f"https://h/x?token=a;{SECRET}#top", "https://h/x?token=***#top"),
    # URL userinfo: it runs to the last @ before the host, whatever the password holds
    (f"SEC {SECRET}", f"postgresql://ci:SEC {SECRET}@db/x", "postgresql://ci:***@db/x"),
    (f"SEC {SECRET}", f"connect to postgresql://ci:SEC {SECRET}@db:5432/x failed: timeout",
     "connect to postgresql://ci:***@db:5432/x failed: timeout"),
    (f"a b@c/{SECRET}", f"postgresql://ci:a b@c/{SECRET}@db/x", "postgresql://ci:***@db/x"),
    (f"pa@{SECRET}", f"postgresql://ci:pa@{SECRET}@db/x", "postgresql://ci:***@db/x"),
    (f"pa/{SECRET}", f"postgresql://ci:pa/{SECRET}@db/x", "postgresql://ci:***@db/x"),
    (f"pa:{SECRET}", f"postgresql://ci:pa:{SECRET}@db/x", "postgresql://ci:***@db/x"),
    (f"pa#{SECRET}", f"postgresql://ci:pa#{SECRET}@db/x", "postgresql://ci:***@db/x"),
    (f"pa?{SECRET}", f"postgresql://ci:pa?{SECRET}@db/x", "postgresql://ci:***@db/x"),
    (f"p@a/b:c#d?{SECRET}", f"'postgresql://ci:p@a/b:c#d?{SECRET}@db:5432/perf'", "'postgresql://ci:***@db:5432/perf'"),
]


@pytest.mark.parametrize(("text", "expected"), FORMS)
def test_every_form_is_masked_and_the_rest_kept(text: str, expected: str) -> None:
    assert SECRET not in redact(text)
    assert redact(text) == expected


def _tails(secret: str) -> list[str]:
    """``secret`` and each of its tails of three characters or more."""
    return [secret[i:] for i in range(len(secret) - 2)]


@pytest.mark.parametrize(("secret", "text", "expected"), LEAKS)
def test_no_character_of_a_secret_is_left(secret: str, text: str, expected: str) -> None:
    shown = redact(text)
    assert [t for t in _tails(secret) if t in shown] == []
    assert shown == expected


@pytest.mark.parametrize("text", ["postgresql://ci@db:5432/perf", "postgresql://db:5432/perf failed for ops@example.org",
                                  "postgresql://db:5432 refused", "sqlite:////tmp/h.sqlite", "sqlite:///rel/h.db",
                                  "/home/ci/history.sqlite", "a plain message: 3 benchmark(s) passed"])
def test_text_without_a_secret_is_unchanged(text: str) -> None:
    assert redact(text) == text
