import logging

from django.apps import AppConfig


class KnowledgeConfig(AppConfig):
    name = "knowledge"
    verbose_name = "Knowledge and evidence"

    def ready(self) -> None:
        # bm25s sets its logger to DEBUG when it is imported, over the configured levels.
        import bm25s  # type: ignore[import-untyped]  # noqa: F401

        logging.getLogger("bm25s").setLevel(logging.WARNING)
