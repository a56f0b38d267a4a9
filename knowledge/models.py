"""The evidence the agent can reach: documents and their chunks, runbooks, and logs."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class DocumentStatus(models.TextChoices):
    PENDING = "pending"
    INDEXED = "indexed"
    FAILED = "failed"


class Document(models.Model):
    """An uploaded document. Its extracted text is kept, so the index can be rebuilt.

    ``owner`` is who added it (None: the operator, through ``ingest_docs`` or ``seed_demo``).
    A document is evidence for everyone only once approved: loads by the operator and uploads
    by staff are approved when they are created, another key's upload waits for staff
    (``knowledge.selectors.document_visibility`` says who sees what meanwhile).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="documents"
    )
    title = models.CharField(max_length=300)
    filename = models.CharField(max_length=255)
    #: where it was loaded from (``ingest_docs``: the file's path); a newer version of the same
    #: source replaces it once indexed. Empty for uploads through the API.
    source = models.CharField(max_length=500, blank=True, db_index=True)
    content_type = models.CharField(max_length=100)
    size_bytes = models.PositiveIntegerField()
    sha256 = models.CharField(max_length=64, db_index=True)
    #: the uploaded bytes, kept until the text is extracted and indexed, then cleared
    content = models.BinaryField(null=True, blank=True, editable=False)
    text = models.TextField(blank=True)
    status = models.CharField(max_length=16, choices=DocumentStatus.choices, default=DocumentStatus.PENDING)
    #: why it failed: a stable code (knowledge.failures.DocumentFailure) beside the reason
    failure_code = models.CharField(max_length=40, blank=True)
    failure_reason = models.CharField(max_length=300, blank=True)
    chunk_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    indexed_at = models.DateTimeField(null=True, blank=True)
    #: when it became evidence for every user; None: only its uploader (and staff) see it
    approved_at = models.DateTimeField(null=True, blank=True)
    #: who approved it (None with ``approved_at`` set: the operator, or a since deleted user)
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="approved_documents",
    )

    class Meta:
        ordering = ("-created_at",)
        indexes = [
            models.Index(fields=("status",), name="document_status"),
            models.Index(fields=("approved_at",), name="document_approved_at"),
        ]

    @property
    def approved(self) -> bool:
        return self.approved_at is not None

    def __str__(self) -> str:
        return self.title


class Chunk(models.Model):
    """A section of a document: what retrieval finds and the agent cites."""

    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunks")
    ordinal = models.PositiveIntegerField()
    title = models.CharField(max_length=300)
    heading_path = models.CharField(max_length=500, blank=True)
    text = models.TextField()
    char_count = models.PositiveIntegerField()
    token_count = models.PositiveIntegerField()
    #: float32 vector bytes from the configured embedder (empty when lexical only)
    embedding = models.BinaryField(null=True, blank=True)
    #: which embedder made ``embedding``: vectors of another model are not compared
    embedding_model = models.CharField(max_length=120, blank=True)

    class Meta:
        ordering = ("document", "ordinal")
        constraints = [models.UniqueConstraint(fields=("document", "ordinal"), name="chunk_document_ordinal")]

    @property
    def chunk_id(self) -> str:
        return f"{self.document_id}#{self.ordinal}"


class IndexState(models.Model):
    """One row: the knowledge base's version, bumped in the transaction of every change.

    Each process's in-memory index remembers the version it was built from and rebuilds when
    the row says otherwise, so index changes reach every worker without a restart.
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1, editable=False)
    version = models.PositiveBigIntegerField(default=0)
    changed_at = models.DateTimeField(auto_now=True)


class Runbook(models.Model):
    """A Markdown runbook: workflow, required evidence, stop conditions, report rules."""

    slug = models.SlugField(max_length=100, unique=True)
    title = models.CharField(max_length=200)
    body = models.TextField()
    enabled = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("slug",)

    def __str__(self) -> str:
        return self.title


class LogLevel(models.IntegerChoices):
    DEBUG = 0
    INFO = 1
    WARN = 2
    ERROR = 3
    FATAL = 4


class LogEntry(models.Model):
    """One application log line."""

    ts = models.DateTimeField()
    service = models.CharField(max_length=100)
    level = models.PositiveSmallIntegerField(choices=LogLevel.choices)
    message = models.TextField()
    attributes = models.JSONField(default=dict, blank=True)
    source = models.CharField(max_length=200, blank=True, help_text="the file it was ingested from")
    #: the line's content and occurrence (knowledge.logs.identity): an ingest never stores the
    #: same line twice. Empty only for rows written other than by an ingest.
    digest = models.CharField(max_length=64, unique=True, null=True, blank=True, editable=False)

    class Meta:
        ordering = ("-ts",)
        indexes = [
            models.Index(fields=("ts",), name="log_ts"),
            models.Index(fields=("service", "ts"), name="log_service_ts"),
            models.Index(fields=("level", "ts"), name="log_level_ts"),
        ]


class LogFile(models.Model):
    """A log file whose whole content was ingested, recognised by the digest of its bytes.

    Ingesting the same content again reads nothing, as long as its first and last entries are
    still stored (rows deleted since, by ``--replace`` of another file for instance, make it be
    read again, and only what is missing is stored).
    """

    sha256 = models.CharField(max_length=64, unique=True)
    source = models.CharField(max_length=200, help_text="the path it was read from")
    entries = models.PositiveIntegerField()
    first_digest = models.CharField(max_length=64)
    last_digest = models.CharField(max_length=64)
    ingested_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return self.source
