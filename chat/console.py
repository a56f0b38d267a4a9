"""The trace console: the Django admin's pages for runs, their sessions, tool calls and feedback.

Everything here is read-only but for two actions, which call the API's own services: cancel a
run, redeliver a webhook. A run's page answers where its time went (the waterfall), what it
called and got back (each tool call's arguments and a bounded summary of its result, for staff,
from the canonical invocation while it is kept), why it ended as it did (the guard findings, the
fallback reason) and what it published (the report, rendered). It lives in the chat app because
it composes what the run's lifecycle, its webhooks and its tools stored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from django.contrib import admin, messages
from django.db.models import Exists, OuterRef, QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from chat import services, waterfall
from chat.models import WebhookAttempt, WebhookDelivery
from chat.webhooks import services as webhook_services
from core.admin import ReadOnlyAdmin, ReadOnlyInline
from traces.models import (
    ACTIVE_STATUSES,
    AgentStep,
    ChatSession,
    Feedback,
    ReasoningAudit,
    Run,
    ToolInvocation,
    TraceEvent,
)

#: What a tool call's result summary may show, in characters.
RESULT_SUMMARY_CHARS = 1200
ARGUMENTS_CHARS = 2000
#: Run fields shown formatted ("1.47 s"), not as raw floats.
RAW_TIMES = ("duration_ms", "model_ms", "backend_ms")
#: What each evidence-guard finding code means, for the run page.
FINDING_MEANINGS = {
    "no_conclusion": "the draft has no conclusion",
    "no_claims": "the draft makes no claim evidence could support",
    "claim_without_citation": "the claim cites no evidence",
    "quote_too_short": "the quote is too short to identify evidence",
    "quote_not_found": "the quote does not occur in the cited result",
    "instruction_like_evidence": "the quoted text addresses an assistant; it is not evidence",
    "unknown_invocation": "the citation names a tool call this run did not make",
}


def ms(value: float | None) -> str:
    return waterfall.format_ms(value)


# --- lists -------------------------------------------------------------------------------------


class FallbackReasonFilter(admin.SimpleListFilter):
    title = "fallback reason"
    parameter_name = "fallback_reason"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        from harness.release import FallbackReason

        return [(r.value, r.value.replace("_", " ")) for r in FallbackReason]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run]:
        return queryset.filter(fallback_reason=self.value()) if self.value() else queryset


class FeedbackFilter(admin.SimpleListFilter):
    title = "feedback"
    parameter_name = "feedback"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("up", "thumbs up"), ("down", "thumbs down"), ("any", "any"), ("none", "none")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run]:
        value = self.value()
        if value in ("up", "down"):
            return queryset.filter(Exists(Feedback.objects.filter(run=OuterRef("pk"), rating=value)))
        if value == "any":
            return queryset.filter(Exists(Feedback.objects.filter(run=OuterRef("pk"))))
        if value == "none":
            return queryset.exclude(Exists(Feedback.objects.filter(run=OuterRef("pk"))))
        return queryset


class TokensFilter(admin.SimpleListFilter):
    title = "tokens"
    parameter_name = "tokens"
    BANDS = {"lt1k": (0, 1_000), "1k-10k": (1_000, 10_000), "ge10k": (10_000, None)}

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("lt1k", "< 1k"), ("1k-10k", "1k–10k"), ("ge10k", "≥ 10k")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run]:
        band = self.BANDS.get(self.value() or "")
        if band is None:
            return queryset
        from django.db.models import F

        queryset = queryset.alias(tokens=F("input_tokens") + F("output_tokens")).filter(tokens__gte=band[0])
        return queryset.filter(tokens__lt=band[1]) if band[1] is not None else queryset


class RunInline(ReadOnlyInline):
    """A session's runs, newest first, each linked to its page."""

    model = Run
    fields = ("created_at", "question_short", "status", "outcome", "duration")
    readonly_fields = fields
    show_change_link = True
    ordering = ("-created_at",)

    @admin.display(description="question")
    def question_short(self, run: Run) -> str:
        return _short(run.question, 120)

    @admin.display(description="duration")
    def duration(self, run: Run) -> str:
        return ms(run.duration_ms)


@admin.register(ChatSession)
class ChatSessionAdmin(ReadOnlyAdmin):
    list_display = ("id", "title", "owner", "created_at")
    list_select_related = ("owner",)
    search_fields = ("id", "title")
    readonly_fields = [f.name for f in ChatSession._meta.fields]
    inlines = [RunInline]


