"""The trace console: runs with their steps, tool invocations and timeline. Read-only."""

from __future__ import annotations

from django.contrib import admin

from core.admin import ReadOnlyAdmin, ReadOnlyInline
from traces.models import AgentStep, ChatSession, Feedback, Run, ToolInvocation, TraceEvent


class AgentStepInline(ReadOnlyInline):
    model = AgentStep
    fields = (
        "index",
        "purpose",
        "role",
        "message_count",
        "has_text",
        "tool_call_names",
        "input_tokens",
        "output_tokens",
        "duration_ms",
        "error_code",
    )
    readonly_fields = fields


class ToolInvocationInline(ReadOnlyInline):
    model = ToolInvocation
    fields = (
        "tool_call_id",
        "tool",
        "status",
        "evidence_status",
        "error_code",
        "duration_ms",
        "request_bytes",
        "result_bytes",
    )
    readonly_fields = fields


class TraceEventInline(ReadOnlyInline):
    model = TraceEvent
    fields = ("at", "category", "name", "details")
    readonly_fields = fields


class FeedbackInline(ReadOnlyInline):
    model = Feedback
    fields = ("owner", "rating", "comment", "created_at")
    readonly_fields = fields


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "created_at",
        "owner",
        "intent",
        "status",
        "outcome",
        "failure_code",
        "duration_ms",
        "tool_calls",
    )
    list_filter = ("status", "intent", "outcome", ("created_at", admin.DateFieldListFilter), "owner")
    search_fields = ("id", "question")
    date_hierarchy = "created_at"
    list_select_related = ("owner",)
    readonly_fields = [f.name for f in Run._meta.fields]
    inlines = [AgentStepInline, ToolInvocationInline, TraceEventInline, FeedbackInline]


@admin.register(ChatSession)
class ChatSessionAdmin(ReadOnlyAdmin):
    list_display = ("id", "title", "owner", "created_at")
    search_fields = ("id", "title")
    readonly_fields = [f.name for f in ChatSession._meta.fields]
