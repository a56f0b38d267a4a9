"""Reads of the knowledge base, and the one rule of who sees which document.

Documents are shared once approved: a user sees every approved document plus the ones they
uploaded themselves; staff see all of them. The API's list and detail, its search and the
agent's ``lookup_knowledge`` tool all apply :func:`document_visibility`, so a page a non-staff
key uploaded is evidence for nobody else until staff approve it. A document a caller cannot see
does not exist for them (404); one they see but may not change is 403.
"""

from __future__ import annotations

import uuid

from django.db.models import Q, QuerySet

from core.errors import NotFound
from core.viewer import Viewer
from knowledge.models import Chunk, Document


def document_visibility(viewer: Viewer | None, *, prefix: str = "") -> Q:
    """The documents ``viewer`` sees (``prefix``: the path to the document, e.g. ``document__``).

    Staff: every document. A user: the approved ones and their own. Nobody bound (a command):
    the approved ones only.
    """
    if viewer is not None and viewer.is_staff:
        return Q()
    rule = Q(**{f"{prefix}approved_at__isnull": False})
    if viewer is not None and viewer.user_id is not None:
        rule |= Q(**{f"{prefix}owner_id": viewer.user_id})
    return rule


def chunks_hidden_from(viewer: Viewer | None) -> frozenset[int]:
    """The ids of the chunks ``viewer`` may not see: those of other users' unapproved documents.

    Few, as long as staff review uploads, so the search engines leave them out while they rank
    (an invisible chunk neither takes a place among the top k nor hides a visible copy of itself).
    """
    if viewer is not None and viewer.is_staff:
        return frozenset()
    hidden = Chunk.objects.filter(document__approved_at__isnull=True)
    if viewer is not None and viewer.user_id is not None:
        hidden = hidden.exclude(document__owner_id=viewer.user_id)
    return frozenset(hidden.values_list("id", flat=True))


def document_list(*, viewer: Viewer, status: str | None = None) -> QuerySet[Document]:
    documents = Document.objects.defer("content", "text").select_related("owner").filter(document_visibility(viewer))
    return documents.filter(status=status) if status else documents


def document_get(*, viewer: Viewer, document_id: uuid.UUID) -> Document:
    """The document, if ``viewer`` sees it; else :class:`NotFound`, as if there were none."""
    document: Document | None = (
        Document.objects.defer("content")
        .select_related("owner")
        .filter(document_visibility(viewer), id=document_id)
        .first()
    )
    if document is None:
        raise NotFound("No such document.")
    return document


def document_deletable(*, viewer: Viewer, document: Document) -> bool:
    """Whether ``viewer`` may delete a document they see: its uploader or staff."""
    return viewer.is_staff or (document.owner_id is not None and document.owner_id == viewer.user_id)


def document_approvable(*, viewer: Viewer) -> bool:
    """Whether ``viewer`` may approve documents they see: staff only."""
    return viewer.is_staff
