"""Parsing log files: one :class:`ParsedLine` per entry, or a :class:`LineError` per bad line.

JSON lines with the usual field names (Kubernetes Event objects too, see
:func:`_kubernetes_event`), and the common plain-text formats: ISO-8601 first
(``2026-11-30T10:02:00Z ERROR payment-service …``, ``2026-11-30 10:02:00,123 [payment-service]
ERROR …``), Monolog (``[2026-11-30 10:02:00] payment-service.ERROR: …``), syslog (RFC 3164
``Nov 30 10:02:00 host service[123]: …`` and RFC 5424) and logfmt (``ts=… level=… service=…
msg="…"``). Levels are normalised to the names of :mod:`harness.logs` and timestamps to aware
UTC. Lines that continue an entry (stack traces) are folded into it. A line that cannot be
parsed is a :class:`LineError`, never an exception.

A line that states no level (plain container output, ``print``, a JSON line without a level
field) gets the level its content shows (:func:`infer_level`): ``[Errno 28] No space left on
device`` is an error whatever wrote it, and a stack trace folded into an entry is one too. Such
an entry carries ``attributes["level_inferred"] = True``, so it stays told apart from a level the
line stated; a stated level is never changed.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, Protocol

from harness.logs import LEVEL_ALIASES, LEVELS, workload_of
from knowledge.models import LogEntry

__all__ = [
    "LEVEL_INFERRED",
    "MAX_LINE_BYTES",
    "MAX_MESSAGE_CHARS",
    "UNKNOWN_SERVICE",
    "LineError",
    "ParsedLine",
    "Readable",
    "infer_level",
    "normalise_level",
    "open_log",
    "parse_file",
    "parse_line",
    "parse_stream",
]

#: The service of a line that names none, when the caller gives no default.
UNKNOWN_SERVICE = "unknown"

#: Lines longer than this (in bytes in a file, characters for :func:`parse_line`) are refused,
#: unless the reader of a file sets its own bound (``manage.py ingest_logs``: ``LOG_MAX_LINE_BYTES``).
MAX_LINE_BYTES = 256 * 1024
#: Longer messages are cut to this many characters (the original length is kept in attributes).
MAX_MESSAGE_CHARS = 16 * 1024
_SERVICE_CHARS = LogEntry._meta.get_field("service").max_length or 100
_MIN_TS = datetime(1970, 1, 1, tzinfo=UTC)
_MAX_TS = datetime(2999, 12, 31, 23, 59, 59, tzinfo=UTC)

#: Level words as log files write them: the names and aliases every source knows
#: (:mod:`harness.logs`), and what particular formats add (log4j and java.util.logging,
#: syslog's severities, Python's ``information``…).
#: short level marks, taken for a level only in capitals or marked off (``[INF]``, ``dbug:``):
#: nats-server's ``[INF]``/``[WRN]``/``[TRC]``/``[FTL]``, .NET's ``dbug``/``trce``
_MARKS = {**dict.fromkeys(("trc", "dbug", "trce"), "DEBUG"), "inf": "INFO", "wrn": "WARN", "ftl": "FATAL"}
_LEVEL_WORDS = {
    **{name.lower(): name for name in LEVELS},
    **{alias.lower(): name for alias, name in LEVEL_ALIASES.items()},
    **dict.fromkeys(("dbg", "verbose", "fine", "finer", "finest"), "DEBUG"),
    **dict.fromkeys(("information", "informational", "notice"), "INFO"),
    # three- and four-letter marks: nats-server's ``[INF]``/``[WRN]``/``[TRC]``/``[FTL]``, .NET's ``dbug``/``trce``
    **_MARKS,
    "severe": "ERROR",
    "log": "INFO",  # PostgreSQL's level of its ordinary messages
    **dict.fromkeys(("note", "system"), "INFO"),  # MySQL's
    **dict.fromkeys(("crit", "panic", "alert", "emerg", "emergency"), "FATAL"),
}
# syslog severities 0–7 (the PRI value modulo 8)
_SYSLOG_SEVERITY = ("FATAL", "FATAL", "FATAL", "ERROR", "WARN", "INFO", "INFO", "DEBUG")

#: The attribute that marks an entry whose level was read from its content, not stated.
LEVEL_INFERRED = "level_inferred"

# What a failure reads like, whatever wrote it, most severe first.
_FATAL_CONTENT = re.compile(
    r"\b(fatal|panic(ked)?|segmentation\s+fault|segfault|core\s+dumped|oomkilled|oom[- ]kill(ed|er)?|"
    r"out\s+of\s+memory)\b",
    re.IGNORECASE,
)
_ERROR_CONTENT = re.compile(
    r"Traceback \(most recent call last\)|\[Errno\s+\d+\]|"
    # exception and error class names: NameResolutionError, java.net.ConnectException, OSError
    r"\b(?:[a-z_$][\w$]*\.)*[A-Z][\w$]*(?:Error|Exception)\b|"
    r"\b(?:ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENOTFOUND|ENOSPC|ENOENT|EACCES|EPERM|EPIPE|EHOSTUNREACH|"
    r"ENETUNREACH|EAI_AGAIN|EMFILE|ENOMEM|EADDRINUSE|EROFS|EDQUOT)\b|"
    r"\b(?:refused|denied|forbidden|undefined|expired|exceeded|unreachable|killed|no\s+space|"
    r"no\s+such\s+(?:file|host|container|device)|not\s+(?:found|permitted)|cannot|can't|unable\s+to|"
    r"could\s+not|couldn't|failed|failure|timed\s+out|timeout(?!\s*[=:]?\s*\d))\b|"
    r"\bexit(?:ed)?\s+(?:with\s+)?(?:code|status)?\s*[1-9]\d*\b|"
    # something ran out: a full table or queue, what is dropped or turned away for it
    r"\b(?:is|are|table|queue|buffer|disk|volume|partition|pool)\s+full\b|\bexhausted\b|\boverflow(?:ed|ing)?\b|"
    r"\bdropp(?:ing|ed)\s+(?:\w+\s+)?(?:packets?|messages?|connections?|requests?|events?|frames?|spans?)\b|"
    r"\b(?:rejected|evicted|throttled|unavailable|corrupt(?:ed)?)\b|"
    # an access log's server error: "GET /api HTTP/1.1" 502
    r"\bHTTP/[\d.]+\"\s+5\d\d\b|"
    # the word error, but not "no errors", "0 errors", "error_count=0", "errors: 0"
    r"(?<!\bno\s)(?<!\b0\s)(?<!without\s)\berrors?\b(?!\s*[=:]\s*0\b)(?![_-])",
    re.IGNORECASE,
)
_WARN_CONTENT = re.compile(r"\b(warning|deprecated|retrying|alarm)\b", re.IGNORECASE)


def infer_level(text: str) -> str | None:
    """The level a message shows by its content, for a line that states none: FATAL for a panic,
    a fatal error or a process killed for memory; ERROR for a traceback, an exception or errno
    name, something refused, denied, undefined, expired, out of space, killed, timed out or failed,
    a non-zero exit code, something full, exhausted or dropped for it; WARN for a warning, a
    deprecation, a retry or an alarm; else ``None``."""
    if _FATAL_CONTENT.search(text):
        return "FATAL"
    if _ERROR_CONTENT.search(text):
        return "ERROR"
    if _WARN_CONTENT.search(text):
        return "WARN"
    return None


def normalise_level(value: object) -> str | None:
    """``DEBUG``/``INFO``/``WARN``/``ERROR``/``FATAL`` for a level word or number, else ``None``.

    Words are matched case-insensitively (``warning`` → WARN, ``err`` → ERROR, ``critical``,
    ``crit``, ``panic``, ``alert``, ``emerg`` → FATAL, ``trace`` → DEBUG, ``notice`` → INFO);
    numbers follow the pino/bunyan scale (10 trace … 60 fatal).
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        word = value.strip().strip("[]<>():").lower()
        if word.isdigit() and len(word) <= 3:
            return normalise_level(int(word))
        return _LEVEL_WORDS.get(word)
    if isinstance(value, int | float) and math.isfinite(value) and 10 <= value <= 60:
        return LEVELS[max(int(value) // 10 - 2, 0)]
    return None


@dataclass(frozen=True, slots=True)
class ParsedLine:
    """One log entry as parsed: aware-UTC time, service, normalised level, message, the rest."""

    ts: datetime
    service: str
    level: str
    message: str
    attributes: Mapping[str, Any] = field(default_factory=dict)
    #: the line's number in its file (1-based; 0 from :func:`parse_line`)
    line_number: int = 0
    #: following lines folded into this entry (a stack trace), kept as ``attributes["continuation"]``
    continued: int = 0
    #: whether the line stated its level (else it is what its content shows, or INFO)
    level_stated: bool = True
    #: an entry the line implies besides its own: the first time a counted event happened
    echo: bool = False


@dataclass(frozen=True, slots=True)
class LineError:
    """A line that could not be parsed: where it is, why, and its beginning."""

    line_number: int
    reason: str
    excerpt: str = ""
    source: str = ""


class _Unparsable(ValueError):
    """Raised inside the parsers with the reason a line is refused."""


def parse_line(text: str, *, default_service: str = UNKNOWN_SERVICE, now: datetime | None = None) -> ParsedLine | None:
    """Parse one log line, or ``None`` when it is blank or in no format this module knows.

    ``default_service`` is the service of a line that names none; ``now`` (default: the current
    time) supplies the year of syslog timestamps, which have none. Never raises.
    """
    result = _parse(text, default_service=default_service, now=now)
    return result if isinstance(result, ParsedLine) else None


def parse_file(
    path: str | Path, *, default_service: str = UNKNOWN_SERVICE, now: datetime | None = None
) -> Iterator[ParsedLine | LineError]:
    """The entries of a log file (``.gz`` is decompressed), and a :class:`LineError` per bad line.

    Blank lines are skipped. Lines that continue the previous entry (indented lines, ``Caused
    by:``, ``Traceback …``, ``… 12 more``, exception class lines) are folded into it.
    """
    with open_log(path) as stream:
        yield from parse_stream(stream, default_service=default_service, now=now, source=str(path))


def _parse(
    text: str, *, default_service: str, now: datetime | None, max_chars: int = MAX_LINE_BYTES
) -> ParsedLine | str:
    """A parsed line, or the reason it could not be parsed."""
    try:
        if len(text) > max_chars:
            return f"line is longer than {max_chars} characters"
        line = text.strip().lstrip("\ufeff")
        if not line:
            return "blank line"
        if _looks_binary(line):
            return "binary data"
        return _parse_text(line, default_service or UNKNOWN_SERVICE, now or datetime.now(UTC))
    except _Unparsable as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - one bad line must never stop an ingest
        return f"unexpected {type(exc).__name__}"


_BAD_CHARS = re.compile(r"[\x00-\x08\x0b-\x1f\ufffd]")


def _looks_binary(line: str) -> bool:
    if line.isprintable():
        return False
    if "\x00" in line:
        return True
    bad = len(_BAD_CHARS.findall(line))
    return bad > 3 and bad > len(line) * 0.1


#: ``kubectl logs --prefix``: ``[pod/checkout-api-7d9f8b6c5d-xk2p9/app] <the line>``
_KUBECTL_PREFIX = re.compile(r"^\[pod/(?P<pod>[^/\]\s]+)/(?P<container>[^\]\s]+)\]\s+(?P<rest>\S.*)$", re.S)


def _parse_text(line: str, default_service: str, now: datetime) -> ParsedLine:
    if line.startswith("{"):
        return _from_json(line, default_service)
    if (prefix := _KUBECTL_PREFIX.match(line)) is not None:
        inner = _parse_text(prefix["rest"], workload_of(prefix["pod"]), now)
        return replace(inner, attributes={**inner.attributes, "pod": prefix["pod"], "container": prefix["container"]})
    for parser in (_from_monolog, _from_ruby, _from_rfc5424, _from_syslog, _from_klog, _from_redis, _from_timed_layout):
        parsed = parser(line, default_service, now)
        if parsed is not None:
            return parsed
    parsed = _from_iso(line, default_service)
    if parsed is not None:
        return parsed
    fields = _logfmt(line)
    if fields is not None:
        return _from_fields(fields, default_service)
    raise _Unparsable("unrecognised format")


# JSON and logfmt share the field names.
_TS_KEYS = ("timestamp", "@timestamp", "ts", "time", "datetime")
_SERVICE_KEYS = ("service", "service.name", "app", "kubernetes.container_name")
_ERROR_KEYS = ("error", "err", "error.message", "exception")
#: a logger names the service only when neither the line nor its file does (``logger`` of a
#: Java or Go program is a class or component inside it)
_LOGGER_KEYS = ("logger", "logger_name")
_LEVEL_KEYS = ("level", "severity", "lvl", "log.level", "levelname", "loglevel")
#: (``content`` is go-zero's, and read only when none of the others is there)
_MESSAGE_KEYS = ("message", "msg", "log", "event", "content")


# NaN/Infinity are kept as strings: they are not JSON, and MariaDB refuses them.
_JSON = json.JSONDecoder(parse_constant=str)


def _from_json(line: str, default_service: str) -> ParsedLine:
    try:
        value = _JSON.decode(line)
    except json.JSONDecodeError as exc:
        raise _Unparsable(f"invalid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise _Unparsable("invalid JSON: nested too deeply") from None
    if not isinstance(value, dict):
        raise _Unparsable("JSON line is not an object")
    # Lone surrogates and NUL characters (which the database refuses) can only come from escapes.
    return _from_fields(_clean(value) if "\\u" in line else value, default_service)


def _from_fields(fields: dict[str, Any], default_service: str) -> ParsedLine:
    """An entry from named fields (JSON or logfmt); every unused field goes to attributes."""
    rest = _kubernetes_event(fields) or _mongodb_record(fields) or dict(fields)
    raw_ts = _take(rest, _TS_KEYS, lambda v: isinstance(v, str | int | float) and not isinstance(v, bool))
    if raw_ts is None:
        raise _Unparsable("no timestamp field")
    ts = _timestamp(raw_ts)
    message = _take(rest, _MESSAGE_KEYS, lambda v: v is not None and not isinstance(v, bool | dict | list), str)
    if message is None:
        message_object = _take(rest, ("message", "msg"), lambda v: isinstance(v, dict | list))
        if message_object is None:
            raise _Unparsable("no message field")
        message = json.dumps(message_object, ensure_ascii=False, sort_keys=True)
    named = lambda v: isinstance(v, str | int) and str(v).strip() != ""  # noqa: E731
    # zap, logrus and friends put the reason beside the message ("fx lookup failed",
    # error="… certificate has expired"): the line says both, so the message does too
    error = _take(rest, _ERROR_KEYS, lambda v: isinstance(v, str) and v.strip() != "", str)
    if error is None and isinstance(err := rest.get("err", rest.get("error")), dict):
        # pino and bunyan write an error as an object: its message is the reason
        error = str(err["message"]) if isinstance(err.get("message"), str) and err["message"].strip() else None
    if error is not None and error not in str(message):
        message = f"{message}: {error}"
    service = _take(rest, _SERVICE_KEYS, named, str)
    if service in _LAYOUT_NAMES:
        rest["service.name"], service = service, None  # the layout's name, not the workload's
    if service is None and default_service == UNKNOWN_SERVICE:
        service = _take(rest, _LOGGER_KEYS, named, str)
    raw_level = _take(rest, _LEVEL_KEYS, lambda v: isinstance(v, str | int | float) and not isinstance(v, bool))
    level = normalise_level(raw_level) if raw_level is not None else None
    if level is None and raw_level is not None:
        rest["raw_level"] = raw_level
    return _entry(ts, service or default_service, level, str(message), rest)


#: what a product's JSON layout writes as ``service.name`` whatever the deployment is called:
#: the file (or the line's pod) names the workload instead (Elasticsearch 8's ECS layout)
_LAYOUT_NAMES = frozenset({"ES_ECS"})

_MONGODB_LEVELS = {"F": "FATAL", "E": "ERROR", "W": "WARN", "I": "INFO"}


def _mongodb_record(fields: dict[str, Any]) -> dict[str, Any] | None:
    """A MongoDB structured log record (``{"t": {"$date": …}, "s": "F", "c": "CONTROL", "msg":
    …, "attr": {…}}``, MongoDB 4.4 and later) in the usual field names, or ``None`` for any other
    object: the severity letter is the level (``D1``…``D5`` DEBUG), the reason an ``attr`` gives
    (``error``, ``reason``) follows the message, and the component and context are kept."""
    when, severity, message = fields.get("t"), fields.get("s"), fields.get("msg")
    if not (isinstance(when, dict) and isinstance(severity, str) and isinstance(message, str)):
        return None
    date = when.get("$date")
    if not isinstance(date, str | int) or isinstance(date, bool):
        return None
    attr: dict[str, Any] = fields["attr"] if isinstance(fields.get("attr"), dict) else {}
    reason = next((attr[k] for k in ("error", "reason", "errmsg") if isinstance(attr.get(k), str)), None)
    out: dict[str, Any] = {k: v for k, v in fields.items() if k not in ("t", "s", "msg")}
    out.update(
        timestamp=date,
        message=f"{message}: {reason}" if reason else message,
        level=_MONGODB_LEVELS.get(severity, "DEBUG" if severity.startswith("D") else severity),
    )
    return out


#: the attribute of an event seen ``count`` times that says when it first happened
FIRST_OCCURRENCE = "first_timestamp"
_EVENT_TIMES = ("eventTime", "deprecatedLastTimestamp", "firstTimestamp")
_EVENT_LEVELS = {"warning": "WARN", "normal": "INFO"}


def _kubernetes_event(fields: dict[str, Any]) -> dict[str, Any] | None:
    """A Kubernetes Event object (``kubectl get events -o json | jq -c '.items[]'``, core/v1 or
    events.k8s.io/v1) in the usual field names, or ``None`` for any other object.

    Its time is when it last happened (an event seen more than once also says when it first
    did: see :func:`_occurrences`); ``Warning`` is WARN and ``Normal`` INFO; the service is
    the workload of the object it is about (``checkout-api-7d9f8b6c5d-xk2p9`` →
    ``checkout-api``), and the message leads with the reason, as ``kubectl get events`` shows
    both (``BackOff: Back-off restarting failed container``). The object's kind, name and
    namespace, the count and the reporting component are kept as attributes.
    """
    about = fields.get("involvedObject", fields.get("regarding"))
    reason, note = fields.get("reason"), fields.get("message", fields.get("note"))
    if not isinstance(about, dict) or not isinstance(reason, str) or not isinstance(note, str):
        return None
    metadata: dict[str, Any] = fields["metadata"] if isinstance(fields.get("metadata"), dict) else {}
    series: dict[str, Any] = fields["series"] if isinstance(fields.get("series"), dict) else {}
    times = [fields.get("lastTimestamp"), series.get("lastObservedTime")]
    times += [fields.get(key) for key in _EVENT_TIMES] + [metadata.get("creationTimestamp")]
    ts = next((t for t in times if isinstance(t, str) and t), None)
    count = fields.get("count", fields.get("deprecatedCount", series.get("count")))
    first = fields.get("firstTimestamp") or fields.get("deprecatedFirstTimestamp") or fields.get("eventTime")
    name = str(about.get("name") or "")
    source: dict[str, Any] = fields["source"] if isinstance(fields.get("source"), dict) else {}
    out: dict[str, Any] = {
        "timestamp": ts,
        "message": f"{reason}: {note}" if note else reason,
        "kind": about.get("kind"),
        "object": name,
        "namespace": about.get("namespace") or metadata.get("namespace"),
        "reason": reason,
        "count": count,
        "component": fields.get("reportingComponent") or source.get("component"),
        # the node whose kubelet saw it
        "host": source.get("host"),
    }
    if isinstance(count, int) and count > 1 and isinstance(first, str) and first and first != ts:
        out[FIRST_OCCURRENCE] = first
    if name:
        out["service"] = workload_of(name, str(about.get("kind") or "Pod"))
    level = _EVENT_LEVELS.get(str(fields.get("type", "")).lower())
    if level is not None:
        out["level"] = level
    return {k: v for k, v in out.items() if v not in (None, "")}


def _take(
    fields: dict[str, Any],
    keys: Sequence[str],
    accept: Callable[[Any], bool],
    convert: Callable[[Any], Any] = lambda v: v,
) -> Any:
    """Remove and return the first acceptable value among ``keys``; ``a.b`` is also ``{"a": {"b"}}``."""
    for key in keys:
        if key in fields and accept(fields[key]):
            return convert(fields.pop(key))
        if "." not in key:
            continue
        head, _, tail = key.partition(".")
        parent = fields.get(head)
        if isinstance(parent, dict) and tail in parent and accept(parent[tail]):
            remaining = {k: v for k, v in parent.items() if k != tail}
            if remaining:
                fields[head] = remaining
            else:
                del fields[head]
            return convert(parent[tail])
    return None


def _clean(value: Any) -> Any:
    """The value with strings made storable: no lone surrogates, no NUL characters."""
    if isinstance(value, str):
        if "\x00" in value:
            value = value.replace("\x00", "\ufffd")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            value = value.encode("utf-8", "replace").decode("utf-8")
        return value
    if isinstance(value, dict):
        return {_clean(str(k)): _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _entry(ts: datetime, service: str, level: str | None, message: str, attributes: dict[str, Any]) -> ParsedLine:
    """The entry; ``level`` is the one the line states, ``None`` when it states none."""
    message = message.strip()
    if not message:
        raise _Unparsable("empty message")
    if len(message) > MAX_MESSAGE_CHARS:
        attributes["message_chars"] = len(message)
        message = message[:MAX_MESSAGE_CHARS]
    stated = level is not None
    if level is None and (level := infer_level(message)) is not None:
        attributes[LEVEL_INFERRED] = True
    return ParsedLine(
        ts,
        service.strip()[:_SERVICE_CHARS] or UNKNOWN_SERVICE,
        level or "INFO",
        message,
        attributes,
        level_stated=stated,
    )


# timestamps


def _aware(ts: datetime) -> datetime:
    try:
        ts = ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)
    except OverflowError:
        raise _Unparsable("timestamp out of range") from None
    if not _MIN_TS <= ts <= _MAX_TS:
        raise _Unparsable("timestamp out of range")
    return ts


_EPOCH = re.compile(r"\d{9,19}(?:\.\d+)?")


def _timestamp(value: Any) -> datetime:
    """An aware UTC time from an ISO-8601 string, an RFC 2822 or CLF date, or epoch seconds/ms/µs/ns."""
    if isinstance(value, int | float):
        return _epoch(float(value))
    text = str(value).strip()
    if _EPOCH.fullmatch(text):
        return _epoch(float(text))
    with contextlib.suppress(ValueError):
        return _aware(datetime.fromisoformat(text))
    iso = re.sub(r"\s*(?:UTC|GMT)$", "+00:00", text.upper())
    iso = re.sub(r"(\d)\s+([+-]\d{2}:?\d{2})$", r"\1\2", iso)
    with contextlib.suppress(ValueError):
        return _aware(datetime.fromisoformat(iso))
    with contextlib.suppress(ValueError):
        return _aware(datetime.strptime(text, "%d/%b/%Y:%H:%M:%S %z"))  # common log format
    if re.match(r"(?:[A-Z][a-z]{2}, )?\d{1,2} [A-Z][a-z]{2} \d{4} ", text):
        with contextlib.suppress(ValueError, TypeError, IndexError):
            return _aware(parsedate_to_datetime(text))
    raise _Unparsable(f"unrecognised timestamp {text[:40]!r}")


def _epoch(value: float) -> datetime:
    if not math.isfinite(value) or value < 0:
        raise _Unparsable("timestamp out of range")
    for scale in (1e9, 1e6, 1e3):  # nanoseconds, microseconds, milliseconds
        if value >= 1e11 * scale / 1e3:
            value /= scale
            break
    try:
        return _aware(datetime.fromtimestamp(value, UTC))
    except (OverflowError, OSError, ValueError):
        raise _Unparsable("timestamp out of range") from None


# plain-text formats

_ISO = r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d{1,9})?)?(?:[Zz]| ?[+-]\d{2}(?::?\d{2})?| ?UTC)?"
#: Go's standard log and nginx's error log: ``2026/11/30 10:01:59 …`` (local time, taken as UTC)
_SLASHED = r"\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{1,9})?"
_ISO_LINE = re.compile(rf"^(?:\[(?P<bts>{_ISO})\]\s*|(?P<ts>{_ISO})\s+|(?P<sts>{_SLASHED})\s+)(?P<rest>.+)$", re.S)
_MONOLOG = re.compile(
    r"^\[(?P<ts>[^\]]{10,40})\]\s+(?P<service>[^\s\[\]]+?)\.(?P<level>[A-Za-z]+):\s?(?P<msg>.*)$", re.S
)
_MONOLOG_TAIL = re.compile(r"^(?P<msg>.*?)\s+(?P<context>\{.*\}|\[.*\])\s+(?P<extra>\{.*\}|\[.*\])\s*$", re.S)
_MONTHS = {
    m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)
}
_SYSLOG = re.compile(
    r"^(?:<(?P<pri>\d{1,3})>)?(?P<mon>[A-Z][a-z]{2}) {1,2}(?P<day>\d{1,2}) (?P<time>\d{2}:\d{2}:\d{2})(?P<frac>\.\d{1,6})?"
    r" (?P<host>\S+) (?P<tag>[^\s\[:]+)(?:\[(?P<pid>[^\]\s]+)\])?: ?(?P<rest>.*)$",
    re.S,
)
_RFC5424 = re.compile(
    r"^<(?P<pri>\d{1,3})>1 (?P<ts>\S+) (?P<host>\S+) (?P<tag>\S+) (?P<pid>\S+) (?P<msgid>\S+)"
    r" (?P<sd>-|(?:\[(?:[^\]\\]|\\.)*\])+) ?(?P<rest>.*)$",
    re.S,
)
# journald's short-iso: "host tag[pid]: …", and the kernel, which has no process id
_ISO_SYSLOG_TAIL = re.compile(
    r"^(?P<host>[\w.\-]+) (?:(?P<tag>[\w.\-/]+)\[(?P<pid>\d+)\]|(?P<kernel>kernel)): ?(?P<rest>.*)$", re.S
)
_LEVEL_PART = r"(?P<tok>(?:[\[<(] ?)?(?P<lvl>[A-Za-z]{3,13})(?: (?=[\]>)]))?[\]>)]?:?)"
_LEVEL_FIRST = re.compile(rf"^{_LEVEL_PART}(?:\s+(?P<after>.*))?$", re.S)
_SYSLOG_SEQUENCE = re.compile(r"^\[\d+-\d+\]\s+")
_BRACKET_SERVICE_FIRST = re.compile(rf"^\[(?P<svc>[^\]\s:]{{1,200}})\]:?\s+{_LEVEL_PART}\s+(?P<msg>.*)$", re.S)
_SERVICE_FIRST = re.compile(
    rf"^(?P<svc>[a-z0-9](?=[a-z0-9_.\-/@]*[a-z])[a-z0-9_.\-/@]*):?\s+{_LEVEL_PART}\s+(?P<msg>.*)$", re.S
)
_BRACKET_SERVICE = re.compile(r"^\[(?P<svc>[^\]\s:]{1,200})\]:?\s+(?P<msg>.*)$", re.S)
_COLON_SERVICE = re.compile(r"^(?P<svc>[a-z0-9][a-z0-9_.\-/@]*):\s+(?P<msg>.*)$", re.S)
#: a bare word is a service only when it reads like one: lower case with a separator
#: (``payment-service``, ``chat.tasks``), or followed by a capitalised word (``nginx Upstream …``)
_BARE_SERVICE = re.compile(
    r"^(?P<svc>[a-z][a-z0-9]*(?:[-_.][a-z0-9]+)+|[a-z][a-z0-9]*(?=\s+[A-Z]))\s+(?P<msg>.*)$", re.S
)


