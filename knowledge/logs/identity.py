"""What makes a stored log line the same line again: its digest.

A line is its content — time, service, level, message and attributes — not the file it came
from: the same lines under another file name, or the old part of a file that was appended to,
are the same lines. An entry that occurs several times (the same content, to the microsecond)
is told apart by its occurrence: the first is ``entry_digest(key, 0)``, the next
``entry_digest(key, 1)``… so a file with two identical lines stores both, and the same file
again stores neither. Two sources that wrote byte-identical lines (same time, service, message,
no host or pod to tell them apart) are, by this rule, the same lines.

The ingest and the migration that gave the rows stored before digests existed compute them here,
so both agree.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import orjson

__all__ = ["DIGEST_CHARS", "Occurrences", "entry_digest", "entry_key"]

#: a digest is 64 hex characters (sha256), short enough for a unique index under utf8mb4
DIGEST_CHARS = 64


def entry_key(ts: datetime, service: str, level: int, message: str, attributes: Mapping[str, Any]) -> bytes:
    """The sha256 of the entry's content, as it is stored (aware time, level rank, JSON attributes)."""
    when = (ts if ts.tzinfo is UTC else ts.astimezone(UTC)).isoformat(timespec="microseconds")
    # lengths keep the fields apart whatever characters they hold
    text = f"{when}|{level}|{len(service)}:{service}|{len(message)}:{message}|"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass") + _canonical(attributes)).digest()


def _canonical(attributes: Mapping[str, Any]) -> bytes:
    if not attributes:
        return b""
    try:
        return orjson.dumps(attributes, option=orjson.OPT_SORT_KEYS, default=str)
    except (orjson.JSONEncodeError, TypeError):  # lone surrogates, integers beyond 64 bits
        return json.dumps(attributes, sort_keys=True, default=str).encode()


def entry_digest(key: bytes, occurrence: int) -> str:
    """The stored digest of the ``occurrence``-th entry (from 0) with content ``key``."""
    return key.hex() if occurrence == 0 else hashlib.sha256(key + b"#%d" % occurrence).hexdigest()


class Occurrences:
    """Counts the entries of one batch (a file) by content and gives each its digest.

    Only 8 bytes of each key are kept (a file of millions of lines stays small in memory); two
    contents sharing them would just number each other's occurrences, the same way every time.
    """

    def __init__(self) -> None:
        self._seen: dict[int, int] = {}

    def digest(self, key: bytes) -> str:
        short = int.from_bytes(key[:8], "big")
        occurrence = self._seen.get(short, 0)
        self._seen[short] = occurrence + 1
        return entry_digest(key, occurrence)

    def clear(self) -> None:
        self._seen.clear()
