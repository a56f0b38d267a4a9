"""The chat page at ``/``: sign in, ask, watch the run stream in, read the report, give feedback.

Browsers sign in with a username and password (Django's session); programs use API keys. The
page itself talks to the same API as any program: on first use after signing in, the session
gets its own API key (named ``browser session``), kept in the session and revoked when the
user signs out. The API stays key-only, so nothing under ``/api/`` reads cookies and a request
made from another site cannot act as the user (a browser never adds an Authorization header
on its own).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import logout
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from chat.models import ApiKey
from chat.services import api_key_for_user, api_key_revoke

BROWSER_KEY_NAME = "browser session"
#: where the session keeps its key: the key's id and the raw key (the page needs it)
SESSION_KEY = "sba.browser_key"


def _browser_key(request: HttpRequest) -> str:
    kept: Any = request.session.get(SESSION_KEY)
    if kept and ApiKey.objects.filter(pk=kept[0], user_id=int(request.user.pk or 0), revoked_at__isnull=True).exists():
        return str(kept[1])
    key, raw = api_key_for_user(user=request.user, name=BROWSER_KEY_NAME)
    request.session[SESSION_KEY] = [key.pk, raw]
    return raw


@never_cache
@login_required
@require_http_methods(["GET", "HEAD"])
def chat_page(request: HttpRequest) -> HttpResponse:
    context = {"api_key": _browser_key(request), "staff": bool(getattr(request.user, "is_staff", False))}
    response = render(request, "chat/page.html", context)
    response["Referrer-Policy"] = "same-origin"
    return response


@require_POST
def sign_out(request: HttpRequest) -> HttpResponse:
    kept: Any = request.session.get(SESSION_KEY)
    if kept:
        key = ApiKey.objects.filter(pk=kept[0]).first()
        if key is not None:
            api_key_revoke(key=key)
    logout(request)
    return HttpResponseRedirect("/login/")
