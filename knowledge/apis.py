"""The knowledge-base API: documents in, search out. Views are thin."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_serializer, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.parsers import MultiPartParser
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import (
    PAGE_PARAMETERS,
    ApiView,
    NewestFirst,
    PagedApiView,
    StrictSerializer,
    TextField,
    paginated,
    parse_id,
)
from core.viewer import Viewer, viewer_bound
from knowledge import selectors, services
from knowledge.failures import DocumentFailure
from knowledge.models import Document, DocumentStatus

MAX_QUERY_CHARS = 2_000


def document_resource(document: Document, *, user: Any) -> dict[str, Any]:
    return {
        "id": str(document.id),
        "title": document.title,
        "filename": document.filename,
        "content_type": document.content_type,
        "size_bytes": document.size_bytes,
        "sha256": document.sha256,
        "status": document.status,
        "failure_code": document.failure_code or None,
        "failure_reason": document.failure_reason or None,
        "chunk_count": document.chunk_count,
        "uploaded_by_you": document.owner_id is not None and document.owner_id == user.pk,
        # None: the operator loaded it (``ingest_docs``, ``seed_demo``), or its uploader is gone
        "added_by": document.owner.get_username() if document.owner is not None else None,
        "approved": document.approved,
        "approved_at": document.approved_at,
        "created_at": document.created_at,
        "indexed_at": document.indexed_at,
        "links": {"self": reverse("document-detail", args=[str(document.id)])},
    }


class DocumentOutput(serializers.Serializer[Any]):
    """Documentation of the document resource (built by document_resource)."""

    id = serializers.UUIDField()
    title = serializers.CharField()
    filename = serializers.CharField()
    content_type = serializers.CharField()
    size_bytes = serializers.IntegerField()
    sha256 = serializers.CharField()
    status = serializers.ChoiceField(choices=DocumentStatus.choices)
    failure_code = serializers.ChoiceField(
        choices=[code.value for code in DocumentFailure],
        allow_null=True,
        help_text="Why indexing failed, a stable code; failure_reason says it in words.",
    )
    failure_reason = serializers.CharField(allow_null=True)
    chunk_count = serializers.IntegerField()
    uploaded_by_you = serializers.BooleanField()
    added_by = serializers.CharField(allow_null=True, help_text="the uploader's user name; null: the operator")
    approved = serializers.BooleanField(help_text="evidence for every user; false: for its uploader (and staff) only")
    approved_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    indexed_at = serializers.DateTimeField(allow_null=True)
    links = serializers.JSONField()


class DocumentListApi(PagedApiView):
    parser_classes = [MultiPartParser]
    query_parameters = PagedApiView.query_parameters | {"status"}

    @extend_schema_serializer(component_name="DocumentUpload")
    class InputSerializer(StrictSerializer):
        file = serializers.FileField(allow_empty_file=False)
        title = serializers.CharField(required=False, max_length=300, allow_blank=True)

    @extend_schema(
        parameters=[OpenApiParameter("status", str, enum=DocumentStatus.values, required=False), *PAGE_PARAMETERS],
        operation_id="documents_list",
        responses=paginated(DocumentOutput),
        summary="The documents you see, newest first: approved ones and your own (staff: all; cursor-paginated)",
    )
    def get(self, request: Request) -> Response:
        wanted = request.query_params.get("status")
        if wanted is not None and wanted not in DocumentStatus.values:
            raise serializers.ValidationError({"status": [f"One of {', '.join(DocumentStatus.values)}."]})
        paginator = NewestFirst()
        documents = selectors.document_list(viewer=Viewer.of(request.user), status=wanted)
        page = paginator.paginate_queryset(documents, request, view=self)
        return paginator.get_paginated_response([document_resource(d, user=request.user) for d in page or []])

    @extend_schema(
        request={"multipart/form-data": InputSerializer},
        responses={201: DocumentOutput, 200: DocumentOutput},
        summary="Upload a document (Markdown, text, HTML or PDF); it is indexed in the background",
    )
    def post(self, request: Request) -> Response:
        form = self.InputSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        upload = form.validated_data["file"]
        uploaded = services.document_upload(
            owner=request.user,
            filename=upload.name or "upload",
            data=upload.read(),
            title=form.validated_data.get("title", ""),
        )
        body = document_resource(uploaded.document, user=request.user)
        return Response(body, status=status.HTTP_201_CREATED if uploaded.created else status.HTTP_200_OK)


class DocumentDetailApi(ApiView):
    @extend_schema(responses=DocumentOutput, summary="One document you see and its indexing status")
    def get(self, request: Request, document_id: str) -> Response:
        document = selectors.document_get(viewer=Viewer.of(request.user), document_id=parse_id(document_id))
        return Response(document_resource(document, user=request.user))

    @extend_schema(responses={204: None}, summary="Delete a document (its uploader or staff)")
    def delete(self, request: Request, document_id: str) -> Response:
        viewer = Viewer.of(request.user)
        document = selectors.document_get(viewer=viewer, document_id=parse_id(document_id))
        if not selectors.document_deletable(viewer=viewer, document=document):
            raise PermissionDenied("Only the uploader or staff may delete a document.")
        services.document_delete(document=document)
        return Response(status=status.HTTP_204_NO_CONTENT)


class DocumentApproveApi(ApiView):
    @extend_schema(
        request=None,
        responses=DocumentOutput,
        summary="Approve a document: evidence for every user from the next search on (staff; idempotent)",
    )
    def post(self, request: Request, document_id: str) -> Response:
        viewer = Viewer.of(request.user)
        document = selectors.document_get(viewer=viewer, document_id=parse_id(document_id))
        if not selectors.document_approvable(viewer=viewer):
            raise PermissionDenied("Only staff may approve a document.")
        document = services.document_approve(document=document, by=request.user)
        return Response(document_resource(document, user=request.user))


class KnowledgeSearchApi(ApiView):
    @extend_schema_serializer(component_name="KnowledgeSearchInput")
    class InputSerializer(StrictSerializer):
        query = TextField(max_length=MAX_QUERY_CHARS, trim_whitespace=True)
        top_k = serializers.IntegerField(required=False, min_value=1, max_value=20, default=5)

    @extend_schema(
        request=InputSerializer,
        responses=inline_serializer(
            "KnowledgeSearch",
            {
                "evidence_status": serializers.ChoiceField(choices=["ok", "no_evidence"]),
                "retrieval_mode": serializers.ChoiceField(choices=["hybrid", "lexical"]),
                "chunks": serializers.JSONField(),
            },
        ),
        summary="Search the documents you see (approved ones and your own; staff: all) as the agent searches",
    )
    def post(self, request: Request) -> Response:
        form = self.InputSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        from knowledge.backends import knowledge_search

        with viewer_bound(Viewer.of(request.user)):  # the documents the caller sees (search.py)
            found, mode = knowledge_search().matches(form.validated_data["query"], form.validated_data["top_k"])
        chunks = [
            {
                "chunk_id": row.chunk_id,
                "document_id": str(row.document_id),
                "title": row.document.title,
                "section": row.heading_path,
                "text": row.text,
                "score": round(hit.relevance, 4),
                "lexical_coverage": round(hit.coverage, 4),
                "cosine": None if hit.cosine is None else round(hit.cosine, 4),
                "approved": row.document.approved,
            }
            for hit, row in found
        ]
        return Response(
            {"evidence_status": "ok" if chunks else "no_evidence", "retrieval_mode": mode, "chunks": chunks}
        )


class KnowledgeRebuildApi(ApiView):
    permission_classes = [IsAdminUser]

    @extend_schema(
        request=None,
        responses={202: inline_serializer("KnowledgeRebuild", {"queued_documents": serializers.IntegerField()})},
        summary="Re-chunk and re-embed every document (staff)",
    )
    def post(self, request: Request) -> Response:
        return Response({"queued_documents": services.knowledge_rebuild()}, status=status.HTTP_202_ACCEPTED)