@admin.register(ToolInvocation)
class ToolInvocationAdmin(ReadOnlyAdmin):
    list_display = (
        "tool",
        "status",
        "evidence_status",
        "error_code",
        "duration",
        "step_index",
        "run_link",
        "created_at",
    )
    list_filter = ("tool", "status", "evidence_status", "error_code")
    list_select_related = ("run",)
    search_fields = ("run__id", "tool_call_id")
    ordering = ("-id",)
    readonly_fields = [f.name for f in ToolInvocation._meta.fields]
    show_full_result_count = False

    @admin.display(description="duration", ordering="duration_ms")
    def duration(self, row: ToolInvocation) -> str:
        return ms(row.duration_ms)

    @admin.display(description="run")
    def run_link(self, row: ToolInvocation) -> SafeString:
        return format_html('<a href="../run/{}/change/">{}</a>', row.run_id, str(row.run_id)[:8])


@admin.register(Feedback)
class FeedbackAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "rating", "comment_short", "owner", "run_link")
    list_filter = ("rating", ("created_at", admin.DateFieldListFilter))
    list_select_related = ("owner",)
    search_fields = ("comment", "run__id")
    ordering = ("-created_at",)
    readonly_fields = [f.name for f in Feedback._meta.fields]

    @admin.display(description="comment")
    def comment_short(self, row: Feedback) -> str:
        return _short(row.comment, 120)

    @admin.display(description="run")
    def run_link(self, row: Feedback) -> SafeString:
        return format_html('<a href="../run/{}/change/">{}</a>', row.run_id, str(row.run_id)[:8])


# --- the run ----------------------------------------------------------------------------------


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    change_form_template = "admin/traces/run/console.html"
    list_display = (
        "created_at",
        "question_short",
        "owner_name",
        "intent",
        "status",
        "outcome",
        "fallback_reason",
        "duration",
        "tokens",
        "tool_calls",
    )
    list_filter = (
        "status",
        "intent",
        "outcome",
        FallbackReasonFilter,
        FeedbackFilter,
        TokensFilter,
        ("created_at", admin.DateFieldListFilter),
        "owner",
    )
    search_fields = ("id", "question")
    # owners prefetched, not joined: a join lets the database start from the users and sort
    # every run, where alone it reads the newest runs off the created_at index
    list_select_related = False
    ordering = ("-created_at",)
    list_per_page = 50
    show_full_result_count = False
    readonly_fields = [
        *(f.name for f in Run._meta.fields if f.name not in RAW_TIMES),
        "duration",
        "in_models",
        "in_tools",
    ]
    fieldsets = [("Stored fields", {"fields": tuple(readonly_fields), "classes": ["collapse"]})]
    actions = ["cancel_runs"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Run]:
        queryset = super().get_queryset(request)
        # the list shows none of the large JSON columns; the run page reads the whole row
        if getattr(request, "resolver_match", None) and request.resolver_match.url_name.endswith("_changelist"):  # type: ignore[union-attr]
            queryset = queryset.defer("content", "published_result", "metadata").prefetch_related("owner")
        return queryset

    @admin.display(description="question")
    def question_short(self, run: Run) -> str:
        return _short(run.question, 80)

    @admin.display(description="owner", ordering="owner__username")
    def owner_name(self, run: Run) -> str:
        return str(run.owner)

    @admin.display(description="duration", ordering="duration_ms")
    def duration(self, run: Run) -> str:
        return ms(run.duration_ms)

    @admin.display(description="in models")
    def in_models(self, run: Run) -> str:
        return ms(run.model_ms)

    @admin.display(description="in tools")
    def in_tools(self, run: Run) -> str:
        return ms(run.backend_ms)

    @admin.display(description="tokens")
    def tokens(self, run: Run) -> int:
        return run.input_tokens + run.output_tokens

    @admin.action(description="Cancel the selected runs (queued or running)", permissions=["view"])
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        asked = 0
        for run in queryset.filter(status__in=ACTIVE_STATUSES):
            services.run_cancel(run=run)
            asked += 1
        self.message_user(request, f"Asked {asked} run(s) to stop.", messages.SUCCESS)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> Any:
        run = self.get_object(request, object_id)
        if run is not None and request.method == "POST" and "redeliver" in request.POST:
            return self._redeliver(request, run, request.POST["redeliver"])
        context = dict(extra_context or {})
        if run is not None:
            user = request.user
            context.update(run_console(run, staff=bool(user.is_staff), superuser=bool(user.is_superuser)))
        return super().change_view(request, object_id, form_url, extra_context=context)

    def _redeliver(self, request: HttpRequest, run: Run, delivery_id: str) -> Any:
        from django.http import HttpResponseRedirect

        delivery = run.webhook_deliveries.filter(id=delivery_id).first()
        if delivery is None:
            self.message_user(request, "No such delivery for this run.", messages.ERROR)
        else:
            try:
                webhook_services.delivery_redeliver(user=delivery.owner, delivery_id=delivery.id)
                self.message_user(request, "The webhook was scheduled for delivery again.", messages.SUCCESS)
            except Exception as exc:  # noqa: BLE001 - the service's refusal, told in words
                self.message_user(request, f"Not redelivered: {type(exc).__name__}.", messages.ERROR)
        return HttpResponseRedirect(request.path)


