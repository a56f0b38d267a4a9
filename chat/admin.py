from __future__ import annotations

from django.contrib import admin

from chat.models import ApiKey


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("prefix", "user", "name", "created_at", "last_used_at", "revoked_at")
    search_fields = ("prefix", "user__username", "name")
    readonly_fields = ("prefix", "digest", "created_at", "last_used_at")
    fields = ("user", "name", "prefix", "digest", "created_at", "last_used_at", "revoked_at")


from chat import console  # noqa: E402, F401 - registers the trace console's pages