def _from_iso(line: str, default_service: str) -> ParsedLine | None:
    """``<ISO time> …``: level and service in any of the usual orders, or a syslog tail.

    What follows the time may be a whole line of its own, as ``kubectl logs --timestamps``
    writes a container's output: a JSON or logfmt record, a klog line (``W0406 10:00:01.2 1
    reflector.go:424] …``), or a line with its own time (Spring Boot, gunicorn, Fluent Bit,
    PostgreSQL) and level. The outer time is kept (it is UTC); the rest is read as that line.
    """
    m = _ISO_LINE.match(line)
    if m is None:
        return None
    ts = _timestamp(m["ts"] or m["bts"] or m["sts"].replace("/", "-", 2))
    rest = m["rest"]
    syslog = _ISO_SYSLOG_TAIL.match(rest)
    if syslog is not None:
        return _syslog_entry(ts, syslog, None, default_service)
    inner = _record_after_time(rest, ts, default_service)
    if inner is not None:
        return inner
    if (timed := _layout(rest, _TIMED_LAYOUTS)) is not None:
        return _entry(ts, default_service, *timed)  # the outer time kept, as for any line after it
    if (ruby := _RUBY.match(rest)) is not None:
        return _ruby_entry(ts, ruby, default_service)
    if (celery := _CELERY.match(rest)) is not None:
        level = normalise_level(celery["lvl"])
        return _entry(ts, default_service, level, celery["msg"], {"process": celery["process"]})
    attributes: dict[str, Any] = {}
    if (first := _LEVEL_THEN_TIME.match(rest)) is not None and (level := normalise_level(first["lvl"])):
        return _entry(ts, default_service, level, first["msg"], attributes)  # Django's "verbose" format
    if (own := _INNER_TIME.match(rest)) is not None and own.end() < len(rest):
        rest = rest[own.end() :]
    if (jvm := _JVM_TAGS.match(rest)) is not None:
        return _entry(ts, default_service, normalise_level(jvm["lvl"]), jvm["msg"], {"tags": jvm["tags"]})
    if (layout := _layout(rest, _AFTER_TIME)) is not None:
        level, message, details = layout
        return _entry(ts, default_service, level, message, details)
    if (pid := _PID_FIRST.match(rest)) is not None:
        attributes.update({k: v for k, v in pid.groupdict().items() if v is not None})
        rest = rest[pid.end() :]
        if (own := _INNER_TIME.match(rest)) is not None and own.end() < len(rest):
            rest = rest[own.end() :]  # nats-server: ``[1] 2030/06/11 12:58:00.000000 [INF] …``
    service, level, message = _service_level_message(rest)
    if level is not None and (spring := _SPRING_TAIL.match(message)) is not None:
        attributes.update(pid=spring["pid"], thread=spring["thread"], logger=spring["logger"])
        message = spring["msg"]
    elif level is not None and service is None and (mysql := _MYSQL_TAIL.match(message)) is not None:
        attributes.update(code=mysql["code"], subsystem=mysql["subsystem"])
        message = mysql["msg"]
    elif level is not None and service is None and (nginx := _NGINX_TAIL.match(message)) is not None:
        attributes.update({k: v for k, v in nginx.groupdict().items() if k != "msg" and v is not None})
        message = nginx["msg"]
    return _entry(ts, service or default_service, level, message, attributes)


