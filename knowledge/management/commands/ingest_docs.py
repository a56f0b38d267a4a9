"""``manage.py ingest_docs PATH... [--queue] [--quiet]``: add files and folders to the knowledge base."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import ApplicationError
from core.progress import ProgressBar
from knowledge import services
from knowledge.embeddings import EmbeddingUnavailable
from knowledge.extract import TYPES
from knowledge.models import Document


def collect(paths: list[Path]) -> list[Path]:
    """The supported files among ``paths``; folders are walked, in a stable order."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in TYPES))
        elif path.is_file():
            found.append(path)
        else:
            raise CommandError(f"no such file or folder: {path}")
    return found


class Command(BaseCommand):
    help = (
        "Add documents (Markdown, text, HTML, PDF; folders are searched) to the knowledge base. "
        "They are indexed here and now, or by the workers with --queue. Unchanged files are skipped."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+", metavar="PATH", help="files or folders")
        parser.add_argument("--queue", action="store_true", help="let the Celery workers index them")
        parser.add_argument("--quiet", action="store_true", help="no progress bar")

    def handle(self, *args: Any, **options: Any) -> None:
        from knowledge.backends import embedder

        files = collect([Path(p) for p in options["paths"]])
        if not files:
            raise CommandError("no supported files found (" + ", ".join(sorted(TYPES)) + ")")
        try:
            model = None if options["queue"] else embedder()
        except EmbeddingUnavailable as exc:
            raise CommandError(f"the embedder is not usable: {exc}") from None
        outcomes: Counter[str] = Counter()
        problems: list[str] = []
        limit = int(settings.KNOWLEDGE["MAX_UPLOAD_BYTES"])
        for path in ProgressBar(files, desc="documents", unit="file", disable=options["quiet"], leave=False):
            if path.stat().st_size > limit:
                outcomes["failed"] += 1
                problems.append(f"{path}: larger than {limit} bytes")
                continue
            try:
                uploaded = services.document_upload(
                    owner=None,
                    filename=path.name,
                    data=path.read_bytes(),
                    source=str(path.resolve()),
                    enqueue=options["queue"],
                )
            except ApplicationError as exc:
                outcomes["failed"] += 1
                problems.append(f"{path}: {exc.message}")
                continue
            if not uploaded.created and uploaded.document.status != "pending":
                outcomes["unchanged"] += 1
                continue
            if options["queue"]:
                if not uploaded.created:  # still pending from an earlier run: queue it again
                    try:
                        services.document_enqueue(uploaded.document)
                    except ApplicationError as exc:
                        outcomes["failed"] += 1
                        problems.append(f"{path}: {exc.message}")
                        continue
                outcomes["queued"] += 1
                continue
            try:
                status = services.document_index(document_id=str(uploaded.document.id), embedder=model)
            except Exception as exc:  # noqa: BLE001 - one line per file, never a traceback; the rest go on
                outcomes["failed"] += 1
                problems.append(f"{path}: could not be indexed ({type(exc).__name__}); it stays pending")
                continue
            outcomes[status] += 1
            if status == "failed":
                code, reason = Document.objects.values_list("failure_code", "failure_reason").get(
                    pk=uploaded.document.pk
                )
                problems.append(f"{path}: {reason} [{code}]")
        summary = ", ".join(f"{count} {name}" for name, count in sorted(outcomes.items()))
        self.stdout.write(f"{len(files)} files: {summary}")
        for problem in problems:
            self.stdout.write(f"  {problem}")
        if outcomes["failed"] == len(files):
            raise CommandError("no document could be added")
