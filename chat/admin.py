"""API keys in the admin: created through the service (the raw key is shown once, then only its
prefix is ever seen), renamed, revoked — never moved to another user."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from chat import console  # noqa: F401 - registers the trace console's pages
from chat.models import ApiKey
from chat.services import api_key_for_user, api_key_revoke


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("prefix", "user", "name", "created_at", "last_used_at", "revoked_at")
    list_filter = (("revoked_at", admin.EmptyFieldListFilter),)
    list_select_related = ("user",)
    search_fields = ("prefix", "user__username", "name")
    actions = ["revoke"]

    def get_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> tuple[str, ...]:
        if obj is None:
            return ("user", "name")
        return ("user", "name", "prefix", "created_at", "last_used_at", "revoked_at")

    def get_readonly_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> list[str]:
        if obj is None:
            return []
        # the owner is fixed: a key moved to another user would act as them with the old holder's copy
        return ["user", "prefix", "created_at", "last_used_at", "revoked_at"]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # revoke instead: runs and webhooks keep naming the key

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            ApiKey.objects.filter(pk=obj.pk).update(name=obj.name)
            return
        key, raw = api_key_for_user(user=obj.user, name=obj.name)
        obj.pk, obj.prefix, obj.created_at = key.pk, key.prefix, key.created_at
        self.message_user(
            request,
            f"The new key, shown this once (store it now; only its prefix is kept in view): {raw}",
            messages.WARNING,
        )

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        keys = list(queryset.filter(revoked_at__isnull=True))
        for key in keys:
            api_key_revoke(key=key)
        self.message_user(request, f"Revoked {len(keys)} key(s).", messages.SUCCESS)