#: a second time after the first (an application's own, in whatever shape it writes it)
_INNER_TIME = re.compile(
    r"\[?\d{4}[-/]\d{2}[-/]\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?:\s?(?:[Zz]|[+-]\d{2}:?\d{2}|UTC|GMT))?"
    r"(?:\]?\s+|\](?=\[))|\d{2}:\d{2}:\d{2}[.,]\d{3,9}\s+(?=\[)"
)
#: a level, then the application's own time: ``ERROR 2026-08-05 22:10:09,730 django.request …``
_LEVEL_THEN_TIME = re.compile(rf"^(?P<lvl>[A-Z]{{4,8}})\s+{_ISO}\s+(?P<msg>\S.*)$", re.S)
#: a process id where a service could stand: ``[1] [INFO] …`` (gunicorn), ``[1] LOG: …`` (PostgreSQL)
_PID_FIRST = re.compile(r"(?:\[(?P<pid>\d{1,10})\]:?|(?P<thread>\d{1,10})(?=\s+\[[A-Za-z]))\s+")
#: what MySQL writes after its level: ``[MY-010055] [Server] …``
_MYSQL_TAIL = re.compile(r"^\[(?P<code>MY-\d+)\]\s+\[(?P<subsystem>[A-Za-z]+)\]\s+(?P<msg>.*)$", re.S)
#: what nginx's error log writes after its level: ``29#29: *1 connect() failed …`` (pid, thread, connection)
_NGINX_TAIL = re.compile(r"^(?P<pid>\d{1,10})#(?P<tid>\d{1,10}): (?:\*(?P<connection>\d{1,20}) )?(?P<msg>.*)$", re.S)
#: the JVM's unified logging after its time: ``[info][gc,heap] GC(12) Pause Young …``
_JVM_TAGS = re.compile(r"^\[(?P<lvl>trace|debug|info|warning|error) *\]\[(?P<tags>[a-z0-9,]+) *\] ?(?P<msg>.*)$", re.S)
#: Spring Boot's console line after its level: ``1 --- [main] o.s.b.SpringApplication : msg``
_SPRING_TAIL = re.compile(r"^(?P<pid>\d+) --- \[\s*(?P<thread>[^\]]*)\] (?P<logger>\S+)\s+: (?P<msg>.*)$", re.S)
_KLOG = re.compile(
    r"^(?P<lvl>[IWEF])(?P<mon>\d{2})(?P<day>\d{2}) (?P<time>\d{2}:\d{2}:\d{2})(?P<frac>\.\d{1,9})?\s+"
    r"(?P<pid>\d+) (?P<caller>[^\]\s]+)\] ?(?P<msg>.*)$",
    re.S,
)
_KLOG_LEVELS = {"I": "INFO", "W": "WARN", "E": "ERROR", "F": "FATAL"}
#: Redis: ``1:M 14 Jan 2026 10:00:00.123 # WARNING …``; the mark is the level
_REDIS = re.compile(
    r"^(?P<pid>\d+):(?P<role>[XCSM]) (?P<date>\d{1,2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2})(?P<frac>\.\d{1,6})?"
    r" (?P<mark>[.*#-]) (?P<msg>.*)$",
    re.S,
)
_REDIS_LEVELS = {".": "DEBUG", "-": "DEBUG", "*": "INFO", "#": "WARN"}


