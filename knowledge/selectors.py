"""Reads of the knowledge base. Documents are the team's: every key may read and search them."""

from __future__ import annotations

import uuid

from django.db.models import QuerySet

from core.errors import NotFound
from knowledge.models import Document


def document_list(*, status: str | None = None) -> QuerySet[Document]:
    documents = Document.objects.defer("content", "text")
    return documents.filter(status=status) if status else documents


def document_get(*, document_id: uuid.UUID) -> Document:
    document: Document | None = Document.objects.defer("content").filter(id=document_id).first()
    if document is None:
        raise NotFound("No such document.")
    return document
