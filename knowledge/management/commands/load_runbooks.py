"""``python manage.py load_runbooks [DIR]``: upsert the Markdown runbooks of DIR (default: the
ones shipped in ``knowledge/runbooks/``) and print what changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from knowledge.runbooks import RUNBOOK_DIR, LoadReport, load_runbooks


class Command(BaseCommand):
    help = (
        "Load the Markdown runbooks of a directory (default: the shipped knowledge/runbooks) into the "
        "database: new files are created, changed files update their runbook (the file wins over an "
        "edit made in the admin), files that cannot be parsed are reported and skipped."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("directory", nargs="?", default=str(RUNBOOK_DIR), help="a directory of *.md runbooks")
        parser.add_argument("--strict", action="store_true", help="fail (exit status 1) when a file is rejected")

    def handle(self, *args: Any, **options: Any) -> None:
        directory = Path(options["directory"])
        try:
            report = load_runbooks(directory)
        except NotADirectoryError as exc:
            raise CommandError(str(exc)) from None
        self._print(report, verbosity=int(options["verbosity"]))
        if options["strict"] and report.rejected:
            raise CommandError(f"{len(report.rejected)} runbook file(s) rejected")

    def _print(self, report: LoadReport, *, verbosity: int) -> None:
        self.stdout.write(f"runbooks from {report.directory}: {report.summary()}")
        for slug in report.created:
            self.stdout.write(self.style.SUCCESS(f"  created    {slug}"))
        for slug in report.updated:
            self.stdout.write(self.style.SUCCESS(f"  updated    {slug}"))
        if verbosity > 1:
            for slug in report.unchanged:
                self.stdout.write(f"  unchanged  {slug}")
        for name, reason in report.rejected:
            self.stdout.write(self.style.WARNING(f"  rejected   {name}: {reason}"))
