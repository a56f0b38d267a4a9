"""Django settings. Everything is configured from the environment; see .env.example.

With no environment at all the service runs locally: SQLite in ./var, Redis on localhost,
the offline analyst as the model.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from config.env import env_bool, env_float, env_int, env_list, env_str, secret_key
from core.startup import StartupError, database_settings

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("VAR_DIR", str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
# Admin sessions and the sealed webhook secrets depend on it, so every process of an
# installation (web, Celery workers, commands) and every restart must share it. A deployment
# (DEBUG off, other hosts allowed) must set DJANGO_SECRET_KEY; locally, unset, it is generated
# once into VAR_DIR/secret_key.
SECRET_KEY = secret_key(
    configured=env_str("DJANGO_SECRET_KEY"), debug=DEBUG, allowed_hosts=ALLOWED_HOSTS, path=VAR_DIR / "secret_key"
)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # before staticfiles: `runserver` leaves the static files to WhiteNoise too, as in production
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    # Swagger UI and Redoc as static files of our own: /api/docs needs no CDN
    "drf_spectacular_sidecar",
    "django_eventstream",
    "traces",
    "chat",
    "knowledge",
]

# Django's usual middleware, as sync-only variants (one thread hop per request under ASGI;
# see chat/middleware.py); the admin's cookie-session ones are skipped under /api/.
MIDDLEWARE = [
    "chat.middleware.RunLogContextMiddleware",
    "chat.middleware.BodySizeLimitMiddleware",
    "chat.middleware.SyncSecurityMiddleware",
    # /static/: answered here, before sessions or views (sync-only, as the others are)
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "chat.middleware.AdminSessionMiddleware",
    "chat.middleware.SyncCommonMiddleware",
    "chat.middleware.AdminCsrfViewMiddleware",
    "chat.middleware.AdminAuthenticationMiddleware",
    "chat.middleware.AdminMessageMiddleware",
    "chat.middleware.SyncXFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
# The chat page's sign-in (browsers); programs use API keys.
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
ASGI_APPLICATION = "config.asgi.application"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- database ------------------------------------------------------------------------------

DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'superbizagent.sqlite3'}")
# A malformed URL is one line from manage.py (core.startup), not a traceback.
DATABASES = {
    "default": database_settings(DATABASE_URL, conn_max_age=env_int("DB_CONN_MAX_AGE", 300), conn_health_checks=True)
}
_engine = DATABASES["default"]["ENGINE"]
if _engine.endswith("sqlite3"):
    # Web and worker processes write the same file: WAL, a busy timeout and immediate
    # transactions keep writers queueing instead of failing with "database is locked".
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}
    DATABASES["default"]["CONN_MAX_AGE"] = 0
elif "mysql" in _engine:
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "charset": "utf8mb4",
            "init_command": "SET sql_mode='STRICT_TRANS_TABLES'",
            "isolation_level": "read committed",
        }
    )
    # An unreachable server answers within this, rather than when the OS gives up (minutes).
    DATABASES["default"]["OPTIONS"].setdefault("connect_timeout", env_int("DB_CONNECT_TIMEOUT_S", 10))
    DATABASES["default"]["TEST"] = {"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# The admin's and the API docs' files, collected into STATIC_ROOT (`manage.py serve` and `demo`
# run collectstatic when they start; a deployment runs it once per release) and served by
# WhiteNoise whatever DEBUG says. Not compressed or hashed: collecting then only copies what
# changed, and a page never names a file that a missing manifest would turn into an error.
STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)  # empty until collected: WhiteNoise then serves nothing, quietly
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

# Threads per web process running sync views (each keeps its database connection).
WEB_SYNC_THREADS = env_int("WEB_SYNC_THREADS", 8)

# Requests bigger than this are refused (413) before anything reads them.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("MAX_REQUEST_BYTES", 64 * 1024)

# --- Redis, Celery, event stream -----------------------------------------------------------

REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL)
CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND", REDIS_URL)

RUN_DEADLINE_S = env_float("RUN_DEADLINE_S", 120.0)
# A message not acknowledged within this time is redelivered: longer than any run can take.
CELERY_VISIBILITY_TIMEOUT_S = max(env_int("CELERY_VISIBILITY_TIMEOUT_S", 3_600), int(RUN_DEADLINE_S * 3))
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": CELERY_VISIBILITY_TIMEOUT_S}
CELERY_BROKER_CONNECTION_TIMEOUT = env_float("CELERY_BROKER_CONNECTION_TIMEOUT_S", 2.0)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_DEFAULT_QUEUE = "runs"
# Webhook attempts wait on other servers: their own queue, served by a thread-pool worker, so a
# slow receiver never holds up a run.
# Indexing a document parses a stranger's file for up to KNOWLEDGE_EXTRACT_TIMEOUT_S: its own
# queue and worker too, so uploads never hold up a run.
CELERY_TASK_ROUTES = {
    "chat.deliver_webhook": {"queue": "webhooks"},
    "knowledge.index_document": {"queue": "knowledge"},
}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_WORKER_DISABLE_RATE_LIMITS = True  # no task is rate limited: skip the per-task token bucket
# Celery's Django fixup closes every database connection before and after each task unless this
# is set, so each run would open a new MySQL connection. Connections follow CONN_MAX_AGE and
# the health checks instead (config/celery.py); Celery itself recycles them only this rarely.
CELERY_DB_REUSE_MAX = 10_000

_r = urlparse(REDIS_URL)
try:
    _redis_port = _r.port or 6379
except ValueError:
    raise StartupError("REDIS_URL is malformed: the port is not a number") from None
# Events sent by workers reach the web processes' listeners through Redis pub/sub.
EVENTSTREAM_REDIS = {
    "host": _r.hostname or "127.0.0.1",
    "port": _redis_port,
    "db": int((_r.path or "/0").lstrip("/") or 0),
    **({"password": _r.password} if _r.password else {}),
}
EVENTSTREAM_STORAGE_CLASS = "chat.events.RunEventStorage"
EVENTSTREAM_CHANNELMANAGER_CLASS = "chat.events.RunChannelManager"

# --- the harness ---------------------------------------------------------------------------

HARNESS = {
    "DEADLINE_S": RUN_DEADLINE_S,
    "MAX_MODEL_CALLS": env_int("RUN_MAX_MODEL_CALLS", 12),
    "MAX_TOOL_CALLS": env_int("RUN_MAX_TOOL_CALLS", 12),
    "MAX_TOKENS": env_int("RUN_MAX_TOKENS", 120_000),
    # retries of failed model attempts, the whole run together (LLM_MAX_RETRIES bounds one call)
    "MAX_MODEL_RETRIES": env_int("RUN_MAX_MODEL_RETRIES", 4),
    "TOOL_TIMEOUT_S": env_float("TOOL_TIMEOUT_S", 15.0),
    "INVOCATION_TTL_S": max(env_int("INVOCATION_TTL_S", 86_400), int(RUN_DEADLINE_S * 2)),
}
# Provider per role: "offline" unless an OpenAI-compatible endpoint is configured.
LLM = {
    "BASE_URL": env_str("LLM_BASE_URL"),
    "API_KEY": env_str("LLM_API_KEY"),
    "MODEL": env_str("LLM_MODEL", "gpt-4o-mini"),
    "TIMEOUT_S": env_float("LLM_TIMEOUT_S", 60.0),
    "MAX_RETRIES": env_int("LLM_MAX_RETRIES", 2),
    "ROLES": {
        role: {
            "BASE_URL": env_str(f"LLM_{role.upper()}_BASE_URL"),
            "API_KEY": env_str(f"LLM_{role.upper()}_API_KEY"),
            "MODEL": env_str(f"LLM_{role.upper()}_MODEL"),
        }
        for role in ("router", "agent", "guard")
    },
}
# Upkeep, done by every runs worker (and by `manage.py sweep_stale_runs --every S`): a worker
# marks the runs it executes alive every HEARTBEAT_S; a running run silent for
# HEARTBEAT_TIMEOUT_S is failed (worker_lost); a queued run whose task nobody took for
# QUEUE_REPUBLISH_S is published again, and failed (queue_lost) once it has waited QUEUE_LOST_S.
# On SIGTERM a worker lets its run go on for SHUTDOWN_GRACE_S, then ends it (worker_shutdown).
RUN_UPKEEP = {
    "HEARTBEAT_S": env_float("RUN_HEARTBEAT_S", 2.0),
    "HEARTBEAT_TIMEOUT_S": env_float("RUN_HEARTBEAT_TIMEOUT_S", 15.0),
    "SWEEP_S": env_float("RUN_SWEEP_S", 5.0),
    "QUEUE_REPUBLISH_S": env_float("QUEUE_REPUBLISH_S", 30.0),
    "QUEUE_LOST_S": env_float("QUEUE_LOST_S", 600.0),
    "SHUTDOWN_GRACE_S": env_float("WORKER_SHUTDOWN_GRACE_S", 10.0),
}
# Runs allowed to wait in the queue before new questions get 503 queue_full.
MAX_QUEUED_RUNS = env_int("MAX_QUEUED_RUNS", 1_000)
# Per API key: runs queued or running at once (429 too_many_active_runs), and requests.
MAX_ACTIVE_RUNS_PER_KEY = env_int("MAX_ACTIVE_RUNS_PER_KEY", 50)
API_RATE_PER_KEY = env_str("API_RATE_PER_KEY", "1200/min")

# --- webhooks ------------------------------------------------------------------------------

WEBHOOK = {
    # seals the stored signing secrets; default: derived from the Django secret key
    "SECRETS_KEY": env_str("WEBHOOK_SECRETS_KEY"),
    "TIMEOUT_S": env_float("WEBHOOK_TIMEOUT_S", 15.0),
    # seconds before each attempt after the previous one failed (the Standard Webhooks schedule)
    "RETRY_SCHEDULE_S": [
        float(s)
        for s in env_list(
            "WEBHOOK_RETRY_SCHEDULE_S", ["0", "5", "300", "1800", "7200", "18000", "36000", "50400", "72000", "86400"]
        )
    ],
    "RETRY_JITTER": env_float("WEBHOOK_RETRY_JITTER", 0.1),
    "MAX_RETRY_AFTER_S": env_int("WEBHOOK_MAX_RETRY_AFTER_S", 86_400),
    "SECRET_GRACE_S": env_int("WEBHOOK_SECRET_GRACE_S", 86_400),
    # how often a webhook worker re-sends deliveries that are due and held by nobody (lost messages)
    "SWEEP_S": env_float("WEBHOOK_SWEEP_S", 30.0),
    # besides 80 and 443; and networks webhooks may reach although they are not public
    "ALLOWED_PORTS": env_list("WEBHOOK_ALLOWED_PORTS", []),
    "ALLOWED_CIDRS": env_list("WEBHOOK_ALLOWED_CIDRS", []),
}

# --- REST API ------------------------------------------------------------------------------

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["chat.authentication.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "core.api.exception_handler",
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_THROTTLE_CLASSES": ["chat.authentication.PerKeyRateThrottle"],
}

SPECTACULAR_SETTINGS = {
    "TITLE": "SuperBizAgent API",
    "DESCRIPTION": "Traceable fault diagnosis: ask a question, follow the run, read the verified result.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_AUTHENTICATION": [],
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    # the docs page loads its scripts and styles from STATIC_ROOT (drf-spectacular-sidecar)
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "core.api.document_errors"],
}

# --- metrics ---------------------------------------------------------------------------------

# Every process (web workers, Celery workers) writes its counters to files in this directory and
# /metrics adds them up (prometheus_client's multiprocess mode). The library reads the variable
# when it is imported, so it is exported here, before any module imports it. The service's stack
# (`manage.py serve`, chat/stack.py) empties the directory when it starts the processes.
METRICS_DIR = Path(env_str("PROMETHEUS_MULTIPROC_DIR", str(VAR_DIR / "metrics")))
METRICS_DIR.mkdir(parents=True, exist_ok=True)
os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(METRICS_DIR)
# Unset: /metrics answers only direct (unproxied) loopback connections. Set: only requests
# with `Authorization: Bearer <METRICS_TOKEN>`, from anywhere.
METRICS_TOKEN = env_str("METRICS_TOKEN")

# --- logging: ids, stages, codes and durations only -----------------------------------------

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "redact": {"()": "config.logging.RedactExceptions"},
        # the run a worker is executing (or "-"), on every line it logs, from any thread of the run
        "run_id": {"()": "config.logging.RunIdFilter"},
    },
    "formatters": {"plain": {"()": "config.logging.plain_formatter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["redact", "run_id"]}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.request": {"level": "ERROR"},
        "django_eventstream": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        "bm25s": {"level": "WARNING"},
        "openai": {"level": "WARNING"},
    },
}

# Where the evidence tools look. "database": the knowledge base, log store, runbooks and the
# business datasource of the knowledge app; "example": the small incident bundled with the
# harness, in memory; "none": no evidence tools at all.
EVIDENCE_SOURCE = env_str("EVIDENCE_SOURCE", "database")
# Added to every evidence call: to see a run's progress in the demo, or to test cancelling.
EVIDENCE_LATENCY_S = env_float("EVIDENCE_LATENCY_S", 0.0)

# The knowledge base (knowledge app). Uploads larger than MAX_UPLOAD_BYTES are refused with 413.
# A chunk counts as evidence when it holds MIN_COVERAGE of the query's informative terms
# (IDF-weighted) or its embedding is at least MIN_COSINE close to the query's.
# ENGINE "local": each process indexes the chunks in memory; "milvus": a Milvus collection at
# MILVUS_URI (a server, or a milvus-lite .db file, which only one process can open), kept in
# line with the database by the searching processes (knowledge/milvus.py).
KNOWLEDGE: dict[str, Any] = {
    "MAX_UPLOAD_BYTES": env_int("KNOWLEDGE_MAX_UPLOAD_BYTES", 10 * 1024 * 1024),
    "CHUNK_MAX_CHARS": env_int("KNOWLEDGE_CHUNK_MAX_CHARS", 1_200),
    "CHUNK_MAX_TOKENS": env_int("KNOWLEDGE_CHUNK_MAX_TOKENS", 256),
    "CHUNK_OVERLAP_CHARS": env_int("KNOWLEDGE_CHUNK_OVERLAP_CHARS", 200),
    "MIN_COVERAGE": env_float("KNOWLEDGE_MIN_COVERAGE", 0.5),
    "MIN_COSINE": env_float("KNOWLEDGE_MIN_COSINE", 0.40),
    "ENGINE": env_str("KNOWLEDGE_ENGINE", "local"),
    "MILVUS_URI": env_str("MILVUS_URI", str(VAR_DIR / "milvus.db")),
    "MILVUS_TOKEN": env_str("MILVUS_TOKEN", ""),
    "MILVUS_COLLECTION": env_str("MILVUS_COLLECTION", "superbizagent_chunks"),
    "MILVUS_TIMEOUT_S": env_float("MILVUS_TIMEOUT_S", 10.0),
    # Extracting and chunking one document runs in a child process killed at this deadline and
    # confined to this much memory (knowledge/isolation.py); past either, the document fails.
    "EXTRACT_TIMEOUT_S": env_float("KNOWLEDGE_EXTRACT_TIMEOUT_S", 60.0),
    "EXTRACT_MAX_MEMORY_MB": env_int("KNOWLEDGE_EXTRACT_MAX_MEMORY_MB", 1024),
}
if not KNOWLEDGE["EXTRACT_TIMEOUT_S"] > 0 or KNOWLEDGE["EXTRACT_MAX_MEMORY_MB"] < 128:
    raise StartupError("KNOWLEDGE_EXTRACT_TIMEOUT_S must be above 0 and KNOWLEDGE_EXTRACT_MAX_MEMORY_MB at least 128")
# Threads one process may use for numeric work (numpy's BLAS, the onnxruntime embedding model
# and dense scan); 0 means one per core, which only contends when several service processes
# share the cores.
COMPUTE_THREADS = env_int("COMPUTE_THREADS", 1)
# Embeddings for dense retrieval: "local" (all-MiniLM-L6-v2, shipped in a package, CPU),
# "openai" (any OpenAI-compatible /v1/embeddings endpoint) or "none" (lexical retrieval only).
EMBEDDINGS = {
    "PROVIDER": env_str("EMBEDDINGS_PROVIDER", "local"),
    "MODEL_DIR": env_str("EMBEDDINGS_MODEL_DIR", ""),
    "BASE_URL": env_str("EMBEDDINGS_BASE_URL", ""),
    "API_KEY": env_str("EMBEDDINGS_API_KEY", ""),
    "MODEL": env_str("EMBEDDINGS_MODEL", ""),
    "DIMENSION": env_int("EMBEDDINGS_DIMENSION", 0),
    "TIMEOUT_S": env_float("EMBEDDINGS_TIMEOUT_S", 30.0),
    "THREADS": COMPUTE_THREADS,
}

# Log ingestion (manage.py ingest_logs): a file whose content (a .gz decompressed, never further
# than this) is larger than LOG_MAX_DECOMPRESSED_BYTES, or has more than LOG_MAX_LINES lines, is
# refused whole and nothing of it stored; a line longer than LOG_MAX_LINE_BYTES is one
# unparsable line, and the lines after it are read.
LOG_MAX_DECOMPRESSED_BYTES = env_int("LOG_MAX_DECOMPRESSED_BYTES", 256 * 1024 * 1024)
LOG_MAX_LINES = env_int("LOG_MAX_LINES", 5_000_000)
LOG_MAX_LINE_BYTES = env_int("LOG_MAX_LINE_BYTES", 256 * 1024)

# The business datasource behind the agent's query_mysql tool: sqlite:///path/to/file.sqlite3
# or mysql://user:password@host:3306/database ("none": no query_mysql tool). Statements are
# checked (knowledge/sql_guard.py) and run read-only; give it a database user that can only
# SELECT. EVIDENCE_SQL_TABLES lists the tables the agent may read (comma-separated; empty:
# every table); each statement is stopped after the timeout and its result capped in rows and
# in bytes of cell text.
EVIDENCE_SQL_URL = env_str("EVIDENCE_SQL_URL", f"sqlite:///{VAR_DIR / 'business.sqlite3'}")
EVIDENCE_SQL_TABLES = env_list("EVIDENCE_SQL_TABLES", [])
EVIDENCE_SQL_TIMEOUT_S = env_float("EVIDENCE_SQL_TIMEOUT_S", 5.0)
EVIDENCE_SQL_MAX_ROWS = env_int("EVIDENCE_SQL_MAX_ROWS", 200)
EVIDENCE_SQL_MAX_BYTES = env_int("EVIDENCE_SQL_MAX_BYTES", 65536)
# A longer value is cut (and marked "…"); wider results and longer statements are refused.
EVIDENCE_SQL_MAX_VALUE_BYTES = env_int("EVIDENCE_SQL_MAX_VALUE_BYTES", 8192)
EVIDENCE_SQL_MAX_COLUMNS = env_int("EVIDENCE_SQL_MAX_COLUMNS", 64)
EVIDENCE_SQL_MAX_CHARS = env_int("EVIDENCE_SQL_MAX_CHARS", 4000)
