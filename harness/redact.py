"""Secret redaction of tool results, before the agent, the guards or any store sees them.

Evidence is whatever the backends hold, and logs, documents and rows hold credentials: a
connection string with its password, ``api_key=sk-live-…`` in a debug line, a bearer token in
a dumped header. :func:`redact` replaces each one by a marker that names its kind and keeps what
identifies it (``password=[REDACTED:password]``, ``Authorization: Bearer [REDACTED:token]``,
``mysql://app:[REDACTED:password]@db``), so the line still reads as evidence and a quote of it
still verifies: the boundary redacts the raw result once, and the canonical invocation the
guards check quotes against *is* the redacted result.

Recognised: credentials in URLs; ``key=value``, ``key: value`` and JSON ``"key": "value"``
(quoted, escaped-quoted or bare) where the key names a secret; a mapping's value under such a
key; a table's cells under such a column (``columns`` + ``rows``); bearer tokens; PEM private
key blocks; AWS access key ids (and a 40-character secret beside one); GitHub, Slack, Google and
OpenAI/Stripe-style keys; JWTs. What is not: a secret with no shape and no name (a password
alone on a line), which no pattern can tell from any other word.

A module of patterns rather than a library: the secret scanners for Python (detect-secrets and
the like) find secrets in source files line by line and report them, they do not rewrite
structured values in place, and their entropy detectors flag exactly the commit ids and request
ids that evidence is made of.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any

import orjson

__all__ = ["MARKER", "is_secret_key", "redact", "redact_text"]

#: ``[REDACTED:<kind>]``
MARKER = "[REDACTED:{}]"

# --- key names ------------------------------------------------------------------------------

#: a key whose last word is one of these names a secret (``db_password``, ``accessToken``)
_SECRET_WORDS = {
    "password": "password", "passwd": "password", "pwd": "password", "pass": "password",
    "passphrase": "password", "secret": "secret", "token": "token", "apikey": "api_key",
    "accesskey": "access_key", "privatekey": "private_key", "secretkey": "secret_key",
    "authorization": "authorization", "credential": "credentials", "credentials": "credentials",
}  # fmt: skip
#: ... or whose last two words are one of these (``api_key``, ``X-Api-Key``, ``client_secret``)
_SECRET_PAIRS = {
    "apikey": "api_key", "accesskey": "access_key", "privatekey": "private_key", "secretkey": "secret_key",
    "signingkey": "secret_key", "encryptionkey": "secret_key", "masterkey": "secret_key", "authkey": "api_key",
    "passwordhash": "password", "passwordsalt": "password",
}  # fmt: skip
_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")

#: values under a secret's name that are not secrets (``using password: YES``, ``token=null``)
_HARMLESS = frozenset(
    {"", "yes", "no", "true", "false", "null", "none", "nil", "undefined", "unset", "set", "empty",
     "missing", "required", "invalid", "expired", "present", "absent", "redacted", "hidden", "masked"}
)  # fmt: skip


@functools.lru_cache(maxsize=4096)
def _secret_kind(key: str) -> str | None:
    words = [w.lower() for w in _WORDS.findall(key)]
    if not words or words == ["pass"]:  # "pass: 3" is a test count; "db_pass" is a password
        return None
    if len(words) >= 2 and (pair := _SECRET_PAIRS.get(words[-2] + words[-1])):
        return pair
    return _SECRET_WORDS.get(words[-1])


def is_secret_key(key: str) -> bool:
    """Whether a field, column or parameter of this name holds a secret.

    The key's last word decides (``db_password``, ``accessToken``, ``X-Api-Key``), so a key
    that merely mentions one does not (``token_count``, ``password_reset_requested``)."""
    return _secret_kind(key) is not None


#: a value under a secret's name that refers to one rather than being one: a path (``PWD=/home/app``
#: in sudo's lines) or a Kubernetes ``namespace/name`` (``ExternalSecret=billing/renewal-db``)
_PATH = re.compile(r"~?/[\w./-]*")
_KUBERNETES_NAME = re.compile(r"[a-z0-9][a-z0-9.-]*/[a-z0-9][a-z0-9.-]*")


def _harmless(value: str, kind: str) -> bool:
    plain = value.strip().strip("\"'").strip("\\").strip("\"'")
    if plain.lower() in _HARMLESS or set(plain) <= set("*x.-<>[]#") or _PATH.fullmatch(plain):
        return True
    return kind != "password" and _KUBERNETES_NAME.fullmatch(plain) is not None


# --- shapes ---------------------------------------------------------------------------------

_PEM = re.compile(
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    re.DOTALL,
)
# scheme://user:password@host (also redis://:password@host)
_URL_CREDENTIALS = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/?#@\"'<>]*:)(?P<secret>[^\s/?#@\"'<>]+)@")
_NAMES = (
    r"pass(?:word|wd|phrase)?|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|secret[_-]?key"
    r"|signing[_-]?key|encryption[_-]?key|master[_-]?key|auth[_-]?key|authorization|credentials?"
)
_SCHEMES = r"(?:bearer|basic|token|digest|negotiate)\s+"
# a key ending in a secret's name, an optional (escaped) closing quote, = or :, then the value:
# escaped-quoted, quoted or bare (a bare one may start with its scheme: "Authorization: Bearer abc")
_KEY_VALUE = re.compile(
    rf"(?P<key>(?<![\w.-])[\w.-]*?(?:{_NAMES}))(?P<close>\\?[\"'])?(?P<sep>\s*(?::=|[:=])\s*)"
    r"(?P<value>\\\"(?:(?!\\\").){0,4000}\\\"|\"(?:[^\"\\\n]|\\.){0,4000}\"|'(?:[^'\\\n]|\\.){0,4000}'"
    rf"|(?!(?:{_SCHEMES})?\[REDACTED:)(?:{_SCHEMES})?[^\s\"'&,;}}\])<>]+)",
    re.IGNORECASE,
)
_BEARER = re.compile(r"(?P<head>\bbearer\s+)(?P<secret>(?!\[REDACTED:)[A-Za-z0-9._~+/=-]{8,})", re.IGNORECASE)
# long-term (AKIA) and temporary (ASIA) access key ids; the other AWS id prefixes name users,
# roles and policies, which are not secrets
_AWS_KEY_ID = re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")
# a 40-character secret access key, recognised only beside a key id (alone it could be any id)
_AWS_SECRET = re.compile(
    r"(?<![A-Za-z0-9/+])(?=[A-Za-z0-9/+]*[A-Z])(?=[A-Za-z0-9/+]*[a-z])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"
)
_GITHUB = re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b")
_SLACK = re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")
_GOOGLE = re.compile(r"\bAIza[0-9A-Za-z_-]{35}")
# sk-…, sk-live-…, sk-proj-…, sk_live_…, rk_test_…: at least 16 more characters, one of them a digit
_SK = re.compile(r"\b(?:sk|rk)[-_](?:(?:live|test|proj|ant)[-_])?(?=[A-Za-z_-]*\d)[A-Za-z0-9_-]{16,}")
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]*")


_NEXT_KEY = re.compile(r"[\w.-]+[:=]")


def _key_value(match: re.Match[str]) -> str:
    kind = _secret_kind(match["key"])
    value = match["value"]
    if kind is None or _harmless(value, kind):
        return match[0]
    if match["sep"][-1:].isspace() and _NEXT_KEY.match(value):
        return match[0]  # "password= secret=x": the key has no value, the next key begins
    head = match["key"] + (match["close"] or "") + match["sep"]
    for quote in ('\\"', '"', "'"):
        if len(value) >= 2 * len(quote) and value.startswith(quote) and value.endswith(quote):
            return head + quote + MARKER.format(kind) + quote
    scheme, _, rest = value.partition(" ")
    if rest.strip() and scheme.lower() in ("bearer", "basic", "token", "digest", "negotiate"):
        return head + scheme + " " + MARKER.format(kind)
    return head + MARKER.format(kind)


def _sub(pattern: re.Pattern[str], replacement: str | Callable[[re.Match[str]], str]) -> Callable[[str], str]:
    return lambda text: pattern.sub(replacement, text)


def _aws(text: str) -> str:
    if not _AWS_KEY_ID.search(text):
        return text
    text = _AWS_KEY_ID.sub(MARKER.format("aws_access_key_id"), text)
    return _AWS_SECRET.sub(MARKER.format("aws_secret_access_key"), text)


#: (gate, literals, rule): a rule runs only on a text whose lowercase form holds its gate, a
#: character every match contains, and one of its literals. Python's regex engine is slow at
#: alternations and nearly every evidence string holds no literal; the search for one character
#: (memchr) is some fifty times faster than the search for a word.
_Rules = tuple[tuple[str, tuple[str, ...], Callable[[str], str]], ...]
_KEY_VALUE_RULE = _sub(_KEY_VALUE, _key_value)
#: What every match of ``_KEY_VALUE`` contains, in lower case: a secret's name, then (an optional
#: closing quote and) ``=`` or ``:``. One search of the whole result for it is far cheaper than the
#: full pattern on each of its strings.
_KEY_VALUE_LITERALS = ("pass", "pwd", "secret", "token", "key", "authorization", "credential")
#: What follows a secret's name in every match of ``_KEY_VALUE`` — the rest of the name
#: ("word" of "password"), an optional closing quote, then ``=`` or ``:`` — and more besides: in a
#: value's JSON text a quote, a backslash and control characters are escaped.
_AFTER_NAME = re.compile(r"[a-z]{0,6}(?:\\\\)?\\?[\"']?(?:\s|\\[nrtfb]|\\u00[01][0-9a-f])*[:=]")


def _may_hold_key_value(low: str) -> bool:
    """Whether lower-case ``low`` may hold a match of ``_KEY_VALUE``: a secret's name followed by
    ``=`` or ``:``. Each name's occurrences are found by ``str.find`` and only what follows them
    is matched: far cheaper than any pattern over the whole text, and a superset of its matches."""
    for literal in _KEY_VALUE_LITERALS:
        at = low.find(literal)
        while at != -1:
            if _AFTER_NAME.match(low, at + len(literal)):
                return True
            at = low.find(literal, at + 1)
    return False


_RULES: _Rules = (
    ("-", ("-----begin",), _sub(_PEM, MARKER.format("private_key"))),
    ("@", ("://",), _sub(_URL_CREDENTIALS, lambda m: m["head"] + MARKER.format("password") + "@")),
    ("", _KEY_VALUE_LITERALS, _KEY_VALUE_RULE),
    ("", ("bearer",), _sub(_BEARER, lambda m: m["head"] + MARKER.format("token"))),
    ("", ("akia", "asia"), _aws),
    ("_", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"), _sub(_GITHUB, MARKER.format("github_token"))),
    ("-", ("xox",), _sub(_SLACK, MARKER.format("slack_token"))),
    ("", ("aiza",), _sub(_GOOGLE, MARKER.format("google_api_key"))),
    ("", ("sk-", "sk_", "rk-", "rk_"), _sub(_SK, MARKER.format("api_key"))),
    (".", ("eyj",), _sub(_JWT, MARKER.format("jwt"))),
)


def _active(low: str, rules: _Rules = _RULES) -> _Rules:
    return tuple(rule for rule in rules if rule[0] in low and any(literal in low for literal in rule[1]))


def _apply(text: str, rules: _Rules) -> str:
    if not rules:
        return text
    for _, _, rule in _active(text.lower(), rules):
        text = rule(text)
    return text


def redact_text(text: str) -> str:
    """The text with every secret of a recognised shape replaced by ``[REDACTED:<kind>]``.

    Idempotent: a redacted text is returned unchanged."""
    return _apply(text, _RULES)


def redact(value: Any) -> Any:
    """A JSON-like value with its secrets redacted: every string by :func:`redact_text`, the
    value under a mapping key that names a secret, and the cells of a table (a mapping with
    ``columns`` and ``rows``) under a column that does. Other values are returned as they are
    (the same objects when nothing changed)."""
    if type(value) is str:
        return redact_text(value)
    # The rules are chosen once for the whole value, from its JSON text (orjson's, fast) or else
    # its strings joined: most results need none of them, and then nothing is walked string by
    # string.
    try:
        low = orjson.dumps(value).decode().lower()
        named = _names_a_secret(value)
    except (TypeError, orjson.JSONEncodeError):
        strings: list[str] = []
        named = _strings(value, strings)
        low = "\n".join(strings).lower()
    rules = _active(low)
    if low.isascii() and not _may_hold_key_value(low):
        # A "key" that is a cache key: no name of a secret is followed by = or :. (The gate is
        # a case-sensitive search of the lower-cased text, so only for ASCII text: the pattern
        # ignores case the Unicode way, where "ſ" is an "s".)
        rules = tuple(rule for rule in rules if rule[2] is not _KEY_VALUE_RULE)
    return _Redactor(rules).value(value) if rules or named else value


def _names_a_secret(value: Any) -> bool:
    """Whether a mapping key, or a column of a table, in ``value`` names a secret."""
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is dict or isinstance(item, Mapping):
            for key, inner in item.items():
                if type(key) is str and _secret_kind(key) is not None:
                    return True
                if type(inner) is not str and isinstance(inner, Mapping | list | tuple):
                    stack.append(inner)
            columns = item.get("columns")
            if isinstance(columns, list | tuple) and any(isinstance(c, str) and _secret_kind(c) for c in columns):
                return True
        elif type(item) is list or type(item) is tuple:
            stack.extend(i for i in item if type(i) is not str and isinstance(i, Mapping | list | tuple))
    return False


def _strings(value: Any, out: list[str]) -> bool:
    """Collect the strings of ``value``; whether a mapping key names a secret."""
    kind = type(value)
    if kind is str:
        out.append(value)
    elif kind is dict or isinstance(value, Mapping):
        named = False
        for key, item in value.items():
            named = _strings(item, out) or named or (type(key) is str and _secret_kind(key) is not None)
        if named or "columns" not in value:
            return named
        columns = value["columns"]
        return isinstance(columns, list | tuple) and any(isinstance(c, str) and _secret_kind(c) for c in columns)
    elif kind is list or kind is tuple:
        named = False
        for item in value:
            named = _strings(item, out) or named
        return named
    return False


class _Redactor:
    def __init__(self, rules: _Rules) -> None:
        self._rules = rules

    def value(self, value: Any) -> Any:
        kind = type(value)
        if kind is str:
            return _apply(value, self._rules)
        if kind is dict or isinstance(value, Mapping):
            return self._mapping(value)
        if kind is list or kind is tuple:
            items = [self.value(item) for item in value]
            return value if all(a is b for a, b in zip(items, value, strict=True)) else kind(items)
        return value

    def _mapping(self, mapping: Mapping[Any, Any]) -> Mapping[Any, Any]:
        out: dict[Any, Any] = {}
        changed = False
        for key, item in mapping.items():
            secret = _secret_kind(key) if type(key) is str else None
            new = self._masked(item, secret) if secret is not None else self.value(item)
            changed = changed or new is not item
            out[key] = new
        columns, rows = out.get("columns"), out.get("rows")
        if isinstance(columns, list | tuple) and isinstance(rows, list | tuple):
            kinds = [_secret_kind(c) if isinstance(c, str) else None for c in columns]
            if any(kinds):
                out["rows"] = [self._masked_row(row, kinds) for row in rows]
                changed = True
        return out if changed else mapping

    def _masked(self, value: Any, kind: str) -> Any:
        """The value under a secret's name: a scalar becomes the marker, a structure is redacted."""
        if value is None or isinstance(value, bool) or (isinstance(value, str) and _harmless(value, kind)):
            return value
        if isinstance(value, str | int | float):
            return MARKER.format(kind)
        return self.value(value)

    def _masked_row(self, row: Any, kinds: list[str | None]) -> Any:
        if not isinstance(row, list | tuple):
            return row
        out = list(row)
        for i, kind in enumerate(kinds[: len(out)]):
            if kind is not None:
                out[i] = self._masked(out[i], kind)
        return out
