"""``GET /metrics``: every process's metrics in the Prometheus text format, for the operator.

Not part of the API (not JSON, not under ``/api/``, not in its schema) and not public:

- with ``METRICS_TOKEN`` set, only a request with ``Authorization: Bearer <token>`` gets them,
  wherever it comes from (401 otherwise);
- without it, only a direct connection from this machine (a loopback peer and no proxy header:
  a reverse proxy on the same host forwards the world's requests from loopback too) (403
  otherwise).

The counters and histograms are the sum of the files every process wrote (``chat.metrics``);
the queue depth is read from the broker at each scrape.
"""

from __future__ import annotations

import functools
import hmac
import ipaddress
import logging
from collections.abc import Iterable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_safe
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from chat import metrics, selectors
from core.errors import envelope

logger = logging.getLogger(__name__)

#: headers a proxy adds; a request carrying one did not come straight from this machine
PROXY_HEADERS = ("HTTP_FORWARDED", "HTTP_X_FORWARDED_FOR", "HTTP_X_REAL_IP")


class QueueDepth(Collector):
    """Messages waiting in each of the service's queues, read when scraped. Absent (not 0) when
    the broker cannot be read: an unknown depth is not an empty queue."""

    def collect(self) -> Iterable[GaugeMetricFamily]:
        try:
            depths = selectors.queue_depths()
        except Exception as exc:  # noqa: BLE001 - the rest of the scrape still answers
            logger.warning("metrics: queue depth unreadable: %s", type(exc).__name__)
            return
        family = GaugeMetricFamily(
            f"{metrics.PREFIX}_queue_depth", "Messages waiting in the queue for a worker.", labels=["queue"]
        )
        for queue, depth in depths.items():
            family.add_metric([queue], depth)
        yield family


@functools.cache
def registry() -> CollectorRegistry:
    """What a scrape reads: every process's files, and the broker's queues."""
    collected = CollectorRegistry(auto_describe=False)
    multiprocess.MultiProcessCollector(collected, path=str(settings.METRICS_DIR))  # type: ignore[no-untyped-call]
    collected.register(QueueDepth())
    return collected


def _denied(request: HttpRequest) -> HttpResponse | None:
    token: str = settings.METRICS_TOKEN
    if token:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode()):
            return None
        response = JsonResponse(envelope("not_authenticated", "A valid metrics token is required."), status=401)
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    if not any(header in request.META for header in PROXY_HEADERS) and _loopback(request.META.get("REMOTE_ADDR")):
        return None
    return JsonResponse(envelope("permission_denied", "Metrics are served to this machine only."), status=403)


def _loopback(address: object) -> bool:
    if not isinstance(address, str):
        return False
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


@require_safe
def scrape(request: HttpRequest) -> HttpResponse:
    denied = _denied(request)
    if denied is not None:
        return denied
    response = HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE_LATEST)
    response["Cache-Control"] = "no-store"
    return response
