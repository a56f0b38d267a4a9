from __future__ import annotations

import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from chat.stack import Stack


class Command(BaseCommand):
    help = "Run the service in the foreground: migrations, Redis if none is reachable, the ASGI server and a Celery worker. Ctrl-C or SIGTERM stops all of it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=int(__import__("os").environ.get("PORT", "8000")))
        parser.add_argument("--web-workers", type=int, default=1)
        parser.add_argument("--worker-concurrency", type=int, default=2)

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        stack = Stack(
            port=options["port"],
            web_workers=options["web_workers"],
            worker_concurrency=options["worker_concurrency"],
            # the children's output (Celery's banners, warnings, the server's errors) goes to
            # their log files; the terminal gets the banner and what the supervisor has to say
            log_dir=settings.VAR_DIR / "logs",
        )
        stack.ensure_redis()  # before anything starts: a Redis that cannot be had is one line, nothing to stop
        try:
            stack.start()
            self.stdout.write(stack.banner())
            # A child that dies (a worker killed, the server crashed) is started again; the
            # runs it held are ended or re-published by the workers' sweeps (chat.upkeep).
            stack.supervise(stop, report=self.stderr.write)
        except RuntimeError as exc:  # a child that keeps dying, or one that never came up
            raise CommandError(f"{exc}; logs in {stack.log_dir}") from None
        finally:
            self.stdout.write("stopping…")
            stack.stop()
