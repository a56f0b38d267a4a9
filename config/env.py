"""Reading settings from the environment (12-factor). Every value has a local default."""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default).strip() or default


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None or not value.strip():
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value and value.strip() else default


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value and value.strip() else default


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if not value or not value.strip():
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def local_secret(path: Path, *, nbytes: int = 48) -> str:
    """A random secret kept in ``path`` (created once, readable by its owner only), so that
    every process of one installation shares it across restarts without any configuration."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        for _ in range(50):  # another process may be writing it this very moment
            value = path.read_text().strip()
            if value:
                return value
            time.sleep(0.02)
        raise RuntimeError(f"{path} is empty: delete it to have a new secret generated") from None
    value = secrets.token_urlsafe(nbytes)
    with os.fdopen(fd, "w") as out:
        out.write(value + "\n")
    return value
