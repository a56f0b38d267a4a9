"""Why a document could not be indexed: one stable code per cause.

The code is stored beside the human reason (``Document.failure_code``) and shown by the
documents API, the admin and ``ingest_docs``, so a script can tell a PDF bomb from a file that
is simply empty. No Django here: the extraction child process imports it too.
"""

from __future__ import annotations

from enum import StrEnum


class DocumentFailure(StrEnum):
    """The stable failure codes of a document; never renamed, only added to."""

    #: a file name whose extension the knowledge base does not take (refused at upload)
    UNSUPPORTED_TYPE = "unsupported_type"
    #: the upload holds no bytes
    EMPTY_FILE = "empty_file"
    #: a text file with NUL bytes: binary data under a text extension
    BINARY_CONTENT = "binary_content"
    #: text that is neither UTF-8 nor GB18030
    UNKNOWN_ENCODING = "unknown_encoding"
    #: a ``.pdf`` that does not start like a PDF
    NOT_A_PDF = "not_a_pdf"
    PDF_ENCRYPTED = "pdf_encrypted"
    PDF_TOO_MANY_PAGES = "pdf_too_many_pages"
    #: pypdf could not parse it
    PDF_UNREADABLE = "pdf_unreadable"
    #: a compressed stream expands past pypdf's limits (a compression bomb)
    DECOMPRESSION_LIMIT = "decompression_limit"
    #: the file parses, but holds no text
    NO_TEXT = "no_text"
    #: the extracted text is longer than the knowledge base takes
    TEXT_TOO_LONG = "text_too_long"
    #: extracting and chunking took longer than ``KNOWLEDGE_EXTRACT_TIMEOUT_S``: stopped
    EXTRACTION_TIMEOUT = "extraction_timeout"
    #: extracting needed more memory than ``KNOWLEDGE_EXTRACT_MAX_MEMORY_MB``: stopped
    EXTRACTION_MEMORY = "extraction_memory"
    #: the extractor failed in a way it does not name (its process crashed, say)
    EXTRACTION_FAILED = "extraction_failed"
    #: the embeddings endpoint kept failing
    EMBEDDING_FAILED = "embedding_failed"
    #: the broker did not take the indexing task
    QUEUE_UNAVAILABLE = "queue_unavailable"
