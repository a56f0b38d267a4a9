"""URL configuration. Everything public is under /api/; the trace console is /admin/."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("chat.urls")),
    path("api/", include("knowledge.urls")),
]

handler404 = "chat.errors.not_found"
handler500 = "chat.errors.server_error"
handler400 = "chat.errors.bad_request"
handler403 = "chat.errors.permission_denied"
