"""URL configuration. Everything public is under /api/; the chat page is / (sign in at /login/);
the trace console is /admin/; the
operator's Prometheus metrics are /metrics (not public: see chat.scrape)."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from chat import pages
from chat.scrape import scrape

urlpatterns = [
    path("", pages.chat_page, name="chat-page"),
    path("login/", auth_views.LoginView.as_view(template_name="chat/login.html"), name="login"),
    path("logout/", pages.sign_out, name="logout"),
    path("metrics", scrape, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/", include("chat.urls")),
    path("api/", include("knowledge.urls")),
]

handler404 = "core.api.not_found"
handler500 = "core.api.server_error"
handler400 = "core.api.bad_request"
handler403 = "core.api.permission_denied"
