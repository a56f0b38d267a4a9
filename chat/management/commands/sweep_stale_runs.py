from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import close_old_connections

from chat.services import run_sweep_stale


class Command(BaseCommand):
    help = (
        "End runs whose worker is gone and re-publish queued runs whose task was lost. "
        "With --every, keep sweeping (a standalone sweeper; every runs worker also sweeps)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--every", type=float, default=0.0, metavar="SECONDS", help="sweep again every SECONDS")

    def handle(self, *args: Any, **options: Any) -> None:
        every = float(options["every"])
        if every <= 0:
            self._report(run_sweep_stale())
            return
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        self.stdout.write(f"sweeping every {every:g}s; SIGTERM stops")
        while not stop.wait(every):
            close_old_connections()
            try:
                swept = run_sweep_stale()
            except Exception as exc:  # noqa: BLE001 - a database blip: the next round tries again
                self.stderr.write(f"sweep failed: {type(exc).__name__}")
                continue
            if swept.ended or swept.republished:
                self._report(swept)

    def _report(self, swept: Any) -> None:
        self.stdout.write(
            f"ended {swept.lost} run(s) whose worker was lost, {swept.expired} whose task was lost; "
            f"re-published {swept.republished}"
        )
