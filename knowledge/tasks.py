"""Celery tasks of the knowledge base: thin and idempotent."""

from __future__ import annotations

from celery import Task, shared_task

from knowledge import services
from knowledge.embeddings import EmbeddingUnavailable

MAX_RETRIES = 3


@shared_task(  # type: ignore[untyped-decorator]
    bind=True,
    name="knowledge.index_document",
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
    autoretry_for=(EmbeddingUnavailable,),
    retry_backoff=2,
    retry_backoff_max=60,
    max_retries=MAX_RETRIES,
    soft_time_limit=600,
    time_limit=660,
)
def index_document(self: Task, document_id: str) -> None:
    """Index a pending document. A redelivered message for an indexed one does nothing."""
    from knowledge.backends import embedder

    services.document_index(
        document_id=document_id, embedder=embedder(), final_attempt=self.request.retries >= MAX_RETRIES
    )
