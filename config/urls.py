"""URL configuration. Everything public is under /api/; the trace console is /admin/."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("chat.urls")),
    path("api/", include("knowledge.urls")),
]

handler404 = "core.api.not_found"
handler500 = "core.api.server_error"
handler400 = "core.api.bad_request"
handler403 = "core.api.permission_denied"