# Layouts read whole, each a pattern with a ``lvl`` and a ``msg`` group; its other named groups
# are kept as attributes, but ``when``, a time of the layout's own (see ``_TIMED``).

#: Python's logging in its basic format, ``LEVEL:logger:message``, or with the line number
#: (parsedmarc's ``%(levelname)8s:%(filename)s:%(lineno)d:%(message)s``)
_PYTHON_BASIC = re.compile(
    r"^(?P<lvl>DEBUG|INFO|WARNING|ERROR|CRITICAL):(?P<logger>[\w.\-]{1,200}):(?:(?P<lineno>\d{1,7}):)?(?P<msg>.*)$",
    re.S,
)
#: Python's logging cookbook: ``%(asctime)s - %(name)s - %(levelname)s - %(message)s``, after the time
_PYTHON_DASHED = re.compile(r"^- (?:(?P<logger>[^\s]{1,200}) - )?(?P<lvl>[A-Z]{4,8}) - (?P<msg>.*)$", re.S)
#: Airflow's task log after its time: ``{taskinstance.py:1234} ERROR - Task failed``
_AIRFLOW = re.compile(r"^\{(?P<source>[^}\s]{1,200})\} (?P<lvl>[A-Z]{4,8}) - (?P<msg>.*)$", re.S)
#: the Elastic stack's log4j layout after its time (Logstash, Elasticsearch before 8):
#: ``[WARN ][logstash.outputs.elasticsearch][main][es-out] msg``, ``[INFO ][o.e.n.Node] [node-1] msg``
_ELASTIC = re.compile(
    r"^\[(?P<lvl>[A-Z]{4,5}) *\]\[(?P<logger>[^\]]{1,200}?) *\](?:\[(?P<pipeline>[^\]\s]{1,200})\])?"
    r"(?:\[(?P<plugin>[^\]\s]{1,200})\])? ?(?P<msg>.*)$",
    re.S,
)
#: Envoy (and Istio's sidecars) after its time: ``[14][warning][config] [source/…/grpc_stream.h:163] msg``
_ENVOY = re.compile(
    r"^\[(?P<thread>\d{1,10})\]\[(?P<lvl>trace|debug|info|warning|error|critical)\]\[(?P<logger>[\w.]{1,100})\] "
    r"(?:\[(?P<source>[^\]\s]{1,300})\] )?(?P<msg>.*)$",
    re.S,
)
#: log4j with its context first, ZooKeeper's: ``[myid:2] - WARN  [NIOWorkerThread-4:o.a.z.s.NIOServerCnxn@397] - msg``
_MDC_FIRST = re.compile(
    r"^\[(?P<context>[^\]\s]{1,80})\] - (?P<lvl>[A-Z]{4,5}) +\[(?P<thread>[^\]]{1,200})\] - (?P<msg>.*)$", re.S
)
#: .NET's console logger: ``fail: Microsoft.AspNetCore.Server.Kestrel[13]``, the message on the
#: indented lines that follow (folded into it); the category and event id stand for the message
_DOTNET = re.compile(r"^(?P<lvl>trce|dbug|info|warn|fail|crit): (?P<msg>[\w.`+<>]{1,300}\[\d{1,10}\])\s*$", re.S)
_DOTNET_LEVELS = {"fail": "ERROR", "crit": "FATAL"}
#: what follows an ISO time, in these layouts
_AFTER_TIME = (_PYTHON_BASIC, _PYTHON_DASHED, _AIRFLOW, _ELASTIC, _ENVOY, _MDC_FIRST, _DOTNET)

