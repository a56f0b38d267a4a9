from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from chat import apis, sse
from chat.webhooks import apis as webhooks

urlpatterns = [
    path("chat", apis.ChatApi.as_view(), name="chat"),
    path("runs/<str:run_id>", apis.RunDetailApi.as_view(), name="run-detail"),
    path("runs/<str:run_id>/events", sse.run_events, name="run-events"),
    path("runs/<str:run_id>/cancel", apis.RunCancelApi.as_view(), name="run-cancel"),
    path("runs/<str:run_id>/trace", apis.RunTraceApi.as_view(), name="run-trace"),
    path("runs/<str:run_id>/trace/reasoning", apis.RunReasoningApi.as_view(), name="run-reasoning"),
    path("runs/<str:run_id>/feedback", apis.FeedbackApi.as_view(), name="run-feedback"),
    path("runs/<str:run_id>/webhook-deliveries", webhooks.RunDeliveriesApi.as_view(), name="run-webhook-deliveries"),
    path("webhook-deliveries/<str:delivery_id>/redeliver", webhooks.RedeliverApi.as_view(), name="webhook-redeliver"),
    path("webhook-endpoints", webhooks.EndpointListApi.as_view(), name="webhook-endpoints"),
    path("webhook-endpoints/<str:endpoint_id>", webhooks.EndpointDetailApi.as_view(), name="webhook-endpoint"),
    path(
        "webhook-endpoints/<str:endpoint_id>/rotate-secret",
        webhooks.EndpointRotateApi.as_view(),
        name="webhook-endpoint-rotate",
    ),
    path(
        "webhook-endpoints/<str:endpoint_id>/disable",
        webhooks.EndpointDisableApi.as_view(),
        name="webhook-endpoint-disable",
    ),
    path("sessions", apis.SessionListApi.as_view(), name="session-list"),
    path("sessions/<str:session_id>", apis.SessionDetailApi.as_view(), name="session-detail"),
    path("sessions/<str:session_id>/runs", apis.SessionRunsApi.as_view(), name="session-runs"),
    path("healthz", apis.HealthApi.as_view(), name="healthz"),
    path("readyz", apis.ReadyApi.as_view(), name="readyz"),
    path("schema", SpectacularAPIView.as_view(), name="schema"),
    path("docs", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
]
