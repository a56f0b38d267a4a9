"""The webhook API: endpoints (create, list, rotate the secret, disable) and the delivery log.

Endpoints and deliveries are their owner's alone: anyone else gets 404, staff included (an
endpoint is where someone's events go). A secret is in the response that creates it, never after.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from chat import selectors
from chat.authentication import KeyAuth
from chat.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from chat.webhooks import services
from core.api import (
    PAGE_PARAMETERS,
    ApiView,
    NewestFirst,
    PagedApiView,
    StrictSerializer,
    TextField,
    paginated,
    parse_id,
)
from core.errors import ApplicationError, ErrorKind


class KeyRequired(ApplicationError):
    code = "api_key_required"
    kind = ErrorKind.INVALID
    message = "Webhook endpoints belong to an API key: call with one."


def endpoint_resource(endpoint: WebhookEndpoint) -> dict[str, Any]:
    return {
        "id": str(endpoint.id),
        "url": endpoint.url,
        "description": endpoint.description,
        "created_at": endpoint.created_at,
        "disabled": endpoint.disabled_at is not None,
        "disabled_at": endpoint.disabled_at,
        "disabled_reason": endpoint.disabled_reason or None,
        "previous_secret_expires_at": endpoint.previous_secret_expires_at,
    }


def delivery_resource(delivery: WebhookDelivery, attempts: list[WebhookAttempt]) -> dict[str, Any]:
    return {
        "id": str(delivery.id),
        "webhook_id": delivery.message_id,
        "run_id": str(delivery.run_id),
        "endpoint_id": str(delivery.endpoint_id) if delivery.endpoint_id else None,
        "url": delivery.url,
        "event_type": delivery.event_type,
        "status": delivery.status,
        "attempts": delivery.attempts,
        "next_attempt_at": delivery.next_attempt_at,
        "last_status_code": delivery.last_status_code,
        "last_error": delivery.last_error or None,
        "created_at": delivery.created_at,
        "finished_at": delivery.finished_at,
        "attempt_log": [
            {
                "number": a.number,
                "started_at": a.started_at,
                "duration_ms": a.duration_ms,
                "status_code": a.status_code,
                "error": a.error or None,
                "excerpt": a.excerpt,
            }
            for a in attempts
        ],
    }


class EndpointOutput(serializers.Serializer[Any]):
    id = serializers.UUIDField()
    url = serializers.CharField()
    description = serializers.CharField()
    created_at = serializers.DateTimeField()
    disabled = serializers.BooleanField()
    disabled_at = serializers.DateTimeField(allow_null=True)
    disabled_reason = serializers.CharField(allow_null=True)
    previous_secret_expires_at = serializers.DateTimeField(allow_null=True)


class EndpointWithSecret(EndpointOutput):
    secret = serializers.CharField(help_text="whsec_…: shown in this response only")


class AttemptOutput(serializers.Serializer[Any]):
    number = serializers.IntegerField()
    started_at = serializers.DateTimeField()
    duration_ms = serializers.FloatField()
    status_code = serializers.IntegerField(allow_null=True)
    error = serializers.CharField(allow_null=True)
    excerpt = serializers.CharField()


class DeliveryOutput(serializers.Serializer[Any]):
    id = serializers.UUIDField()
    webhook_id = serializers.CharField()
    run_id = serializers.UUIDField()
    endpoint_id = serializers.UUIDField(allow_null=True)
    url = serializers.CharField()
    event_type = serializers.CharField()
    status = serializers.ChoiceField(choices=WebhookDelivery.Status.values)
    attempts = serializers.IntegerField()
    next_attempt_at = serializers.DateTimeField(allow_null=True)
    last_status_code = serializers.IntegerField(allow_null=True)
    last_error = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    attempt_log = AttemptOutput(many=True)


def _key_id(request: Request) -> int:
    if not isinstance(request.auth, KeyAuth):
        raise KeyRequired()
    return request.auth.key_id


class EndpointListApi(PagedApiView):
    @extend_schema_serializer(component_name="WebhookEndpointInput")
    class InputSerializer(StrictSerializer):
        url = TextField(max_length=2000)
        description = TextField(required=False, allow_blank=True, max_length=200)

    @extend_schema(
        operation_id="webhook_endpoints_list",
        parameters=list(PAGE_PARAMETERS),
        responses=paginated(EndpointOutput),
        summary="Your webhook endpoints, newest first",
    )
    def get(self, request: Request) -> Response:
        paginator = NewestFirst()
        endpoints = WebhookEndpoint.objects.filter(owner_id=request.user.pk)
        page = paginator.paginate_queryset(endpoints, request, view=self)
        return paginator.get_paginated_response([endpoint_resource(e) for e in page or []])

    @extend_schema(
        request=InputSerializer,
        responses={201: EndpointWithSecret},
        summary="Register an endpoint for this API key's runs (its secret is shown once)",
    )
    def post(self, request: Request) -> Response:
        form = self.InputSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        endpoint, secret = services.endpoint_create(
            user=request.user,
            api_key_id=_key_id(request),
            url=form.validated_data["url"],
            description=form.validated_data.get("description", ""),
        )
        return Response({**endpoint_resource(endpoint), "secret": secret}, status=status.HTTP_201_CREATED)


class EndpointDetailApi(ApiView):
    @extend_schema(responses=EndpointOutput, summary="One of your webhook endpoints")
    def get(self, request: Request, endpoint_id: str) -> Response:
        endpoint = services.endpoint_get(user=request.user, endpoint_id=parse_id(endpoint_id))
        return Response(endpoint_resource(endpoint))


class EndpointRotateApi(ApiView):
    @extend_schema(
        request=None,
        responses=EndpointWithSecret,
        summary="A new secret (shown once); the old one keeps signing beside it for a grace period",
    )
    def post(self, request: Request, endpoint_id: str) -> Response:
        endpoint = services.endpoint_get(user=request.user, endpoint_id=parse_id(endpoint_id))
        endpoint, secret = services.endpoint_rotate_secret(endpoint=endpoint)
        return Response({**endpoint_resource(endpoint), "secret": secret})


class EndpointDisableApi(ApiView):
    @extend_schema(request=None, responses=EndpointOutput, summary="Stop sending to an endpoint (idempotent)")
    def post(self, request: Request, endpoint_id: str) -> Response:
        endpoint = services.endpoint_get(user=request.user, endpoint_id=parse_id(endpoint_id))
        return Response(endpoint_resource(services.endpoint_disable(endpoint=endpoint)))


class RunDeliveriesApi(ApiView):
    @extend_schema(responses=DeliveryOutput(many=True), summary="A run's webhook deliveries and their attempts")
    def get(self, request: Request, run_id: str) -> Response:
        run = selectors.run_get(user=request.user, run_id=parse_id(run_id))
        deliveries = list(WebhookDelivery.objects.filter(run=run, owner_id=request.user.pk))
        attempts: dict[Any, list[WebhookAttempt]] = {d.id: [] for d in deliveries}
        for attempt in WebhookAttempt.objects.filter(delivery__in=deliveries):
            attempts[attempt.delivery_id].append(attempt)
        return Response([delivery_resource(d, attempts[d.id]) for d in deliveries])


class RedeliverApi(ApiView):
    @extend_schema(
        request=None, responses={202: DeliveryOutput}, summary="Send a delivery's event again (same webhook-id)"
    )
    def post(self, request: Request, delivery_id: str) -> Response:
        delivery = services.delivery_redeliver(user=request.user, delivery_id=parse_id(delivery_id))
        attempts = list(WebhookAttempt.objects.filter(delivery=delivery))
        return Response(delivery_resource(delivery, attempts), status=status.HTTP_202_ACCEPTED)