#: Apache httpd's error log: ``[Mon Nov 30 10:01:59.123456 2026] [proxy:error] [pid 1:tid 2] (111)…``
_APACHE = re.compile(
    r"^\[(?P<when>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2}(?:\.\d{1,6})? \d{4})\] "
    r"\[(?:(?P<module>[\w-]{1,50}):)?(?P<lvl>emerg|alert|crit|error|warn|notice|info|debug|trace\d)\] "
    r"(?:\[pid (?P<pid>\d{1,10})(?::tid (?P<tid>\d{1,20}))?\] )?(?:\[client (?P<client>[^\]\s]{1,100})\] )?(?P<msg>.*)$",
    re.S,
)
#: log4j's default in Spark and Hadoop: ``26/11/30 10:01:59 WARN TaskSetManager: Lost task …``
_SPARK = re.compile(
    r"^(?P<when>\d{2}/\d{2}/\d{2} \d{2}:\d{2}:\d{2})\s+(?P<lvl>[A-Z]{4,5})\s+(?P<logger>[\w.$]{1,200}):\s(?P<msg>.*)$",
    re.S,
)
#: the level, the thread, then the time: Cassandra's ``WARN  [main] 2026-11-30 10:01:59,123 File.java:123 - msg``
_LEVEL_THREAD_TIME = re.compile(
    rf"^(?P<lvl>[A-Z]{{4,5}})\s+\[(?P<thread>[^\]]{{1,200}})\]\s+(?P<when>{_ISO})\s+"
    r"(?:(?P<source>[\w$.]{1,200}:\d{1,7}) - )?(?P<msg>.*)$",
    re.S,
)
#: layouts with a time of their own shape, and its formats (an ISO time needs none)
_TIMED = (
    (_APACHE, ("%a %b %d %H:%M:%S.%f %Y", "%a %b %d %H:%M:%S %Y")),
    (_SPARK, ("%y/%m/%d %H:%M:%S",)),
    (_LEVEL_THREAD_TIME, ()),
)


