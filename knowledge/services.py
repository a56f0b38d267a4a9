"""Writes to the knowledge base: upload, index, delete, rebuild. Every change bumps the version."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from core.errors import ApplicationError, PayloadTooLarge, QueueUnavailable
from core.viewer import Viewer
from knowledge.chunking import ChunkLimits, search_text
from knowledge.embeddings import Embedder, EmbeddingUnavailable, to_bytes
from knowledge.extract import ExtractionError, content_type_for
from knowledge.failures import DocumentFailure
from knowledge.isolation import ExtractLimits, prepare
from knowledge.models import Chunk, Document, DocumentStatus, IndexState
from knowledge.selectors import document_visibility

logger = logging.getLogger(__name__)


class UnsupportedDocument(ApplicationError):
    code = "unsupported_document"
    message = "The file cannot be added to the knowledge base."


@dataclass(frozen=True, slots=True)
class Uploaded:
    document: Document
    created: bool


def index_bump() -> int:
    """Advance the knowledge-base version; call inside the transaction of the change."""
    if not IndexState.objects.filter(pk=1).update(version=F("version") + 1, changed_at=timezone.now()):
        IndexState.objects.get_or_create(pk=1, defaults={"version": 1})
    return int(IndexState.objects.values_list("version", flat=True).get(pk=1))


def chunk_limits() -> ChunkLimits:
    k: dict[str, Any] = settings.KNOWLEDGE
    return ChunkLimits(
        max_chars=k["CHUNK_MAX_CHARS"], max_tokens=k["CHUNK_MAX_TOKENS"], overlap_chars=k["CHUNK_OVERLAP_CHARS"]
    )


def extract_limits() -> ExtractLimits:
    k: dict[str, Any] = settings.KNOWLEDGE
    return ExtractLimits(
        timeout_s=float(k["EXTRACT_TIMEOUT_S"]), memory_bytes=int(k["EXTRACT_MAX_MEMORY_MB"]) * 1024 * 1024
    )


UPLOAD_NOT_QUEUED = "the task queue was unavailable; upload it again"


def document_enqueue(document: Document) -> None:
    """Queue (again) the indexing of a pending document; the task is idempotent."""
    _enqueue(document, on_failure=None)


def _enqueue(document: Document, *, on_failure: str | None = UPLOAD_NOT_QUEUED) -> None:
    """Queue the indexing task; when the broker cannot take it, mark the document failed with
    ``on_failure`` (unless None) and raise :class:`QueueUnavailable`."""
    from knowledge.tasks import index_document

    try:
        index_document.apply_async(args=[str(document.id)], retry=False)
    except Exception as exc:  # noqa: BLE001 - any broker failure means it would never be indexed
        logger.warning("document %s: broker unavailable: %s", document.id, type(exc).__name__)
        if on_failure is not None:
            Document.objects.filter(pk=document.pk, status=DocumentStatus.PENDING).update(
                status=DocumentStatus.FAILED, failure_code=DocumentFailure.QUEUE_UNAVAILABLE, failure_reason=on_failure
            )
        raise QueueUnavailable("The task queue is unavailable; try again shortly.") from None


def document_upload(
    *, owner: Any, filename: str, data: bytes, title: str = "", source: str = "", enqueue: bool = True
) -> Uploaded:
    """Store an upload as a pending document and queue its indexing.

    The same bytes uploaded again return the existing document (``created`` is false) unless
    it failed, in which case it is indexed afresh. New bytes from a known ``source`` (a file
    loaded before) make a new version, which replaces the older ones once it is indexed.
    """
    try:
        content_type = content_type_for(filename)
    except ExtractionError as exc:
        raise UnsupportedDocument(exc.reason) from None
    limit = int(settings.KNOWLEDGE["MAX_UPLOAD_BYTES"])
    if len(data) > limit:
        raise PayloadTooLarge(f"The file is larger than {limit} bytes.")
    if not data:
        raise UnsupportedDocument("The file is empty.")
    digest = hashlib.sha256(data).hexdigest()
    owner = owner if getattr(owner, "is_authenticated", False) else None
    # The operator's loads and staff uploads are evidence for everyone at once; another key's
    # upload only for itself until staff approve it.
    trusted = owner is None or bool(owner.is_staff)
    with transaction.atomic():
        # The same bytes are the same document, among those the uploader sees: another user's
        # unapproved copy is none of theirs (and is not shown to them), so they get their own.
        viewer = Viewer(None if owner is None else owner.pk, is_staff=trusted)
        same = Document.objects.select_for_update().filter(document_visibility(viewer), sha256=digest)
        existing = same.first()
        if existing is not None and trusted and existing.approved_at is None:
            _approve(existing, by=owner)  # staff (or the operator) add it too: they vouch for it
        if existing is not None and existing.status != DocumentStatus.FAILED:
            return Uploaded(existing, False)
        if existing is not None:
            existing.status, existing.failure_code, existing.failure_reason = DocumentStatus.PENDING, "", ""
            existing.content = data
            existing.save(update_fields=["status", "failure_code", "failure_reason", "content"])
            document = existing
        else:
            document = Document.objects.create(
                owner=owner,
                approved_at=timezone.now() if trusted else None,
                approved_by=owner if trusted else None,
                title=title.strip()[:300],
                filename=filename[-255:],
                content_type=content_type,
                size_bytes=len(data),
                sha256=digest,
                content=data,
                source=source[-500:],
            )
    if enqueue:
        _enqueue(document)
    return Uploaded(document, existing is None)


def _fail(document: Document, code: DocumentFailure, reason: str) -> None:
    Document.objects.filter(pk=document.pk).update(
        status=DocumentStatus.FAILED, failure_code=code, failure_reason=reason[:300]
    )
    logger.info("document %s failed to index: %s", document.pk, code)


def document_index(*, document_id: str, embedder: Embedder | None, final_attempt: bool = True) -> str:
    """Extract, chunk, embed and store a pending document's chunks, replacing any old ones.

    Idempotent: a document that is not pending is left as it is. Returns its status.
    Extracting and chunking run in a child process under ``extract_limits()``
    (knowledge.isolation): a file that takes longer or needs more memory fails with the code
    saying so. An embeddings endpoint that fails is retried by the task; on the last attempt
    the document fails with the reason.
    """
    document = Document.objects.filter(pk=document_id).first()
    if document is None or document.status != DocumentStatus.PENDING:
        return document.status if document else "missing"
    try:
        if not document.content and not document.text:
            raise ExtractionError(DocumentFailure.NO_TEXT, "the document has no text to index")
        prepared = prepare(
            filename=document.filename,
            data=bytes(document.content) if document.content else None,
            text=None if document.content else document.text,
            chunk_limits=chunk_limits(),
            limits=extract_limits(),
        )
        text, title, pieces = prepared.text, document.title or prepared.title, prepared.chunks
        vectors = embedder.embed([search_text(title, p.heading_path, p.text) for p in pieces]) if embedder else None
    except ExtractionError as exc:
        _fail(document, exc.code, exc.reason)
        return DocumentStatus.FAILED
    except EmbeddingUnavailable as exc:
        if not final_attempt:
            raise
        _fail(document, DocumentFailure.EMBEDDING_FAILED, f"embedding failed: {exc}")
        return DocumentStatus.FAILED
    model = embedder.name if embedder else ""
    rows = [
        Chunk(
            document=document,
            ordinal=piece.ordinal,
            title=title,
            heading_path=piece.heading_path[:500],
            text=piece.text,
            char_count=piece.char_count,
            token_count=piece.token_count,
            embedding=to_bytes(vectors[i]) if vectors is not None else None,
            embedding_model=model,
        )
        for i, piece in enumerate(pieces)
    ]
    with transaction.atomic():
        # Still pending and not deleted meanwhile? Only then replace its chunks.
        claimed = Document.objects.filter(pk=document.pk, status=DocumentStatus.PENDING).update(
            status=DocumentStatus.INDEXED,
            title=title,
            text=text,
            content=None,
            failure_code="",
            failure_reason="",
            chunk_count=len(rows),
            indexed_at=timezone.now(),
        )
        if not claimed:
            return "superseded"
        Chunk.objects.filter(document_id=document.pk).delete()
        Chunk.objects.bulk_create(rows, batch_size=500)
        if document.source:  # the older versions of the same file stop answering now, not before
            Document.objects.filter(source=document.source, created_at__lte=document.created_at).exclude(
                pk=document.pk
            ).delete()
        index_bump()
    return DocumentStatus.INDEXED


def _approve(document: Document, *, by: Any) -> None:
    now = timezone.now()
    if Document.objects.filter(pk=document.pk, approved_at__isnull=True).update(approved_at=now, approved_by=by):
        document.approved_at, document.approved_by = now, by


@transaction.atomic
def document_approve(*, document: Document, by: Any) -> Document:
    """Make a document evidence for every user; ``by`` is the staff user who reviewed it (the
    caller checks that they may). Idempotent: an approved document keeps its first approval.

    The index does not change: searches read each hit's approval from the database.
    """
    _approve(document, by=by)
    return document


@transaction.atomic
def document_delete(*, document: Document) -> None:
    """Delete a document and its chunks; from the next search on they are not returned."""
    Document.objects.filter(pk=document.pk).delete()
    index_bump()


def knowledge_rebuild(*, enqueue: bool = True, document_ids: Iterable[Any] | None = None) -> int:
    """Re-chunk and re-embed every document (after changing the embedder or the chunk limits),
    or only ``document_ids`` (the admin's "re-index" action).

    Old chunks keep answering until each document's new ones replace them. Returns how many
    documents were queued.
    """
    with transaction.atomic():
        documents = Document.objects.select_for_update().filter(Q(content__isnull=False) | ~Q(text=""))
        if document_ids is not None:
            documents = documents.filter(id__in=list(document_ids))
        before = list(documents.values_list("id", "status", "failure_code", "failure_reason"))
        ids = [document_id for document_id, *_ in before]
        Document.objects.filter(id__in=ids).update(status=DocumentStatus.PENDING, failure_code="", failure_reason="")
        index_bump()
    if enqueue:
        for i, document_id in enumerate(ids):
            try:
                _enqueue(Document(pk=document_id), on_failure=None)
            except QueueUnavailable:
                # Nothing is queued for these: they keep their chunks and their former status.
                for rest_id, status, code, reason in before[i:]:
                    Document.objects.filter(pk=rest_id, status=DocumentStatus.PENDING).update(
                        status=status, failure_code=code, failure_reason=reason
                    )
                raise
    return len(ids)
