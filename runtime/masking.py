"""The one rule for what is a secret in a setting or a URI, and how it is shown masked.

Plugin specs mark some parameters secret, but a secret also hides inside other
values: a TiCDC sink URI carries ``?secret-access-key=...`` or ``sasl-password=``,
a registry URL ``user:password@host``, a client property ``basic.auth.user.info``.
Everything that prints or logs a setting, a URI or an error text (run summary,
log redactor, ``dev status``, error messages) goes through this module, so one
list of names decides. Names are compared without case and without ``-``, ``_``,
``.`` (``sasl.password``, ``SASL_PASSWORD`` and ``saslPassword`` are one name).
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping
from urllib.parse import unquote

MASK = "***"

#: a name holding one of these (compacted) is secret: sasl-password, session-token, user-info, ...
_SECRET_PARTS = ("password", "passwd", "secret", "token", "credential", "userinfo", "privatekey",
                 "connectionstring", "signature", "accesskey", "accountkey", "apikey", "saskey")
#: names secret only when they are the whole name (Azure SAS ``sig``, short password names)
_SECRET_EXACT = frozenset({"sig", "pwd", "pass", "auth"})

_COMPACT = re.compile(r"[-_.\s]")
# scheme://rest-of-uri, up to whitespace or a quote/bracket that ends it in prose or repr()
_URI = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)([^\s'\"<>()\[\]{},]*)")


def is_secret_name(name: str) -> bool:
    """Whether a setting, URI query parameter or property called ``name`` holds a secret."""
    compact = _COMPACT.sub("", name).lower()
    return compact in _SECRET_EXACT or any(part in compact for part in _SECRET_PARTS)


def _split_uri(rest: str) -> tuple[str | None, str, str | None, str | None]:
    """``rest`` (after ``scheme://``) -> (userinfo-or-None, host+path, query-or-None, fragment-or-None)."""
    fragment = None
    if "#" in rest:
        rest, fragment = rest.split("#", 1)
    query = None
    if "?" in rest:
        rest, query = rest.split("?", 1)
    authority, slash, path = rest.partition("/")
    userinfo = None
    if "@" in authority:
        userinfo, authority = authority.rsplit("@", 1)
    return userinfo, authority + slash + path, query, fragment


def _masked_query(query: str) -> str:
    parts = []
    for item in query.split("&"):
        key, eq, value = item.partition("=")
        parts.append(f"{key}={MASK}" if eq and value and is_secret_name(unquote(key)) else item)
    return "&".join(parts)


def mask_uri(uri: str) -> str:
    """``uri`` with its userinfo password and secret query values replaced by ``***``.

    ``s3://b/p?access-key=A&secret-access-key=S`` -> ``s3://b/p?access-key=***&secret-access-key=***``;
    ``http://u:p@h:1`` -> ``http://u:***@h:1``; a userinfo without ``:`` (a bare token) is masked whole.
    Text that is not a URI is returned unchanged.
    """
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return uri
    userinfo, body, query, fragment = _split_uri(rest)
    out = scheme + sep
    if userinfo is not None:
        user, colon, _ = userinfo.partition(":")
        out += (f"{user}:{MASK}" if colon else MASK) + "@"
    out += body
    if query is not None:
        out += "?" + _masked_query(query)
    if fragment is not None:
        out += "#" + fragment
    return out


def mask_text(text: str) -> str:
    """``text`` (an error message, a log line) with every URI in it masked by ``mask_uri``."""
    if "://" not in text:
        return text
    return _URI.sub(lambda m: mask_uri(m.group(0)), text)


def mask_setting(name: str, value: Any) -> Any:
    """The value of setting ``name`` as it may be shown: ``***`` for a secret name, URIs masked."""
    if value is None or value == "":
        return value
    if is_secret_name(name):
        return MASK
    return mask_text(value) if isinstance(value, str) else value


def mask_settings(settings: Mapping[str, Any], secret: Iterable[str] = ()) -> dict[str, Any]:
    """A copy of ``settings`` fit for output; names in ``secret`` (a spec's secrets) are masked too."""
    forced = set(secret)
    return {k: (MASK if k in forced and v not in (None, "") else mask_setting(k, v)) for k, v in settings.items()}


def secrets_in(name: str, value: Any) -> list[str]:
    """The secret texts inside setting ``name`` (for the log redactor): the whole value of a
    secret name, else the password and secret query values of every URI in the value.
    Both the raw and the URL-decoded form are returned."""
    if value is None or value == "":
        return []
    text = str(value)
    if is_secret_name(name):
        return [text]
    if "://" not in text:
        return []
    found: list[str] = []
    for m in _URI.finditer(text):
        userinfo, _, query, _ = _split_uri(m.group(2))
        if userinfo is not None:
            _, colon, password = userinfo.partition(":")
            found.append(password if colon else userinfo)
        for item in (query or "").split("&"):
            key, eq, v = item.partition("=")
            if eq and v and is_secret_name(unquote(key)):
                found.append(v)
    return [s for f in found if f for s in {f, unquote(f)}]
