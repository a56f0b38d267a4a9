"""API keys: ``Authorization: Bearer <key>``, looked up by the key's SHA-256."""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone
from rest_framework import authentication, exceptions, throttling
from rest_framework.request import Request

from chat.models import ApiKey

logger = logging.getLogger(__name__)

KEY_PREFIX = "sba_"
#: How stale ``last_used_at`` may be: refreshing it on every request would be a write each.
LAST_USED_RESOLUTION = timedelta(minutes=5)


def digest(raw_key: str) -> str:
    return hashlib.sha256(raw_key.encode()).hexdigest()


def new_raw_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_from_header(value: str | None) -> str | None:
    """The key from an Authorization header value, '' if the header is malformed."""
    if not value:
        return None
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token or len(token) > 200:
        return ""
    return token


#: Verified keys are remembered this long per process: a revoked key stops working within it.
CACHE_TTL_S = 30.0
_CACHE_SIZE = 2_048
_cache: dict[str, tuple[Any, int, float]] = {}
_cache_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class KeyAuth:
    """What a request authenticated with: ``request.auth``. The key's id, never the key."""

    key_id: int


def cached_user_for_key(raw_key: str) -> Any | None:
    """The key's user if this process verified it within the TTL (no database), else None."""
    with _cache_lock:
        cached = _cache.get(digest(raw_key))
    return cached[0] if cached is not None and cached[2] > time.monotonic() else None


def user_for_key(raw_key: str) -> Any | None:
    found = key_for(raw_key)
    return found[0] if found else None


def key_for(raw_key: str) -> tuple[Any, int] | None:
    """The key's user and the key's id, for a valid, unrevoked key of an active user."""
    if not raw_key.startswith(KEY_PREFIX):
        return None
    wanted = digest(raw_key)
    now_s = time.monotonic()
    with _cache_lock:
        cached = _cache.get(wanted)
    if cached is not None and cached[2] > now_s:
        return cached[0], cached[1]
    found = _lookup(wanted)
    with _cache_lock:
        if found is None:
            _cache.pop(wanted, None)
        else:
            if len(_cache) >= _CACHE_SIZE:
                _cache.clear()
            _cache[wanted] = (found[0], found[1], now_s + CACHE_TTL_S)
    return found


def forget_cached_keys() -> None:
    with _cache_lock:
        _cache.clear()


def _lookup(wanted: str) -> tuple[Any, int] | None:
    key = ApiKey.objects.select_related("user").filter(digest=wanted, revoked_at__isnull=True).first()
    if key is None or not hmac.compare_digest(key.digest, wanted) or not key.user.is_active:
        return None
    now = timezone.now()
    if key.last_used_at is None or now - key.last_used_at > LAST_USED_RESOLUTION:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
    return key.user, key.pk


class ApiKeyAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Any, KeyAuth] | None:
        raw = key_from_header(request.META.get("HTTP_AUTHORIZATION"))
        if raw is None:
            return None
        found = key_for(raw) if raw else None
        if found is None:
            raise exceptions.AuthenticationFailed()
        return found[0], KeyAuth(found[1])

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'


class PerKeyRateThrottle(throttling.BaseThrottle):
    """Requests per API key (``API_RATE_PER_KEY``, e.g. ``1200/min``), counted in Redis so that
    every web process counts the same; unauthenticated requests are not counted here.

    A fixed window: one ``INCR`` (and its expiry) per request, in one round trip — DRF's
    SimpleRateThrottle keeps every request's timestamp and reads and rewrites that whole list
    on every request, which at a thousand requests a minute is most of a request's cost. A key
    may send up to twice the rate across a window boundary. An unreachable Redis does not
    refuse requests: it is logged, and they pass.
    """

    _DURATIONS = {"s": 1, "m": 60, "h": 3_600, "d": 86_400}

    def __init__(self) -> None:
        self._wait_s: float | None = None

    @classmethod
    def rate(cls) -> tuple[int, int]:
        count, _, period = str(settings.API_RATE_PER_KEY).partition("/")
        return int(count), cls._DURATIONS[period[:1].lower()]

    def allow_request(self, request: Request, view: Any) -> bool:
        auth = getattr(request, "auth", None)
        if not isinstance(auth, KeyAuth):
            return True
        limit, period_s = self.rate()
        now = time.time()
        window = int(now // period_s)
        key = f"sba:rate:{auth.key_id}:{window}"
        try:
            from chat.redis_store import client

            pipe = client().pipeline(transaction=False)
            pipe.incr(key)
            pipe.expire(key, period_s + 1)
            count = int(pipe.execute()[0])
        except Exception as exc:  # noqa: BLE001 - an unreachable Redis must not refuse every request
            logger.warning("rate limit not checked: %s", type(exc).__name__)
            return True
        if count <= limit:
            return True
        self._wait_s = (window + 1) * period_s - now
        return False

    def wait(self) -> float | None:
        return self._wait_s
