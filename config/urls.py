"""URL configuration. Everything public is under /api/; the trace console is /admin/; the
operator's Prometheus metrics are /metrics (not public: see chat.scrape)."""

from django.contrib import admin
from django.urls import include, path

from chat.scrape import scrape

urlpatterns = [
    path("metrics", scrape, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/", include("chat.urls")),
    path("api/", include("knowledge.urls")),
]

handler404 = "core.api.not_found"
handler500 = "core.api.server_error"
handler400 = "core.api.bad_request"
handler403 = "core.api.permission_denied"
