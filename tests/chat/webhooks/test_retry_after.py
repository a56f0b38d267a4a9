"""Retry-After as a receiver may send it: seconds or an HTTP date, bounded, nonsense ignored."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from chat.webhooks.delivery import retry_after_s

NOW = datetime(2026, 12, 2, 10, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        ("0", 0.0),
        ("999999999", 86_400.0),  # capped
        ("Wed, 02 Dec 2026 10:05:00 GMT", 300.0),
        ("Wed, 02 Dec 2026 09:00:00 GMT", 0.0),  # in the past: at once
        ("Thu, 02 Dec 2027 10:00:00 GMT", 86_400.0),
        ("-5", None),
        ("soon", None),
        ("", None),
        (None, None),
    ],
)
def test_retry_after_is_read_as_seconds_from_now(value: str | None, expected: float | None) -> None:
    assert retry_after_s(value, max_s=86_400, now=NOW) == expected
