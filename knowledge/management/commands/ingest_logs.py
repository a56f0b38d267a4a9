"""``manage.py ingest_logs PATH... [--service NAME] [--replace] [--quiet]``: store log files for
``query_logs``. Running it again stores only the lines that are new. A file beyond the limits
(``LOG_MAX_DECOMPRESSED_BYTES``, ``LOG_MAX_LINES``) or unreadable is refused with one line, the
others are ingested, and the command exits non-zero."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from knowledge.logs.ingest import LOG_SUFFIXES, IngestLimits, format_report, ingest, log_files
from knowledge.logs.parsing import UNKNOWN_SERVICE


class Command(BaseCommand):
    help = (
        "Parse log files (JSON lines, ISO-8601 plain text, Monolog, syslog, logfmt; .gz too) and store "
        "their lines for the query_logs tool. Lines already stored (from the same file or another) are not "
        "stored again, so running it twice, or on a file that grew, adds only the new lines. Prints how many "
        "lines were stored, how many were there already, and the first ones that could not be parsed. A file "
        "larger than LOG_MAX_DECOMPRESSED_BYTES once decompressed, with more than LOG_MAX_LINES lines, or "
        "unreadable is refused whole (nothing of it stored), and the command then exits non-zero."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+", metavar="PATH", help="log files, or folders of them, to ingest")
        parser.add_argument(
            "--service",
            default=None,
            help="the service of lines that name none (default: the one the file's name names, "
            f"checkout-api.log → checkout-api; {UNKNOWN_SERVICE} for a generic name such as events.jsonl)",
        )
        parser.add_argument("--quiet", action="store_true", help="no progress bar")
        parser.add_argument("--batch", type=int, default=2000, help="rows per insert (default: 2000)")
        parser.add_argument(
            "--replace",
            action="store_true",
            help="first delete the lines an earlier ingest stored from the same files, and read them even if "
            "unchanged: for a file that was edited or truncated rather than appended to",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        paths = log_files(options["paths"])
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise CommandError(f"not a file or folder: {', '.join(missing)}")
        if not paths:
            raise CommandError(f"no log files ({', '.join(LOG_SUFFIXES)}) in the given folders")
        if options["batch"] < 1:
            raise CommandError("--batch must be at least 1")
        try:
            limits = IngestLimits.from_settings()
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        report = ingest(
            paths,
            default_service=options["service"],
            batch=options["batch"],
            progress=not options["quiet"],
            replace_existing=options["replace"],
            limits=limits,
        )
        self.stdout.write(format_report(report))
        if report.refused:
            n = len(report.refused)
            raise CommandError(f"{n} of {len(report.files)} file{'s' * (len(report.files) != 1)} refused")
        if report.read and not report.entries:
            raise CommandError("no line could be parsed")