#: the ``_TIMED`` layouts alone, as they are tried after another time
_TIMED_LAYOUTS = tuple(layout for layout, _ in _TIMED)


def _read_layout(m: re.Match[str] | None) -> tuple[str, str, dict[str, Any]] | None:
    """The level, message and other fields of a layout's match, or ``None`` when there is no
    match or its level is no level."""
    if m is None:
        return None
    level = normalise_level(m["lvl"]) or _DOTNET_LEVELS.get(m["lvl"])
    if level is None:
        return None
    details = {k: v.strip() for k, v in m.groupdict().items() if k not in ("lvl", "msg", "when") and v}
    return level, m["msg"], details


def _layout(text: str, layouts: Sequence[re.Pattern[str]]) -> tuple[str, str, dict[str, Any]] | None:
    """The level, message and other fields of the first layout ``text`` is written in."""
    for layout in layouts:
        if (found := _read_layout(layout.match(text))) is not None:
            return found
    return None


def _from_timed_layout(line: str, default_service: str, _now: datetime) -> ParsedLine | None:
    """A line in one of the ``_TIMED`` layouts, at its own time."""
    for layout, formats in _TIMED:
        m = layout.match(line)
        found = _read_layout(m)
        if m is None or found is None:
            continue
        when = m["when"].replace("  ", " ")
        for fmt in formats:
            with contextlib.suppress(ValueError):
                return _entry(_aware(datetime.strptime(when, fmt)), default_service, *found)
        if not formats:
            return _entry(_timestamp(when), default_service, *found)
    return None


def _record_after_time(rest: str, ts: datetime, default_service: str) -> ParsedLine | None:
    """The JSON, logfmt or klog line that follows a time, read with that time; else ``None``."""
    fields: Any = None
    if rest.startswith("{"):
        with contextlib.suppress(json.JSONDecodeError, RecursionError):
            fields = _JSON.decode(rest)
        if isinstance(fields, dict):
            fields = _clean(fields) if "\\u" in rest else fields
    elif (klog := _KLOG.match(rest)) is not None:
        return _klog_entry(ts, klog, default_service, {"pid": klog["pid"]})
    elif (redis := _REDIS.match(rest)) is not None:
        return _redis_entry(ts, redis, default_service)
    else:
        fields = _logfmt(rest)
        if fields is not None and not any(key in fields for key in (*_LEVEL_KEYS, *_MESSAGE_KEYS)):
            fields = None
    if not isinstance(fields, dict):
        return None
    for key in _TS_KEYS:
        fields.pop(key, None)
    fields["timestamp"] = ts.isoformat()
    try:
        return _from_fields(fields, default_service)
    except _Unparsable:
        return None


def _redis_entry(ts: datetime, m: re.Match[str], default_service: str) -> ParsedLine:
    return _entry(ts, default_service, _REDIS_LEVELS[m["mark"]], m["msg"], {"pid": m["pid"], "role": m["role"]})


def _from_redis(line: str, default_service: str, _now: datetime) -> ParsedLine | None:
    m = _REDIS.match(line)
    if m is None:
        return None
    try:
        ts = datetime.strptime(m["date"], "%d %b %Y %H:%M:%S")
    except ValueError:
        return None
    micro = int(float(m["frac"]) * 1_000_000) if m["frac"] else 0
    return _redis_entry(_aware(ts.replace(microsecond=micro)), m, default_service)


def _from_klog(line: str, default_service: str, now: datetime) -> ParsedLine | None:
    """A klog line (Kubernetes components): ``E0406 10:00:01.123456 1 file.go:42] msg``. Its time
    has no year and no zone: the current year (the previous one for a date that would lie in
    the future) and UTC are assumed, as for syslog."""
    m = _KLOG.match(line)
    if m is None:
        return None
    ts = _without_year(now, int(m["mon"]), int(m["day"]), m["time"], m["frac"], "klog")
    return _klog_entry(ts, m, default_service, {"pid": m["pid"]})


def _klog_entry(ts: datetime, m: re.Match[str], service: str, attributes: dict[str, Any]) -> ParsedLine:
    """The entry of a klog line: its level letter's level, its caller kept."""
    return _entry(ts, service, _KLOG_LEVELS[m["lvl"]], m["msg"], {**attributes, "caller": m["caller"]})


def _service_level_message(rest: str) -> tuple[str | None, str | None, str]:
    """Split what follows the time into service, level and message (either may be absent)."""
    m = _BRACKET_SERVICE_FIRST.match(rest) or _SERVICE_FIRST.match(rest)
    if m is not None and (level := _level_of(m)) is not None:
        # logback's default ``[main] ERROR com.example.App - msg``: a thread, not a service
        return (None if _THREAD_NAME.match(m["svc"]) else m["svc"]), level, m["msg"]
    m = _LEVEL_FIRST.match(rest)
    if m is not None and (level := _level_of(m)) is not None:
        after = m["after"] or ""
        if m["tok"].endswith(":") or _MYSQL_TAIL.match(after):
            return None, level, after  # "LOG:  received SIGHUP": what follows a level's colon is the message
        s = _BRACKET_SERVICE.match(after) or _COLON_SERVICE.match(after) or _BARE_SERVICE.match(after)
        if s is not None and _THREAD_NAME.match(s["svc"]):
            return None, level, s["msg"]  # logback's ``LEVEL [thread] logger - message``: no service
        if s is not None and s["svc"].startswith("plugin/"):
            return None, level, after  # CoreDNS's ``[FATAL] plugin/loop: …``: the plugin, not a service
        return (s["svc"], level, s["msg"]) if s is not None else (None, level, after)
    return None, None, rest