def run_console(run: Run, *, staff: bool, superuser: bool = False) -> dict[str, Any]:
    """Everything the run page shows beside Django's own field list (a fixed number of queries).
    The provider's reasoning and assistant text are shown to superusers only."""
    steps = list(AgentStep.objects.filter(run=run).order_by("index"))
    tools = list(ToolInvocation.objects.filter(run=run).order_by("id"))
    timeline = list(TraceEvent.objects.filter(run=run).order_by("at", "id"))
    deliveries = list(WebhookDelivery.objects.filter(run=run).order_by("created_at"))
    attempts = list(WebhookAttempt.objects.filter(delivery__run=run).order_by("started_at"))
    feedback = list(Feedback.objects.filter(run=run).select_related("owner"))
    started = next((e for e in timeline if e.name == "agent.started"), None)
    titles = str(started.details.get("runbook_titles", "")) if started is not None else ""
    return {
        "waterfall": waterfall.build(run, steps, tools, timeline, attempts),
        "summary": _summary(run),
        "report": render_content(run.content),
        "runbooks": [t for t in titles.split(" | ") if t],
        "steps": [_step_row(s) for s in steps],
        "tool_calls": _tool_rows(run, tools, staff=staff),
        "findings": _findings(timeline),
        "timeline": [_event_row(run, e) for e in timeline],
        "deliveries": _delivery_rows(deliveries, attempts),
        "feedback": feedback,
        "reasoning": list(ReasoningAudit.objects.filter(run=run).order_by("step_index")) if superuser else None,
    }


def _summary(run: Run) -> list[tuple[str, str]]:
    queue = waterfall._ms(run.started_at, run.created_at)
    rows = [
        ("status", f"{run.status} · {run.outcome or '—'}"),
        ("intent", run.intent or "—"),
        ("queue wait", ms(queue)),
        ("duration", ms(run.duration_ms)),
        ("in models", ms(run.model_ms)),
        ("in tools (summed over parallel calls)", ms(run.backend_ms)),
        ("tokens", f"{run.input_tokens} in · {run.output_tokens} out"),
        ("calls", f"{run.model_calls} model ({run.model_retries} retried) · {run.tool_calls} tool"),
    ]
    if run.fallback_reason:
        rows.append(("fallback reason", run.fallback_reason))
    if run.failure_code:
        rows.append(("failure", f"{run.failure_code}: {run.failure_message}"))
    return rows


def _step_row(step: AgentStep) -> dict[str, Any]:
    return {
        "index": step.index,
        "purpose": step.purpose.replace("_", " "),
        "role": step.role,
        "started": ms(step.started_ms),
        "duration": ms(step.duration_ms),
        "input_tokens": step.input_tokens,
        "output_tokens": step.output_tokens,
        "tools": ", ".join(step.tool_call_names) or "—",
        "error": step.error_code,
    }


def _tool_rows(run: Run, tools: Sequence[ToolInvocation], *, staff: bool) -> list[dict[str, Any]]:
    """Each call with, for staff, its arguments and a bounded summary of its result, read from
    the canonical invocation (kept for a day; business data, so never shown to non-staff)."""
    canonical: dict[str, Any] = {}
    if staff and tools:
        canonical = _canonical(str(run.id), [t.tool_call_id for t in tools])
    rows = []
    for tool in tools:
        item = canonical.get(tool.tool_call_id)
        rows.append(
            {
                "id": tool.tool_call_id,
                "tool": tool.tool,
                "step": tool.step_index if tool.step_index is not None else "—",
                "status": tool.status,
                "evidence": tool.evidence_status or "—",
                "error": tool.error_code,
                "started": ms(tool.started_ms),
                "duration": ms(tool.duration_ms),
                "arguments": _arguments(item) if item is not None else None,
                "result": _short(_compact(item.raw_result), RESULT_SUMMARY_CHARS) if item is not None else None,
                "kept": item is not None,
            }
        )
    return rows


