"""One webhook attempt: resolve and check the target again, POST the body to a checked address,
and say what came of it — without following redirects, reading more of the response than an
excerpt, or trusting any proxy setting of the environment.

Only a 2xx answer is a success. 410 means the receiver is gone for good (its endpoint is then
disabled); 429 and 503 may say when to come back (``Retry-After``, seconds or an HTTP date);
anything else — another status, a redirect, a timeout, a refused connection — is retried on the
schedule.
"""

from __future__ import annotations

import email.utils
import enum
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx

from chat.webhooks.targets import Resolver, TargetPolicy, WebhookUrlForbidden, check

EXCERPT_CHARS = 200
#: how much of a response is read at most (the excerpt comes from it)
_READ_BYTES = 2_048
_PRINTABLE = dict.fromkeys(range(32)) | {127: None}


class Verdict(enum.StrEnum):
    SUCCEEDED = "succeeded"
    RETRY = "retry"  # on the schedule, or after retry_after_s
    GONE = "gone"  # 410: stop, and disable the endpoint
    FAILED = "failed"  # stop: the target may not be reached at all


@dataclass(frozen=True, slots=True)
class AttemptResult:
    verdict: Verdict
    duration_ms: float
    status_code: int | None = None
    #: "" on success, else what went wrong: http_500, timeout, connect_error, target_forbidden…
    error: str = ""
    excerpt: str = ""
    retry_after_s: float | None = None


_shared: httpx.Client | None = None
_shared_lock = threading.Lock()


def _client() -> httpx.Client:
    """One client per process (its TLS context costs milliseconds to build), shared by threads.

    No keep-alive: a connection is made to a checked address for one request, never reused for
    another host that happens to resolve to the same address (TLS was verified for this one)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = httpx.Client(
                follow_redirects=False,
                trust_env=False,
                limits=httpx.Limits(max_keepalive_connections=0, max_connections=None),
                headers={"user-agent": "SuperBizAgent-Webhooks/1"},
            )
        return _shared


def attempt(
    *,
    url: str,
    body: str,
    headers: Mapping[str, str],
    policy: TargetPolicy,
    timeout_s: float,
    max_retry_after_s: float,
    resolver: Resolver | None = None,
) -> AttemptResult:
    started = time.perf_counter()

    def took() -> float:
        return (time.perf_counter() - started) * 1000.0

    try:
        target = check(url, policy, resolver=resolver)
    except WebhookUrlForbidden as exc:
        # A name that no longer resolves may come back; one that resolves inside never may.
        if exc.details.get("reason") == "unresolvable":
            return AttemptResult(Verdict.RETRY, took(), error="unresolvable")
        return AttemptResult(Verdict.FAILED, took(), error="target_forbidden")
    content = body.encode()
    last = AttemptResult(Verdict.RETRY, took(), error="connect_error")
    client = _client()
    for address in target.addresses[:3]:
        request_headers = {**headers, "host": target.host_header, "content-type": "application/json"}
        try:
            with client.stream(
                "POST",
                target.url_for(address),
                content=content,
                headers=request_headers,
                timeout=httpx.Timeout(timeout_s),
                extensions={"sni_hostname": target.host} if target.scheme == "https" else {},
            ) as response:
                excerpt = _excerpt(response)
                return _judge(response, excerpt, took(), max_retry_after_s)
        except httpx.ConnectError:
            last = AttemptResult(Verdict.RETRY, took(), error="connect_error")
            continue  # the next checked address, if any
        except httpx.TimeoutException:
            return AttemptResult(Verdict.RETRY, took(), error="timeout")
        except httpx.HTTPError as exc:
            return AttemptResult(Verdict.RETRY, took(), error=_snake(type(exc).__name__))
    return last


def _judge(response: httpx.Response, excerpt: str, duration_ms: float, max_retry_after_s: float) -> AttemptResult:
    code = response.status_code
    if 200 <= code < 300:
        return AttemptResult(Verdict.SUCCEEDED, duration_ms, code, "", excerpt)
    if code == 410:
        return AttemptResult(Verdict.GONE, duration_ms, code, "http_410", excerpt)
    retry_after = None
    if code in (429, 503):
        retry_after = retry_after_s(response.headers.get("retry-after"), max_s=max_retry_after_s)
    return AttemptResult(Verdict.RETRY, duration_ms, code, f"http_{code}", excerpt, retry_after)


def _excerpt(response: httpx.Response) -> str:
    read = bytearray()
    for chunk in response.iter_raw():
        read.extend(chunk)
        if len(read) >= _READ_BYTES:
            break
    text = bytes(read).decode("utf-8", errors="replace").translate(_PRINTABLE)
    return text[:EXCERPT_CHARS]


def retry_after_s(value: str | None, *, max_s: float, now: datetime | None = None) -> float | None:
    """``Retry-After`` as seconds from now (delay-seconds or an HTTP date), within [0, max_s]."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), max_s)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    seconds = (when - (now or datetime.now(UTC))).total_seconds()
    return min(max(seconds, 0.0), max_s)


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")[:64]
