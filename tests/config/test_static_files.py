"""The admin and the API docs are styled with DEBUG off: their files are collected into
STATIC_ROOT and served by the application itself (WhiteNoise), under ASGI as under WSGI."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from chat.stack import free_port
from tests.config.test_startup import ROOT, manage

pytestmark = pytest.mark.timeout(180)

STYLESHEET = "/static/admin/css/base.css"
SWAGGER_UI = "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js"

_WSGI_REQUEST = """
import sys
from wsgiref.util import setup_testing_defaults

from config.wsgi import application

for path in sys.argv[1:]:
    environ = {"PATH_INFO": path, "REQUEST_METHOD": "GET"}
    setup_testing_defaults(environ)
    said = []
    body = b"".join(application(environ, lambda status, headers: said.append((status, dict(headers)))))
    status, headers = said[0]
    print(path, status.split()[0], headers.get("Content-Type", "").split(";")[0], len(body))
"""


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh installation's VAR_DIR after ``collectstatic``, as ``serve`` runs it."""
    var_dir = tmp_path_factory.mktemp("var")
    result = manage("collectstatic", "--noinput", var_dir=var_dir, DJANGO_DEBUG="false")
    assert result.returncode == 0, result.stderr
    assert (var_dir / "static" / "admin" / "css" / "base.css").is_file()
    return var_dir


def _environ(var_dir: Path) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "SBA_STACK_PID")}
    environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DJANGO_DEBUG": "false",
            "VAR_DIR": str(var_dir),
            "REDIS_URL": str(settings.REDIS_URL),
            "EMBEDDINGS_PROVIDER": "none",
        }
    )
    return environ


def test_the_asgi_server_serves_the_admin_stylesheet_and_the_docs_scripts_with_debug_off(collected: Path) -> None:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "config.asgi:application", "--port", str(port), "--log-level", "warning"],
        cwd=ROOT,
        env=_environ(collected),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, server.communicate()[0]
            try:
                css = httpx.get(f"http://127.0.0.1:{port}{STYLESHEET}", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the server did not answer"
                time.sleep(0.2)
        assert css.status_code == 200
        assert css.headers["content-type"].split(";")[0] == "text/css"
        assert b"body" in css.content
        script = httpx.get(f"http://127.0.0.1:{port}{SWAGGER_UI}", timeout=5)
        assert script.status_code == 200
        assert script.headers["content-type"].split(";")[0] == "text/javascript"
        assert httpx.get(f"http://127.0.0.1:{port}/static/admin/css/missing.css", timeout=2).status_code == 404
    finally:
        server.terminate()
        output = server.communicate(timeout=20)[0].decode()
    assert "Warning" not in output and "Traceback" not in output, output


def test_the_wsgi_application_serves_the_admin_stylesheet_with_debug_off(collected: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _WSGI_REQUEST, STYLESHEET, SWAGGER_UI],
        cwd=ROOT,
        env=_environ(collected),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    css, script = (line.split() for line in result.stdout.splitlines())
    assert css[1:3] == ["200", "text/css"] and int(css[3]) > 0
    assert script[1:3] == ["200", "text/javascript"]


@pytest.mark.parametrize(("command", "collects"), [("serve", True), ("demo", True), ("seed_demo", False)])
def test_the_commands_that_start_the_web_server_collect_the_static_files_first(
    monkeypatch: pytest.MonkeyPatch, command: str, collects: bool
) -> None:
    from core import startup

    collected: list[str] = []
    monkeypatch.setattr(startup, "database_check", lambda: None)
    monkeypatch.setattr(startup, "schema_ensure", lambda: 0)
    monkeypatch.setattr(startup, "static_ensure", lambda: collected.append(command))
    startup.prepare([command])
    assert collected == ([command] if collects else [])
