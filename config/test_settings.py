"""Settings for the test suite: the same service, on its own Redis database and files."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from urllib.parse import urlparse

os.environ.setdefault("VAR_DIR", str(os.path.join(os.path.dirname(os.path.dirname(__file__)), "var", "test")))
if "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
    # Each test session counts from zero, apart from any other; its processes share the directory.
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="sba-test-metrics-")
    atexit.register(shutil.rmtree, os.environ["PROMETHEUS_MULTIPROC_DIR"], True)

from config.settings import *  # noqa: F403
from config.settings import HARNESS

REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = REDIS_URL
_r = urlparse(REDIS_URL)
EVENTSTREAM_REDIS = {
    "host": _r.hostname or "127.0.0.1",
    "port": _r.port or 6379,
    "db": int((_r.path or "/15").lstrip("/") or 15),
    **({"password": _r.password} if _r.password else {}),
}
# The service tests use the bundled in-memory incident; the knowledge tests set "database".
EVIDENCE_SOURCE = os.environ.get("EVIDENCE_SOURCE", "example")
HARNESS = {**HARNESS, "DEADLINE_S": float(os.environ.get("RUN_DEADLINE_S", "60"))}
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Limits the tests that need them set themselves.
API_RATE_PER_KEY = os.environ.get("API_RATE_PER_KEY", "1000000/min")
MAX_ACTIVE_RUNS_PER_KEY = int(os.environ.get("MAX_ACTIVE_RUNS_PER_KEY", "100000"))