#: a JVM or event-loop thread's name where a service could stand: ``[http-nio-8080-exec-195]``,
#: ``[r2dbc-pool-2]``, ``[grpc-default-executor-9]``, ``[pool-1-thread-3]``, ``[main]``
_THREAD_NAME = re.compile(
    r"^(?:main|.*[-_](?:exec|executor|thread|pool|nio|epoll|eventloop|scheduling|scheduler|task|dispatcher)"
    r"(?:-\d+)+|pool-\d+-thread-\d+|.*#\d+-\d+-C-\d+)$",
    re.IGNORECASE,
)


def _level_of(m: re.Match[str]) -> str | None:
    """The level of a matched level token. A capitalised word (``Error connecting …``) begins a
    message rather than naming a level, unless it is bracketed or followed by a colon."""
    word = m["lvl"]
    if word.lower() in _MARKS and not word.isupper() and m["tok"] == word:
        return None  # "inf loop detected": a word, not nats-server's mark
    if word.isupper() or word.islower() or m["tok"] != word:
        return normalise_level(word)
    return None


#: Ruby's Logger (Rails): ``W, [2030-02-05T06:55:14.357897 #1]  WARN -- progname: message``
_RUBY = re.compile(
    rf"^[DIWEFA], \[(?P<ts>{_ISO}) #(?P<pid>\d+)\]\s+(?P<lvl>DEBUG|INFO|WARN|ERROR|FATAL|ANY) -- (?P<prog>[^:]*): ?"
    r"(?P<msg>.*)$",
    re.S,
)


#: Celery's worker line: ``[2031-05-21 02:06:09,428: WARNING/ForkPoolWorker-3] message``
_CELERY = re.compile(rf"^\[(?P<ts>{_ISO}):\s(?P<lvl>[A-Z]+)/(?P<process>[^\]]+)\]\s(?P<msg>.*)$", re.S)


def _from_ruby(line: str, default_service: str, _now: datetime) -> ParsedLine | None:
    m = _RUBY.match(line)
    return _ruby_entry(_timestamp(m["ts"]), m, default_service) if m is not None else None


def _ruby_entry(ts: datetime, m: re.Match[str], default_service: str) -> ParsedLine:
    """A Ruby Logger line at ``ts``; its program name is an attribute (Rails leaves it empty)."""
    attributes = {"pid": m["pid"], **({"progname": m["prog"].strip()} if m["prog"].strip() else {})}
    return _entry(ts, default_service, normalise_level(m["lvl"]), m["msg"], attributes)


def _from_monolog(line: str, default_service: str, _now: datetime) -> ParsedLine | None:
    m = _MONOLOG.match(line)
    if m is None:
        return None
    try:
        ts = _timestamp(m["ts"])
    except _Unparsable:
        return None
    level = normalise_level(m["level"])
    if level is None:  # not Monolog after all: ``[time] some.word: …`` is read as ISO-first
        return None
    attributes: dict[str, Any] = {}
    message = m["msg"]
    tail = _MONOLOG_TAIL.match(message)
    if tail is not None:
        with contextlib.suppress(ValueError, RecursionError):
            context, extra = json.loads(tail["context"]), json.loads(tail["extra"])
            message = tail["msg"]
            attributes.update({k: _clean(v) for k, v in (("context", context), ("extra", extra)) if v})
    return _entry(ts, m["service"], level, message, attributes)


def _from_syslog(line: str, default_service: str, now: datetime) -> ParsedLine | None:
    """RFC 3164: the time has no year and no zone, so the current year (or the previous one,
    for a date that would lie in the future) and UTC are assumed."""
    m = _SYSLOG.match(line)
    if m is None or m["mon"] not in _MONTHS:
        return None
    ts = _without_year(now, _MONTHS[m["mon"]], int(m["day"]), m["time"], m["frac"], "syslog")
    return _syslog_entry(ts, m, m["pri"], default_service)


def _without_year(now: datetime, month: int, day: int, clock: str, frac: str | None, what: str) -> datetime:
    """A UTC time written without a year: this year's, or last year's for one that would lie
    more than a day in the future."""
    hour, minute, second = (int(x) for x in clock.split(":"))
    micro = int(float(frac[:7]) * 1_000_000) if frac else 0
    try:
        ts = datetime(now.year, month, day, hour, minute, second, micro, tzinfo=UTC)
        return ts.replace(year=now.year - 1) if ts > now + timedelta(days=1) else ts
    except ValueError:
        raise _Unparsable(f"invalid {what} date") from None


def _from_rfc5424(line: str, default_service: str, _now: datetime) -> ParsedLine | None:
    m = _RFC5424.match(line)
    if m is None:
        return None
    if m["ts"] == "-":
        raise _Unparsable("syslog line without a timestamp")
    entry = _syslog_entry(_timestamp(m["ts"]), m, m["pri"], default_service)
    extra = {k: m[k] for k in ("msgid", "sd") if m[k] != "-"}
    return replace(entry, attributes={**entry.attributes, **extra}) if extra else entry


def _syslog_entry(ts: datetime, m: re.Match[str], pri: str | None, default_service: str) -> ParsedLine:
    attributes = {k: m[k] for k in ("host", "pid") if m[k] and m[k] != "-"}
    rest = m["rest"].lstrip("\ufeff")
    tag = m["tag"] or m.groupdict().get("kernel") or default_service
    tag = tag if tag != "-" else default_service
    if (klog := _KLOG.match(rest)) is not None:  # a Kubernetes component under journald
        return _klog_entry(ts, klog, tag, attributes)
    level = None
    # PostgreSQL numbers its syslog lines ("[3-1] FATAL:  …"): the level word follows the number
    lm = _LEVEL_FIRST.match(_SYSLOG_SEQUENCE.sub("", rest, count=1))
    if lm is not None and (level := _level_of(lm)) is not None:
        rest = lm["after"] or ""
    elif pri is not None and int(pri) <= 191:
        level = _SYSLOG_SEVERITY[int(pri) % 8]
    return _entry(ts, tag, level, rest, attributes)


_LOGFMT_PAIR = re.compile(r'\s*(?P<key>[A-Za-z_@][\w.@/\-]*)=(?P<value>"(?:[^"\\]|\\.)*"|[^\s"]*)')


def _logfmt(line: str) -> dict[str, Any] | None:
    """The fields of a logfmt line, or ``None`` if the line is not made of ``key=value`` pairs."""
    fields: dict[str, Any] = {}
    position = 0
    while position < len(line):
        m = _LOGFMT_PAIR.match(line, position)
        if m is None:
            if line[position:].strip():
                return None
            break
        value = m["value"]
        if value.startswith('"'):
            try:
                value = json.loads(value)
            except ValueError:
                value = value[1:-1]
        fields[m["key"]] = _clean(value) if "\\u" in m["value"] else value
        position = m.end()
    return fields if len(fields) >= 2 else None


# files

