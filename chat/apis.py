"""The REST API. Views are thin: validate → call a service or selector → represent."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_serializer, inline_serializer
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny, IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response

from chat import selectors, services
from chat.authentication import KeyAuth
from chat.representations import run_resource, session_resource
from chat.webhooks.services import webhook_url_check
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
from harness.application import MAX_QUESTION_CHARS
from traces.models import Feedback, RunStatus


class RunOutput(serializers.Serializer[Any]):
    """Documentation of the run resource (built by chat.representations.run_resource)."""

    id = serializers.UUIDField()
    session_id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=[s.value for s in RunStatus])
    intent = serializers.CharField(allow_null=True)
    outcome = serializers.CharField(allow_null=True)
    question = serializers.CharField()
    content = serializers.JSONField(allow_null=True)
    fallback_reason = serializers.CharField(allow_null=True)
    failure = serializers.JSONField(allow_null=True)
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    duration_ms = serializers.FloatField(allow_null=True)
    usage = serializers.JSONField()
    links = serializers.JSONField()


class ChatApi(ApiView):
    @extend_schema_serializer(component_name="ChatInput")
    class InputSerializer(StrictSerializer):
        question = TextField(max_length=MAX_QUESTION_CHARS, trim_whitespace=True)
        session_id = serializers.UUIDField(required=False)
        metadata = serializers.DictField(required=False, child=serializers.JSONField())
        webhook_url = TextField(required=False, max_length=2000)

        def validate_metadata(self, value: dict[str, Any]) -> dict[str, Any]:
            if len(value) > 20 or len(str(value)) > 4_000:
                raise serializers.ValidationError("At most 20 keys and 4000 characters.")
            return value

    @extend_schema(
        request=InputSerializer,
        responses={202: RunOutput, 200: RunOutput},
        parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER, required=False)],
        summary="Ask a question: creates a queued run",
    )
    def post(self, request: Request) -> Response:
        form = self.InputSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        key = (request.headers.get("Idempotency-Key") or "").strip() or None
        if key is not None and len(key) > 200:
            raise serializers.ValidationError({"Idempotency-Key": ["At most 200 characters."]})
        webhook_url = form.validated_data.get("webhook_url") or ""
        if webhook_url:
            webhook_url = webhook_url_check(webhook_url)
        submitted = services.chat_submit(
            user=request.user,
            question=form.validated_data["question"],
            session_id=form.validated_data.get("session_id"),
            metadata=form.validated_data.get("metadata"),
            idempotency_key=key,
            webhook_url=webhook_url,
            api_key_id=request.auth.key_id if isinstance(request.auth, KeyAuth) else None,
        )
        body = run_resource(submitted.run)
        body["run_id"] = body["id"]
        return Response(body, status=status.HTTP_202_ACCEPTED if submitted.created else status.HTTP_200_OK)


class RunDetailApi(ApiView):
    @extend_schema(responses=RunOutput, summary="Poll a run")
    def get(self, request: Request, run_id: str) -> Response:
        run = selectors.run_get(user=request.user, run_id=parse_id(run_id))
        if run.status in ("queued", "running") and services.run_sweep_stale(run=run).ended:
            run.refresh_from_db()
        return Response(run_resource(run))


class RunCancelApi(ApiView):
    @extend_schema(request=None, responses={202: RunOutput, 200: RunOutput}, summary="Cancel a run (idempotent)")
    def post(self, request: Request, run_id: str) -> Response:
        run = selectors.run_get(user=request.user, run_id=parse_id(run_id))
        was_terminal = run.is_terminal
        run = services.run_cancel(run=run)
        return Response(run_resource(run), status=status.HTTP_200_OK if was_terminal else status.HTTP_202_ACCEPTED)


class RunTraceApi(ApiView):
    @extend_schema(
        responses=inline_serializer(
            "RunTrace",
            {
                "run": RunOutput(),
                "steps": serializers.ListField(child=serializers.JSONField()),
                "tool_invocations": serializers.ListField(child=serializers.JSONField()),
                "timeline": serializers.ListField(child=serializers.JSONField()),
            },
        ),
        summary="A run's trace: steps, tool invocations and timeline (metadata only)",
    )
    def get(self, request: Request, run_id: str) -> Response:
        run = selectors.run_get(user=request.user, run_id=parse_id(run_id))
        return Response({"run": run_resource(run), **selectors.run_trace(run=run)})


class RunReasoningApi(ApiView):
    permission_classes = [IsAdminUser]

    @extend_schema(
        responses=inline_serializer(
            "RunReasoning",
            {"run_id": serializers.UUIDField(), "steps": serializers.ListField(child=serializers.JSONField())},
        ),
        summary="Restricted: the provider's reasoning and assistant text per model step (staff only)",
    )
    def get(self, request: Request, run_id: str) -> Response:
        run = selectors.run_get(user=request.user, run_id=parse_id(run_id))
        return Response({"run_id": str(run.id), "steps": selectors.run_reasoning(run=run)})


class FeedbackApi(ApiView):
    @extend_schema_serializer(component_name="FeedbackInput")
    class InputSerializer(StrictSerializer):
        rating = serializers.ChoiceField(choices=Feedback.Rating.choices)
        comment = TextField(max_length=2_000, required=False, allow_blank=True, default="")

    @extend_schema(
        request=InputSerializer,
        responses={
            201: inline_serializer(
                "FeedbackOut",
                {
                    "run_id": serializers.UUIDField(),
                    "rating": serializers.CharField(),
                    "comment": serializers.CharField(),
                },
            )
        },
        summary="Rate a run",
    )
    def post(self, request: Request, run_id: str) -> Response:
        run = selectors.run_get(user=request.user, run_id=parse_id(run_id))
        form = self.InputSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        feedback = services.feedback_submit(user=request.user, run=run, **form.validated_data)
        return Response(
            {"run_id": str(run.id), "rating": feedback.rating, "comment": feedback.comment},
            status=status.HTTP_201_CREATED,
        )


class SessionOutput(serializers.Serializer[Any]):
    id = serializers.UUIDField()
    title = serializers.CharField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    links = serializers.JSONField()


class SessionListApi(PagedApiView):
    @extend_schema(
        operation_id="sessions_list",
        parameters=list(PAGE_PARAMETERS),
        responses=paginated(SessionOutput),
        summary="Your sessions, newest first (cursor-paginated)",
    )
    def get(self, request: Request) -> Response:
        paginator = NewestFirst()
        page = paginator.paginate_queryset(selectors.session_list(user=request.user), request, view=self)
        return paginator.get_paginated_response([session_resource(s) for s in page or []])


class SessionDetailApi(ApiView):
    @extend_schema(responses=SessionOutput, summary="One of your sessions")
    def get(self, request: Request, session_id: str) -> Response:
        session = selectors.session_get(user=request.user, session_id=parse_id(session_id))
        return Response(session_resource(session))


class SessionRunsApi(PagedApiView):
    @extend_schema(
        parameters=list(PAGE_PARAMETERS),
        responses=paginated(RunOutput),
        summary="A session's runs, newest first (cursor-paginated)",
    )
    def get(self, request: Request, session_id: str) -> Response:
        session = selectors.session_get(user=request.user, session_id=parse_id(session_id))
        paginator = NewestFirst()
        page = paginator.paginate_queryset(selectors.session_runs(session=session), request, view=self)
        return paginator.get_paginated_response([run_resource(r) for r in page or []])


class HealthApi(ApiView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]

    @extend_schema(responses=inline_serializer("Health", {"status": serializers.CharField()}), summary="Liveness")
    def get(self, request: Request) -> Response:
        return Response({"status": "ok"})


class ReadyApi(ApiView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]

    @extend_schema(
        responses=inline_serializer("Ready", {"status": serializers.CharField(), "checks": serializers.JSONField()}),
        summary="Readiness: database, Redis, broker and model provider; runs workers and queue depth (advisory)",
    )
    def get(self, request: Request) -> Response:
        from chat.health import is_ready, readiness

        checks = readiness()
        ready = is_ready(checks)
        return Response({"status": "ready" if ready else "unavailable", "checks": checks}, status=200 if ready else 503)
