from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from chat.services import run_sweep_stale


class Command(BaseCommand):
    help = "Fail runs whose worker is gone (running past their deadline, or queued past redelivery)."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(f"ended {run_sweep_stale()} stale run(s)")
