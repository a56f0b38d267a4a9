"""``manage.py serve`` on a terminal: one banner with the URLs, then quiet. The children's own
output (Celery's banners and warnings, the server's messages) goes to their log files."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from chat.stack import free_port
from tests.config.test_startup import ROOT
from tests.config.test_static_files import STYLESHEET, _environ

pytestmark = pytest.mark.timeout(240)


def test_serve_prints_one_banner_and_the_children_write_to_their_logs(tmp_path: Path) -> None:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(port), "--worker-concurrency", "1"],
        cwd=ROOT,
        env=_environ(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in server.stdout or ():
            lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    stdout: list[str] = []
    try:
        deadline = time.monotonic() + 180
        while not stdout or stdout[-1] != "Ctrl-C stops it.":
            assert server.poll() is None, stdout
            try:
                stdout.append(lines.get(timeout=max(0.1, deadline - time.monotonic())).rstrip("\n"))
            except queue.Empty:
                pytest.fail(f"no banner within 180 s: {stdout}")
        # the static files were collected on the way up: the admin is styled with DEBUG off
        css = httpx.get(f"http://127.0.0.1:{port}{STYLESHEET}", timeout=5)
        assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=60)
        reader.join(timeout=10)
    stderr = server.stderr.read() if server.stderr else ""
    while not lines.empty():
        stdout.append(lines.get().rstrip("\n"))
    assert server.returncode == 0, stderr

    url = f"http://127.0.0.1:{port}"
    logs = tmp_path / "logs"
    assert stdout == [
        f"SuperBizAgent is up on {url}",
        f"  API      {url}/api/  (docs {url}/api/docs)",
        f"  admin    {url}/admin/",
        f"  metrics  {url}/metrics",
        f"  logs     {logs}/  (web.log, worker-0.log, webhooks.log, knowledge-0.log)",
        "Ctrl-C stops it.",
        "stopping…",
    ]
    assert [line for line in stderr.splitlines() if not line.startswith("applied ")] == []
    worker_log = (logs / "worker-0.log").read_text()
    assert "-------------- runs-" in worker_log  # Celery's banner, where it belongs
    assert worker_log.startswith("--- ") and " worker-0 starting ---" in worker_log.splitlines()[0]
    assert "[queues]" in (logs / "webhooks.log").read_text()
    assert (logs / "web.log").read_text().startswith("--- ")
