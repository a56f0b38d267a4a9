from django.urls import path

from knowledge import apis

urlpatterns = [
    path("documents", apis.DocumentListApi.as_view(), name="document-list"),
    path("documents/<str:document_id>", apis.DocumentDetailApi.as_view(), name="document-detail"),
    path("documents/<str:document_id>/approve", apis.DocumentApproveApi.as_view(), name="document-approve"),
    path("knowledge/search", apis.KnowledgeSearchApi.as_view(), name="knowledge-search"),
    path("knowledge/rebuild", apis.KnowledgeRebuildApi.as_view(), name="knowledge-rebuild"),
]