def _canonical(run_id: str, call_ids: Sequence[str]) -> dict[str, Any]:
    from chat.redis_store import RedisInvocationStore

    store = RedisInvocationStore(ttl_s=1)
    found: dict[str, Any] = {}
    try:
        for call_id in call_ids:
            item = store.get(run_id, call_id)
            if item is not None:
                found[call_id] = item
    except Exception:  # noqa: BLE001 - Redis down: the page still shows what the database has
        return {}
    return found


def _arguments(item: Any) -> str:
    request = dict(item.request)
    text = request.get("arguments_text")
    if isinstance(text, str):
        try:
            return _short(orjson.dumps(orjson.loads(text), option=orjson.OPT_INDENT_2).decode(), ARGUMENTS_CHARS)
        except orjson.JSONDecodeError:
            return _short(text, ARGUMENTS_CHARS)
    return _short(_compact(request), ARGUMENTS_CHARS)


def _compact(value: Any) -> str:
    try:
        return orjson.dumps(value, default=str).decode()
    except TypeError:
        return str(value)


def _findings(timeline: Sequence[TraceEvent]) -> list[dict[str, Any]]:
    check = 0
    found = []
    for event in timeline:
        if event.name in ("evidence.checked", "evidence.rechecked"):
            check += 1
        elif event.name == "evidence.finding":
            code = str(event.details.get("code", ""))
            claim, citation = event.details.get("claim"), event.details.get("citation")
            found.append(
                {
                    "check": "first" if check <= 1 else "after repair",
                    "claim": int(claim) + 1 if isinstance(claim, int) else "—",
                    "citation": int(citation) + 1 if isinstance(citation, int) else "—",
                    "code": code,
                    "meaning": FINDING_MEANINGS.get(code, ""),
                }
            )
    return found


def _event_row(run: Run, event: TraceEvent) -> dict[str, Any]:
    offset = waterfall._ms(event.at, run.created_at)
    details = ", ".join(f"{k}={v}" for k, v in sorted(event.details.items()) if k != "runbook_titles")
    return {"at": ms(offset), "category": event.category, "name": event.name, "details": details}


def _delivery_rows(deliveries: Sequence[WebhookDelivery], attempts: Sequence[WebhookAttempt]) -> list[dict[str, Any]]:
    by_delivery: dict[Any, list[WebhookAttempt]] = {}
    for attempt in attempts:
        by_delivery.setdefault(attempt.delivery_id, []).append(attempt)
    return [
        {
            "id": str(d.id),
            "target": d.target,
            "status": d.status,
            "attempts": [
                {
                    "number": a.number,
                    "status_code": a.status_code or "—",
                    "error": a.error,
                    "duration": ms(a.duration_ms),
                }
                for a in by_delivery.get(d.id, [])
            ],
            "can_redeliver": d.status != WebhookDelivery.Status.PENDING,
        }
        for d in deliveries
    ]


# --- the published content, as a report ---------------------------------------------------------


def render_content(content: Mapping[str, Any] | None) -> SafeString:
    """The run's published content as HTML (escaped): a report's sections, or the message."""
    if not content:
        return mark_safe("<p>Nothing was published.</p>")
    payload = content.get("payload") or {}
    parts: list[SafeString] = [format_html('<p class="sba-type">{}</p>', content.get("content_type", ""))]
    for key, value in payload.items():
        title = str(key).replace("_", " ")
        if key == "findings" and isinstance(value, list):
            parts.append(format_html("<h3>{}</h3><ol>{}</ol>", title, _findings_html(value)))
        elif isinstance(value, str):
            parts.append(format_html("<h3>{}</h3><p>{}</p>", title, value))
        elif isinstance(value, list):
            items = format_html_join("", "<li>{}</li>", ((_item_text(v),) for v in value))
            parts.append(format_html("<h3>{}</h3><ul>{}</ul>", title, items) if value else SafeString())
        elif value not in (None, {}, ""):
            parts.append(format_html("<h3>{}</h3><p>{}</p>", title, _item_text(value)))
    return SafeString("".join(parts))


def _findings_html(findings: list[Any]) -> SafeString:
    rows = []
    for finding in findings:
        if not isinstance(finding, Mapping):
            rows.append(format_html("<li>{}</li>", _item_text(finding)))
            continue
        quotes = format_html_join(
            "",
            "<blockquote><code>{}</code> {}</blockquote>",
            ((e.get("tool", ""), e.get("quote", "")) for e in finding.get("evidence", []) if isinstance(e, Mapping)),
        )
        rows.append(format_html("<li>{}{}</li>", finding.get("statement", ""), quotes))
    return SafeString("".join(rows))


def _item_text(value: Any) -> str:
    if isinstance(value, Mapping):
        return " · ".join(f"{k}: {v}" for k, v in value.items() if v not in (None, ""))
    return str(value)


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
