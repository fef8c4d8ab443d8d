"""One redaction for every place a URL or DSN is shown or stored (issue 46): credentials are never printed.

:func:`redact` takes any text (a URL, a libpq key=value DSN, an exception's message that quotes
either, a command line) and replaces what can be a secret with ``***``:

* the password of a URL's userinfo, ``scheme://user:PASSWORD@host``: the userinfo ends at the
  **last** ``@`` (RFC 3986 §3.2.1 forbids an unencoded ``@`` or ``/`` there, yet libpq and users
  write them: ``postgresql://ci:pa@ss/w@db/perf`` hides ``pa@ss/w`` whole); a scheme written with
  one slash (``postgresql:/``) counts too;
* the value of a secret parameter, in a URL's query (``?password=…&sslpassword=…``) and in a
  key=value DSN (``host=db password='it s' dbname=x``, quoted or not): any name that contains
  ``password``, ``passwd``, ``pwd``, ``secret``, ``token`` or ``apikey``/``api_key``
  (case-insensitive), the libpq names (``password``, ``sslpassword``) and the usual ones of
  HTTP APIs among them.

It over-masks rather than leaks: text after the last ``@`` of a URL with a query that holds an
``@`` may be hidden with it. Pure: no I/O, no imports beyond ``re``.
"""

from __future__ import annotations

import re

#: What replaces a secret.
MASK = "***"

#: A parameter name whose value is a secret (in a URL query or a key=value DSN).
_SECRET_NAME = r"[A-Za-z_]*(?:password|passwd|pwd|secret|token|api_?key)[A-Za-z_]*"
#: ``name=value`` in a URL query (``?``/``&``/``;`` before it): the value runs to the next ``&``, ``;``,
#: ``#``, whitespace or quote.
_QUERY = re.compile(rf"(?i)([?&;]{_SECRET_NAME}=)[^&;#\s'\"]*")
#: ``name=value`` in a key=value DSN or on a command line (start or whitespace before it): a
#: single-quoted value (libpq: ``\'`` and ``\\`` escapes) or one up to whitespace.
_KEYWORD = re.compile(rf"(?i)((?:^|(?<=[\s,(\"']))-*{_SECRET_NAME}\s*[=:]\s*)('(?:[^'\\]|\\.)*'|[^\s,)\"']*)")
#: A URL's scheme and the start of its authority: ``scheme://`` or ``scheme:/``.
_AUTHORITY = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*:/{1,2})")


def redact(text: object) -> str:
    """``text`` (any object, as ``str``) with every URL userinfo password, secret query parameter
    and secret key=value (see the module doc) replaced by ``***``; the user name, host, port,
    database and every other part are kept (``postgresql://ci:***@db:5432/perf``)."""
    s = _redact_userinfo(str(text))
    s = _QUERY.sub(lambda m: m.group(1) + MASK, s)
    return _KEYWORD.sub(lambda m: m.group(1) + MASK, s)


def _redact_userinfo(s: str) -> str:
    """Each ``scheme://user:password@`` in ``s`` with the password masked, the userinfo ending at
    the last ``@`` before the next whitespace (a quote may be part of a password)."""
    out, pos = [], 0
    for m in _AUTHORITY.finditer(s):
        if m.start() < pos:
            continue
        start = m.end()
        end = start
        while end < len(s) and not s[end].isspace() and s[end] not in "<>":
            end += 1
        token = s[start:end]
        at = token.rfind("@")
        colon = token.find(":", 0, at) if at > 0 else -1
        if colon < 0:
            continue
        out.append(s[pos:start + colon + 1] + MASK)
        pos = start + at
    out.append(s[pos:])
    return "".join(out)
