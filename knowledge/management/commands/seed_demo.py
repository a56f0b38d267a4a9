"""``manage.py seed_demo [--quiet]``: load the demo incidents into the knowledge base, the log
store and the business database.

Every incident under ``knowledge/demo/incidents/`` contributes its documents (indexed here),
its logs and its business tables; the shipped runbooks are loaded too. Running it again
changes nothing that is already there: documents are recognised by their content, each log
file's lines replace the ones it stored before, and the tables are recreated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from knowledge.fixtures import FixtureError, merge, read_tables, write_tables
from knowledge.logs.ingest import ingest, log_files
from knowledge.runbooks import load_runbooks
from knowledge.scenarios import SHIPPED_RUNBOOKS, load_documents

INCIDENTS = Path(__file__).resolve().parents[2] / "demo" / "incidents"


class Command(BaseCommand):
    help = (
        "Load the demo incidents (documents, runbooks, logs, business tables) for the demo and for trying the service."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--quiet", action="store_true", help="print only the summary")

    def handle(self, *args: Any, **options: Any) -> None:
        from knowledge.backends import embedder

        incidents = sorted(p for p in INCIDENTS.iterdir() if p.is_dir()) if INCIDENTS.is_dir() else []
        if not incidents:
            raise CommandError(f"no demo incidents under {INCIDENTS}")
        runbooks = load_runbooks(SHIPPED_RUNBOOKS)
        docs = [p for incident in incidents for p in [incident / "docs"] if p.is_dir()]
        problems = load_documents(docs, embedder=embedder())
        logs = log_files(p for incident in incidents if (p := incident / "logs").is_dir())
        report = ingest(logs, progress=not options["quiet"], replace_existing=True)
        if report.refused:
            refused = report.refused[0]
            raise CommandError(f"{refused.path}: refused ({refused.code}): {refused.reason}")
        try:
            tables = merge(
                [t for incident in incidents if (f := incident / "tables.yaml").is_file() for t in read_tables(f)]
            )
        except FixtureError as exc:
            raise CommandError(str(exc)) from None
        url = settings.EVIDENCE_SQL_URL
        if url and url != "none":
            write_tables(url, tables)
        self.stdout.write(
            f"demo data: {len(incidents)} incidents; runbooks: {runbooks.summary()}; "
            f"{report.entries} log lines from {len(logs)} files; {len(tables)} business tables"
        )
        for problem in problems:
            self.stdout.write(f"  document not indexed: {problem}")
