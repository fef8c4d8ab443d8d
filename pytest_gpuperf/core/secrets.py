"""One redaction for every place a URL or DSN is shown or stored (issue 46): credentials are never printed.

:func:`redact` takes any text (a URL, a libpq key=value DSN, an exception's message that quotes
either, a command line) and replaces what can be a secret with ``***``, the whole of it (no
character of a secret is left):

* the password of a URL's userinfo, ``scheme://user:PASSWORD@host``: the userinfo ends at the
  **last** ``@`` (RFC 3986 §3.2.1 forbids an unencoded ``@``, ``/``, ``:``, ``?`` or ``#`` there,
  yet libpq and users write them: ``postgresql://ci:pa@ss/w@db/perf`` hides ``pa@ss/w`` whole); a
  password with a space (``postgresql://ci:SEC RET@db/x``) runs on to the last ``@`` of its line; a
  scheme written with one slash (``postgresql:/``) counts too;
* the value of a secret parameter, in a URL's query (``?password=…&sslpassword=…``: the value
  ends only at ``&``, ``#``, whitespace or the end) and in a key=value DSN (``host=db
  password='it\\'s' dbname=x``: a single- or double-quoted value with backslash escapes, quotes
  and all, or an unquoted one up to whitespace): any name that contains ``password``,
  ``passwd``, ``pwd``, ``secret``, ``token`` or ``apikey``/``api_key`` (case-insensitive), the
  libpq names (``password``, ``sslpassword``) and the usual ones of HTTP APIs among them. A quote
  that ends an unquoted value is kept when it closes a quote opened before the value on its line
  (``'…?password=***'`` on a command line).

It over-masks rather than leaks: text after the last ``@`` of a URL with a query that holds an
``@`` may be hidden with it, and so may a message's words up to an ``@`` after a URL whose
authority has a ``:`` but no ``@`` before the first space (``scheme://host:5432/db`` excepted).
Pure: no I/O, no imports beyond ``re``.
"""

from __future__ import annotations

import re

#: What replaces a secret.
MASK = "***"

#: A parameter name whose value is a secret (in a URL query or a key=value DSN).
_SECRET_NAME = r"[A-Za-z_]*(?:password|passwd|pwd|secret|token|api_?key)[A-Za-z_]*"
#: ``name=value`` in a URL query (``?``/``&``/``;`` before it): the value runs to the next ``&``,
#: ``#``, whitespace or the end (a quote or comma inside it is part of it).
_QUERY = re.compile(rf"(?i)([?&;]{_SECRET_NAME}=)([^&#\s]*)")
#: ``name=value`` in a key=value DSN or on a command line (start, whitespace, ``,``, ``(`` or a
#: quote before it): a single- or double-quoted value (backslash escapes; an unclosed one runs to
#: the end) or an unquoted one up to whitespace.
_KEYWORD = re.compile(rf"(?i)((?:^|(?<=[\s,(\"']))-*{_SECRET_NAME}\s*[=:]\s*)"
                      r"('(?:[^'\\]|\\.)*(?:'|\\?$)|\"(?:[^\"\\]|\\.)*(?:\"|\\?$)|\S*)")
#: A URL's scheme and the start of its authority: ``scheme://`` or ``scheme:/``.
_AUTHORITY = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*:/{1,2})")
#: An authority without userinfo, with a port and a path, query or fragment (``db:5432/perf``): its
#: ``:`` starts a port, not a password that goes on after a space.
_HOST_PORT_PATH = re.compile(r"(?:\[[^\]\s]*\]|[^:/?#@\[\]\s]*):\d{1,5}[/?#]\S*")
_QUOTES = "'\""


def redact(text: object) -> str:
    """``text`` (any object, as ``str``) with every URL userinfo password, secret query parameter
    and secret key=value (see the module doc) replaced by ``***``; the user name, host, port,
    database and every other part are kept (``postgresql://ci:***@db:5432/perf``). Never raises."""
    s = _redact_userinfo(str(text))
    s = _QUERY.sub(_masked, s)
    return _KEYWORD.sub(_masked, s)


def _masked(m: re.Match[str]) -> str:
    """A ``name=value`` match (groups 1 and 2) with the value masked, and the closing quote kept
    that ends an unquoted value (see :func:`_closing_quote`)."""
    return m.group(1) + MASK + _closing_quote(m.string, m.start(2), m.group(2))


def _closing_quote(s: str, start: int, value: str) -> str:
    """The quote that ends ``value`` (at ``s[start:]``) when it closes a quote opened before the
    value on its line (an odd count of that quote there), else ``""``: a value quoted whole is
    masked whole."""
    if not value or value[-1] not in _QUOTES or (len(value) > 1 and value[0] == value[-1]):
        return ""
    line_start = s.rfind("\n", 0, start) + 1
    return value[-1] if s.count(value[-1], line_start, start) % 2 else ""


def _redact_userinfo(s: str) -> str:
    """Each ``scheme://user:password@`` in ``s`` with the password masked (see
    :func:`_password_span`)."""
    out, pos = [], 0
    found = list(_AUTHORITY.finditer(s))
    for i, m in enumerate(found):
        if m.start() < pos:
            continue
        limit = found[i + 1].start() if i + 1 < len(found) else len(s)
        span = _password_span(s, m.end(), limit)
        if span is None:
            continue
        out.append(s[pos:span[0]] + MASK)
        pos = span[1]
    out.append(s[pos:])
    return "".join(out)


def _password_span(s: str, start: int, limit: int) -> tuple[int, int] | None:
    """Where the password of the authority at ``s[start:]`` lies (before ``limit``, the next URL):
    from after the userinfo's first ``:`` to its **last** ``@`` before the next whitespace (a quote
    may be part of a password); when there is no ``@`` there but a ``:`` that does not start a
    port (``ci:SEC RET@db``), to the last ``@`` of the line. None: no password."""
    end = start
    while end < limit and not s[end].isspace() and s[end] not in "<>":
        end += 1
    token = s[start:end]
    at = token.rfind("@")
    if at < 0 and ":" in token and not _HOST_PORT_PATH.fullmatch(token):
        line_end = s.find("\n", start, limit)
        at = s.rfind("@", end, limit if line_end < 0 else line_end) - start
    colon = s.find(":", start, start + at) if at > 0 else -1
    return (colon + 1, start + at) if colon >= 0 else None
