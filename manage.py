#!/usr/bin/env python
"""Django's command-line utility for SuperBizAgent."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import execute_from_command_line

    from core.startup import StartupError, prepare

    try:
        prepare(sys.argv[1:])
        execute_from_command_line(sys.argv)
    except StartupError as exc:
        # what is wrong, in one line: a traceback would bury it
        sys.stderr.write(f"error: {exc}\n")
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
