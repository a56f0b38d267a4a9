"""Reading settings from the environment (12-factor). Every value has a local default."""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from pathlib import Path

from core.startup import StartupError


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default).strip() or default


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None or not value.strip():
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if not value or not value.strip():
        return default
    try:
        return int(value)
    except ValueError:
        raise StartupError(f"{name} must be a whole number, not {value.strip()[:40]!r}") from None


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    if not value or not value.strip():
        return default
    try:
        return float(value)
    except ValueError:
        raise StartupError(f"{name} must be a number, not {value.strip()[:40]!r}") from None


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if not value or not value.strip():
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


#: host names that reach this machine only: a service answering to none other is not deployed
LOCAL_HOSTS = frozenset({"localhost", ".localhost", "127.0.0.1", "::1", "[::1]", "testserver"})


def secret_key(*, configured: str, debug: bool, allowed_hosts: list[str], path: Path) -> str:
    """Django's ``SECRET_KEY``: ``configured`` (``DJANGO_SECRET_KEY``) when set. Otherwise, on a
    deployment (DEBUG off and ``allowed_hosts`` naming a host besides this machine's loopback
    names) a :class:`~core.startup.StartupError`: a key made up on one host would differ on the
    next. Locally, the key kept in ``path`` (:func:`local_secret`)."""
    if configured:
        return configured
    public = sorted(set(allowed_hosts) - LOCAL_HOSTS)
    if not debug and public:
        raise StartupError(
            f"DJANGO_SECRET_KEY is not set: it is required when DJANGO_DEBUG is off and DJANGO_ALLOWED_HOSTS "
            f"names other hosts ({', '.join(public)}); set it to a long random value shared by every process"
        )
    return local_secret(path)


def local_secret(path: Path, *, nbytes: int = 48) -> str:
    """A random secret kept in ``path``, so that every process of one installation shares it
    across restarts without any configuration.

    The file appears complete or not at all: the secret is written to a private (0600) temporary
    file beside it, which is then hard-linked to ``path``, an operation that fails when ``path``
    exists. Of two processes starting at once, one link succeeds; the other reads the winner's."""
    try:
        return _read_secret(path)
    except FileNotFoundError:
        pass
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mode 0600
        try:
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_urlsafe(nbytes) + "\n")
                out.flush()
                os.fsync(out.fileno())
            with contextlib.suppress(FileExistsError):  # another process was first: its key counts
                os.link(temporary, path)
        finally:
            os.unlink(temporary)
        return _read_secret(path)
    except OSError as exc:
        raise StartupError(
            f"cannot keep a secret key in {path}: {exc.strerror or exc}; set DJANGO_SECRET_KEY instead"
        ) from None


def _read_secret(path: Path) -> str:
    value = path.read_text().strip()
    if not value:
        raise StartupError(f"{path} is empty: delete it to have a new secret key generated")
    return value
