"""The knowledge app's backends as the settings configure them, one of each per process.

The embedder (``EMBEDDINGS_PROVIDER``) and the retrieval engine (``KNOWLEDGE_ENGINE``) are built
here, once, for everything that needs them: the composition root (``chat/wiring.py``) hands the
engine to the agent's ``lookup_knowledge`` tool, and this app's own views, tasks and commands
index and search with the very same instances.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from knowledge.embeddings import Embedder, embedder_from_config
from knowledge.retrieval import RetrievalConfig
from knowledge.search import DatabaseKnowledgeSearch

if TYPE_CHECKING:
    from knowledge.milvus import MilvusKnowledgeSearch


@functools.cache
def embedder() -> Embedder | None:
    """The configured embedder (``EMBEDDINGS_PROVIDER``), one per process; ``None`` is lexical only."""
    return embedder_from_config(settings.EMBEDDINGS)


@functools.cache
def knowledge_search() -> DatabaseKnowledgeSearch | MilvusKnowledgeSearch:
    """``KNOWLEDGE_ENGINE``: ``local`` (an index in this process's memory) or ``milvus``."""
    k: dict[str, Any] = settings.KNOWLEDGE
    config = RetrievalConfig(
        min_coverage=k["MIN_COVERAGE"], min_cosine=k["MIN_COSINE"], threads=settings.COMPUTE_THREADS
    )
    engine = k.get("ENGINE", "local")
    if engine == "local":
        return DatabaseKnowledgeSearch(embedder=embedder(), config=config)
    if engine == "milvus":
        from knowledge.milvus import MilvusKnowledgeSearch  # pymilvus is imported only when chosen

        return MilvusKnowledgeSearch(
            embedder=embedder(),
            uri=k["MILVUS_URI"],
            collection=k["MILVUS_COLLECTION"],
            token=k["MILVUS_TOKEN"],
            timeout_s=k["MILVUS_TIMEOUT_S"],
            config=config,
        )
    raise ImproperlyConfigured(f"KNOWLEDGE_ENGINE must be local or milvus, not {engine!r}")
