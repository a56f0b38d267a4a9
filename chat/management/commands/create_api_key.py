from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from chat.services import api_key_create


class Command(BaseCommand):
    help = (
        "Create an API key for a user (created when absent). Prints the key, then the key's webhook "
        "signing secret (whsec_…), once: only the key's hash and the sealed secret are stored."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", required=True, help="username")
        parser.add_argument(
            "--staff", action="store_true", help="make the user staff (may read every run and the reasoning audit)"
        )
        parser.add_argument("--name", default="", help="a label for the key")

    def handle(self, *args: Any, **options: Any) -> None:
        key, raw, webhook_secret = api_key_create(
            username=options["user"], staff=options["staff"], name=options["name"]
        )
        self.stdout.write(raw)
        self.stdout.write(webhook_secret)
        self.stderr.write(f"created key {key.prefix}… for {key.user.username}{' (staff)' if key.user.is_staff else ''}")
