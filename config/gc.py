"""Garbage-collector settings for long-lived service processes."""

from __future__ import annotations

import gc


def freeze_startup_objects() -> None:
    """Move every object alive after start-up (modules, settings, URL patterns, models) out of
    the collector's reach: a request or a run allocates thousands of short-lived objects, and
    without this each full collection rescans the whole framework as well."""
    gc.collect()
    gc.freeze()
