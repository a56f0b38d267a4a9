"""The knowledge console: runbooks are edited here; documents, chunks and logs are read-only,
but for approving uploads (the API's own service: ``knowledge.services.document_approve``).

Runbooks apply to new diagnosis runs a few seconds after they are saved (the matcher notices the
change), so the change page previews the body as the agent receives it.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator

from core.admin import ReadOnlyAdmin  # ingestion, not the admin, writes these rows
from core.errors import QueueUnavailable
from harness.ports import Runbook as RunbookSpec
from harness.prompts import agent_instructions
from knowledge import services
from knowledge.models import Chunk, Document, LogEntry, Runbook
from knowledge.runbooks import SECTIONS, missing_sections
from knowledge.services import knowledge_rebuild

#: What the agent's instructions keep of all matched runbooks together (harness.prompts).
PROMPT_BUDGET_CHARS = 4_000


class RunbookForm(forms.ModelForm):  # type: ignore[type-arg]
    """The runbook form: line endings normalised, so an edit in a browser compares equal to
    the same text loaded from a file."""

    class Meta:
        model = Runbook
        fields = ("slug", "title", "body", "enabled")
        widgets = {"body": forms.Textarea(attrs={"rows": 32, "cols": 110, "style": "font-family: monospace"})}

    def clean_title(self) -> str:
        return " ".join(str(self.cleaned_data["title"]).split())

    def clean_body(self) -> str:
        body = str(self.cleaned_data["body"]).replace("\r\n", "\n").replace("\r", "\n").strip("\n").rstrip()
        if not body.strip():
            raise forms.ValidationError("A runbook needs a body.")
        return body


@admin.register(Runbook)
class RunbookAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    form = RunbookForm
    list_display = ("slug", "title", "enabled", "updated_at", "body_chars", "sections")
    list_display_links = ("slug", "title")
    list_filter = ("enabled",)
    search_fields = ("slug", "title", "body")
    ordering = ("slug",)
    prepopulated_fields = {"slug": ("title",)}
    readonly_fields = ("updated_at", "preview")
    fieldsets = (
        (None, {"fields": ("slug", "title", "enabled", "body")}),
        ("As the diagnosis agent receives it", {"fields": ("preview", "updated_at")}),
    )
    actions = ("enable", "disable")

    @admin.display(description="chars")
    def body_chars(self, obj: Runbook) -> int:
        return len(obj.body)

    @admin.display(description="sections")
    def sections(self, obj: Runbook) -> str:
        missing = missing_sections(obj.body)
        return "complete" if not missing else "missing: " + ", ".join(missing)

    @admin.display(description="preview")
    def preview(self, obj: Runbook) -> str:
        if not obj.pk:
            return "Save the runbook to preview it."
        text = agent_instructions([RunbookSpec(obj.slug, obj.title, obj.body)], runbook_chars=PROMPT_BUDGET_CHARS)
        shown = text[text.index("--- runbook:") :] if "--- runbook:" in text else text
        notes = []
        missing = missing_sections(obj.body)
        if missing:
            notes.append(f"Missing sections: {', '.join(missing)} (expected: {', '.join(SECTIONS)}).")
        if len(obj.body.strip()) > PROMPT_BUDGET_CHARS:
            notes.append(f"The body is longer than {PROMPT_BUDGET_CHARS} characters: the agent sees only the start.")
        if not obj.enabled:
            notes.append("Disabled: no diagnosis run receives this runbook.")
        return format_html(
            "{}<pre style='white-space: pre-wrap; max-width: 110ch'>{}</pre>",
            format_html_join("", "<p><strong>{}</strong></p>", ((note,) for note in notes)),
            shown,
        )

    @admin.action(description="Enable the selected runbooks")
    def enable(self, request: HttpRequest, queryset: QuerySet[Runbook]) -> None:
        count = queryset.update(enabled=True, updated_at=timezone.now())
        self.message_user(request, f"{count} runbook(s) enabled.", messages.SUCCESS)

    @admin.action(description="Disable the selected runbooks")
    def disable(self, request: HttpRequest, queryset: QuerySet[Runbook]) -> None:
        count = queryset.update(enabled=False, updated_at=timezone.now())
        self.message_user(request, f"{count} runbook(s) disabled.", messages.SUCCESS)


class ApprovedFilter(admin.SimpleListFilter):
    title = "approved"
    parameter_name = "approved"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Yes"), ("no", "No: its uploader's only")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Document]) -> QuerySet[Document]:
        if self.value() in ("yes", "no"):
            return queryset.filter(approved_at__isnull=self.value() == "no")
        return queryset


@admin.register(Document)
class DocumentAdmin(ReadOnlyAdmin):
    list_display = ("title", "status", "failure_code", "chunk_count", "added_by", "approved", "created_at")
    list_filter = ("status", "failure_code", ApprovedFilter)
    list_select_related = ("owner",)
    search_fields = ("title", "filename", "source")
    date_hierarchy = "created_at"
    exclude = ("text",)
    readonly_fields = ("text_excerpt",)
    actions = ("approve", "reindex")

    @admin.display(description="added by")
    def added_by(self, obj: Document) -> str:
        return obj.owner.get_username() if obj.owner is not None else "operator"

    @admin.display(description="approved", boolean=True)
    def approved(self, obj: Document) -> bool:
        return obj.approved

    @admin.display(description="text")
    def text_excerpt(self, obj: Document) -> str:
        return Truncator(obj.text).chars(2_000)

    @admin.action(description="Re-index the selected documents", permissions=["view"])
    def reindex(self, request: HttpRequest, queryset: QuerySet[Document]) -> None:
        try:
            queued = knowledge_rebuild(document_ids=queryset.values_list("id", flat=True))
        except QueueUnavailable:
            self.message_user(request, "The task queue is unavailable; nothing was re-indexed.", messages.ERROR)
            return
        self.message_user(request, f"Queued {queued} document(s) for indexing.", messages.SUCCESS)

    @admin.action(description="Approve the selected documents (evidence for every user)")
    def approve(self, request: HttpRequest, queryset: QuerySet[Document]) -> None:
        pending = list(queryset.filter(approved_at__isnull=True))
        for document in pending:
            services.document_approve(document=document, by=request.user)
        self.message_user(request, f"{len(pending)} document(s) approved.", messages.SUCCESS)


@admin.register(Chunk)
class ChunkAdmin(ReadOnlyAdmin):
    list_display = ("document", "ordinal", "heading_path", "char_count")
    list_select_related = ("document",)
    search_fields = ("document__title", "heading_path")
    raw_id_fields = ("document",)
    exclude = ("embedding",)
    show_full_result_count = False


@admin.register(LogEntry)
class LogEntryAdmin(ReadOnlyAdmin):
    list_display = ("ts", "service", "level", "message_excerpt")
    list_filter = ("service", "level")
    date_hierarchy = "ts"
    search_fields = ("message",)
    show_full_result_count = False

    @admin.display(description="message")
    def message_excerpt(self, obj: LogEntry) -> str:
        return Truncator(obj.message).chars(140)