_CONTINUATION = re.compile(
    r"^(?:[ \t]+(?!(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):)\S|Caused by:|Traceback \(most recent call last\)|\.\.\. \d+ more"
    r"|(?:[a-zA-Z_$][\w$]*\.)*[A-Z][\w$]*(?:Error|Exception|Exit|Interrupt|Warning)\b(?::|$))"
)


#: a stack trace's exception line: ``psycopg2.OperationalError: …``, ``Caused by: java.io.IOException: …``,
#: .NET's inner one: ``---> System.Net.Http.HttpRequestException (0x80004005): …``
_RAISED = re.compile(
    r"^(?:Caused by: |---> )?(?P<exception>(?:[a-zA-Z_$][\w$]*\.)*[A-Z][\w$]*(?:Error|Exception)\b"
    r"(?: \(0x[0-9A-Fa-f]{8}\))?: .+)$"
)
_RAISED_CHARS = 300
#: a continuation line that goes on with the message's prose: indented words, not a stack frame
_WRAPPED = re.compile(r"^[ \t]+(?!at |File |\.\.\. |Caused by|Traceback)[A-Za-z\"'(][^\n]{0,300}$")
#: kubectl's time and the container's line as it wrote it, leading spaces included
_STAMPED = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?Z(?: (?P<body>.*))?$", re.S)


#: the plain sentence a message ending in a colon announces, on a line of its own
_ANNOUNCED = re.compile(r"^[A-Za-z][^\n]{0,300}$")


def _announces(pending: ParsedLine, body: str, parsed: ParsedLine | str) -> bool:
    """Whether ``body`` is the detail that ``pending``'s message, ending in a colon, announced:
    a plain sentence with no level, time or fields of its own."""
    return (
        pending.message.rstrip().endswith(":")
        and isinstance(parsed, ParsedLine)
        and not parsed.level_stated
        and not parsed.attributes
        and parsed.message == body.strip()
        and _ANNOUNCED.match(body.strip()) is not None
    )


def open_log(path: str | Path) -> io.BufferedIOBase:
    """The file as a binary stream, decompressed when its name ends in ``.gz``."""
    path = Path(path)
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    return path.open("rb")


class Readable(Protocol):
    """What :func:`parse_stream` reads from: a binary stream of lines."""

    def readline(self, limit: int = -1, /) -> bytes: ...


def _raw_lines(stream: Readable, max_line_bytes: int) -> Iterator[tuple[int, bytes | None]]:
    """(line number, bytes without the line ending), or ``None`` for a line too long to read
    (the rest of which is skipped, never held in memory)."""
    number = 0
    while raw := stream.readline(max_line_bytes + 1):
        number += 1
        if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
            while (more := stream.readline(1 << 16)) and not more.endswith(b"\n"):
                pass
            yield number, None
            continue
        yield number, raw.rstrip(b"\r\n")


def parse_stream(
    stream: Readable,
    *,
    default_service: str,
    now: datetime | None,
    source: str = "",
    max_line_bytes: int = MAX_LINE_BYTES,
) -> Iterator[ParsedLine | LineError]:
    """:func:`parse_file` over an open stream (``source`` names it in the errors), for callers
    that read the file themselves, such as an ingest that shows its progress. A line longer
    than ``max_line_bytes`` is a :class:`LineError` and reading goes on after it."""
    now = now or datetime.now(UTC)
    pending: ParsedLine | None = None
    folded: list[str] = []

    def flush() -> ParsedLine | None:
        if pending is None or not folded:
            return pending
        if all(_WRAPPED.match(line) for line in folded):
            # an indented note that continues the message's sentence, not a stack trace
            message = " ".join([pending.message, *(line.strip() for line in folded)])[:MAX_MESSAGE_CHARS]
            return replace(pending, message=message, continued=len(folded))
        text = "\n".join(folded)[:MAX_MESSAGE_CHARS]
        attributes = {**pending.attributes, "continuation": text}
        level = pending.level
        if not pending.level_stated and (shown := infer_level(text)) and LEVELS.index(shown) > LEVELS.index(level):
            level, attributes[LEVEL_INFERRED] = shown, True  # a stack trace under an unlevelled line
        # the indented note before the trace goes on with the message (.NET's console writes the
        # whole message there, under its ``fail: Category[id]`` line)
        note = []
        for line in folded:
            if not _WRAPPED.match(line) or _RAISED.match(line.strip()):
                break
            note.append(line.strip())
        message = " ".join([pending.message, *note])[:MAX_MESSAGE_CHARS]
        # What a reader of the trace looks for: the exception it ends in (the last "Caused by"),
        # said with the message, so it can be searched and counted.
        raised = [i for i, line in enumerate(folded) if _RAISED.match(line.strip())]
        if raised:
            # the exception's own message may go on over indented lines ("Is the server running
            # on host "profile-db" …")
            last = raised[-1]
            said = [folded[last].strip().removeprefix("Caused by: ").removeprefix("---> ")]
            said += [line.strip() for line in folded[last + 1 : last + 3] if _WRAPPED.match(line)]
            exception = " ".join(said)[:_RAISED_CHARS]
            if exception not in message:
                message = f"{message} — {exception}"[:MAX_MESSAGE_CHARS]
        return replace(pending, message=message, level=level, attributes=attributes, continued=len(folded))

    def flush_all() -> Iterator[ParsedLine]:
        done = flush()
        if done is not None:
            yield from _occurrences(done)

    for number, raw in _raw_lines(stream, max_line_bytes):
        result: ParsedLine | str
        if raw is None:
            text, result = "", f"line is longer than {max_line_bytes} bytes"
        else:
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            text = raw.decode("utf-8", errors="replace")
            if not text.strip():
                continue
            # ``kubectl logs --timestamps`` puts its time before every line the container wrote,
            # the empty ones and those that continue an entry (a stack trace, an indented note).
            stamped = _STAMPED.match(text)
            body = (stamped["body"] or "") if stamped is not None else text
            if stamped is not None and not body.strip():
                continue
            if pending is not None and _CONTINUATION.match(body) and not _looks_binary(body):
                folded.append(body.rstrip())
                continue
            parsed = _parse(text, default_service=default_service, now=now, max_chars=max_line_bytes)
            if pending is not None and not folded and _announces(pending, body, parsed):
                # "closing AMQP connection <0.145.62> (… -> …):" then "missed heartbeats from
                # client, timeout: 60s": the line it announced is the rest of its message
                message = f"{pending.message} {body.strip()}"[:MAX_MESSAGE_CHARS]
                pending = replace(pending, message=message)
                continue
            result = parsed
            if isinstance(parsed, ParsedLine):
                result = replace(parsed, line_number=number)
        yield from flush_all()
        pending, folded = None, []
        if isinstance(result, ParsedLine):
            pending = result
        else:
            yield LineError(number, result, _excerpt(text), source)
    yield from flush_all()


def _occurrences(entry: ParsedLine) -> Iterator[ParsedLine]:
    """The entry, after its first occurrence when it is an event the cluster counted (seen 520
    times from ``firstTimestamp`` to ``lastTimestamp``): when it began matters as much as when
    it last happened."""
    first = entry.attributes.get(FIRST_OCCURRENCE)
    try:
        began = _timestamp(first) if isinstance(first, str) else None
    except _Unparsable:
        began = None
    if began is not None and began < entry.ts:
        yield replace(entry, ts=began, continued=0, echo=True)
    yield entry


def _excerpt(text: str, limit: int = 120) -> str:
    text = "".join(ch if ch.isprintable() else "\ufffd" for ch in text[: limit + 1].strip())
    return text if len(text) <= limit else text[: limit - 1] + "…"
