"""Running the whole service on one machine: Redis (when none is reachable at a local address),
the ASGI server and a Celery worker, as child processes that stop together.

Used by ``manage.py serve`` (foreground), ``manage.py demo``, the end-to-end tests and the
benchmarks, so all of them run exactly the same processes.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import httpx
import redis

from core.startup import StartupError, safe_url

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def redis_reachable(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5).ping())
    except (redis.RedisError, ValueError):  # ValueError: a malformed URL
        return False


#: The hosts a Redis URL may name for a redis-server to be started here when none answers: this
#: machine's loopback names, the default. Any other host is a server this machine does not run,
#: so the answer is an error, not a local Redis on the port the URL happens to name.
LOCAL_REDIS_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", ""})


def local_redis_address(url: str) -> tuple[str, int]:
    """Where a redis-server for ``url``, which does not answer, may be started (host to bind,
    port); a :class:`StartupError` when the URL names another host or its port is taken."""
    try:
        parts = urlparse(url)
        host, port = parts.hostname or "", parts.port or 6379
    except ValueError:
        raise StartupError("REDIS_URL is malformed: the port is not a number") from None
    if parts.scheme != "redis" or host not in LOCAL_REDIS_HOSTS:
        raise StartupError(f"Redis at {safe_url(url)} does not answer")
    bind = host if host == "::1" else "127.0.0.1"
    try:
        with socket.create_connection((bind, port), timeout=0.5):
            pass
    except OSError:
        return bind, port
    raise StartupError(f"Redis at {safe_url(url)} does not answer, and another program listens on port {port}")


def _redis_server_binary() -> str | None:
    found = shutil.which("redis-server")
    if found or not shutil.which("apt-get") or os.geteuid() != 0:
        return found
    # Debian's package, installed on first use where we may (root, apt available).
    logger.warning("redis-server is missing; installing Debian's redis-server")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "redis-server"]
    if subprocess.run(install, check=False, capture_output=True, env=env).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], check=False, capture_output=True, env=env)
        subprocess.run(install, check=False, capture_output=True, env=env)
    return shutil.which("redis-server")


def lifeline_env() -> dict[str, str]:
    """What a child's environment needs so that, loading the project, it ends when this process
    does, however this one ends (config.lifeline watches the process it names)."""
    return {"SBA_STACK_PID": str(os.getpid())}


def signalled_when_parent_exits(signum: int = signal.SIGTERM) -> None:
    """In the child, before exec: the kernel sends ``signum`` when the parent thread exits (Linux)."""
    if sys.platform == "linux":
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signum)


@dataclass
class Stack:
    """The service's processes. ``env`` is passed to every child on top of os.environ."""

    port: int = 8000
    env: Mapping[str, str] = field(default_factory=dict)
    web_workers: int = 1
    #: worker processes, each running one run at a time
    worker_concurrency: int = 2
    #: threads of the worker that sends webhooks (0: no such worker)
    webhook_threads: int = 8
    #: workers indexing uploaded documents, one at a time each (0: none; uploads stay pending)
    knowledge_workers: int = 1
    #: where each child's output goes, one ``<name>.log`` each (appended to; a line marks each start)
    log_dir: Path | None = None
    #: False: the children write to this process's terminal instead of their log files
    quiet: bool = True
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    #: how each process was started, to start it again when it dies
    commands: dict[str, list[str]] = field(default_factory=dict)
    #: a process that exits more often than this within ``RESTART_WINDOW_S`` is not restarted again
    max_restarts: int = 5
    _restarts: dict[str, list[float]] = field(default_factory=dict)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    RESTART_WINDOW_S = 60.0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        return {**os.environ, **self.env, "PYTHONUNBUFFERED": "1", **lifeline_env()}

    def _spawn(self, name: str, command: list[str]) -> None:
        if self.log_dir is None:
            self.log_dir = Path(tempfile.mkdtemp(prefix="sba-stack-"))
        log_dir = self.log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        self.commands[name] = command
        out = open(log_dir / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child for its lifetime
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        out.write(f"--- {started} {name} starting ---\n".encode())
        out.flush()
        self.processes[name] = subprocess.Popen(
            command,
            cwd=ROOT,
            env=self._env(),
            stdout=out if self.quiet else None,
            stderr=subprocess.STDOUT if self.quiet else None,
            start_new_session=True,
            # and those that do not (the web server's supervisor, redis-server) get SIGTERM then
            preexec_fn=signalled_when_parent_exits,
        )

    def banner(self) -> str:
        """Where the running service answers, and where its processes write: what ``serve``
        prints once every process is up."""
        url = self.base_url
        return "\n".join(
            [
                f"SuperBizAgent is up on {url}",
                f"  API      {url}/api/  (docs {url}/api/docs)",
                f"  admin    {url}/admin/",
                f"  metrics  {url}/metrics",
                f"  logs     {self.log_dir}/  ({', '.join(f'{name}.log' for name in self.processes)})",
                "Ctrl-C stops it.",
            ]
        )

    def ensure_redis(self) -> None:
        url = self._env().get("REDIS_URL", "redis://127.0.0.1:6379/0")
        if redis_reachable(url):
            return
        host, port = local_redis_address(url)
        binary = _redis_server_binary()
        if binary is None:
            raise StartupError(f"Redis at {safe_url(url)} does not answer and redis-server could not be installed")
        self._spawn("redis", [binary, "--port", str(port), "--bind", host, "--save", "", "--appendonly", "no"])
        self._wait(lambda: redis_reachable(url), "redis", 10)

    def start(self, *, with_redis: bool = True, timeout_s: float = 60.0) -> Stack:
        """Start every process and wait until each answers; on any failure, stop those started."""
        try:
            return self._start(with_redis=with_redis, timeout_s=timeout_s)
        except BaseException:
            self.stop()
            raise

    def _start(self, *, with_redis: bool, timeout_s: float) -> Stack:
        self._fresh_metrics()
        if with_redis:
            self.ensure_redis()
        self._spawn(
            "web",
            [
                sys.executable, "-m", "uvicorn", "config.asgi:application",
                "--host", "127.0.0.1", "--port", str(self.port),
                "--workers", str(self.web_workers), "--loop", "uvloop", "--http", "httptools",
                "--log-level", "warning", "--no-access-log", "--timeout-graceful-shutdown", "5",
            ],
        )  # fmt: skip
        # Several single-process ("solo") workers rather than one prefork pool: a run is short
        # and CPU-bound, and solo workers skip the pool's per-task hand-over between processes.
        for i in range(self.worker_concurrency):
            self._spawn(
                f"worker-{i}",
                [
                    sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", "runs", "-n", f"runs-{self.port}-{i}@%h",
                    "--pool", "solo", "--prefetch-multiplier", "1",
                    "--without-gossip", "--without-mingle", "--loglevel", "WARNING",
                ],
            )  # fmt: skip
        if self.webhook_threads:
            # Webhook attempts wait on other servers: threads, on their own queue.
            self._spawn(
                "webhooks",
                [
                    sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", "webhooks",
                    "-n", f"webhooks-{self.port}@%h", "--pool", "threads", "--concurrency", str(self.webhook_threads),
                    "--without-gossip", "--without-mingle", "--loglevel", "WARNING",
                ],
            )  # fmt: skip
        for i in range(self.knowledge_workers):
            # Indexing parses uploads (for up to KNOWLEDGE_EXTRACT_TIMEOUT_S each): its own
            # queue and process, so a hostile file never keeps a run waiting.
            self._spawn(
                f"knowledge-{i}",
                [
                    sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", "knowledge",
                    "-n", f"knowledge-{self.port}-{i}@%h", "--pool", "solo", "--prefetch-multiplier", "1",
                    "--without-gossip", "--without-mingle", "--loglevel", "WARNING",
                ],
            )  # fmt: skip
        self._wait(self._web_ready, "web", timeout_s)
        for i in range(self.worker_concurrency):
            self._wait(lambda i=i: self._worker_ready(f"runs-{self.port}-{i}"), f"worker-{i}", timeout_s)
        if self.webhook_threads:
            self._wait(lambda: self._worker_ready(f"webhooks-{self.port}"), "webhooks", timeout_s)
        for i in range(self.knowledge_workers):
            self._wait(lambda i=i: self._worker_ready(f"knowledge-{self.port}-{i}"), f"knowledge-{i}", timeout_s)
        return self

    def _fresh_metrics(self) -> None:
        """The metrics restart with the service: an earlier run's files would add to them (the
        children write into PROMETHEUS_MULTIPROC_DIR, which the settings export)."""
        directory = self._env().get("PROMETHEUS_MULTIPROC_DIR")
        if directory:
            for stale in Path(directory).glob("*.db"):
                stale.unlink(missing_ok=True)

    def _web_ready(self) -> bool:
        try:
            return httpx.get(f"{self.base_url}/api/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def _worker_ready(self, name: str) -> bool:
        from celery import current_app as app

        try:
            replies = app.control.ping(destination=[f"{name}@{socket.gethostname()}"], timeout=0.5)
        except Exception:  # noqa: BLE001 - not up yet
            return False
        return bool(replies)

    def _wait(self, ready: object, name: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            process = self.processes.get(name)
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}; see its log")
            if ready():  # type: ignore[operator]
                return
            time.sleep(0.1)
        raise RuntimeError(f"{name} did not become ready within {timeout_s:.0f}s")

    def restart_dead(self) -> list[tuple[str, int]]:
        """Start again every child that has exited (a worker killed, the server crashed);
        returns which, with their exit codes. Raises when one keeps dying."""
        restarted: list[tuple[str, int]] = []
        with self._lock:
            if self._stopping.is_set():
                return restarted
            for name, process in list(self.processes.items()):
                code = process.poll()
                if code is None:
                    continue
                now = time.monotonic()
                recent = [t for t in self._restarts.get(name, []) if now - t < self.RESTART_WINDOW_S]
                if len(recent) >= self.max_restarts:
                    raise RuntimeError(f"{name} exited {len(recent) + 1} times within {self.RESTART_WINDOW_S:.0f}s")
                self._restarts[name] = [*recent, now]
                self._spawn(name, self.commands[name])
                restarted.append((name, code))
        return restarted

    def supervise(self, stop: threading.Event, report: Callable[[str], object] = logger.warning) -> None:
        """Until ``stop`` is set: restart children that die, saying so through ``report``."""
        while not stop.wait(0.5):
            for name, code in self.restart_dead():
                report(f"{name} exited with {code}; restarted it")

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM every child (workers finish their current run first), SIGKILL stragglers."""
        self._stopping.set()
        with self._lock:
            self._stop(timeout_s)

    def _stop(self, timeout_s: float) -> None:
        for _name, process in sorted(self.processes.items(), key=lambda item: item[0] == "redis"):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for process in self.processes.values():
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self.processes.clear()
        self._stopping.clear()

    def __enter__(self) -> Stack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def ensure_redis_daemon(url: str) -> None:
    """Start a background redis-server for ``url`` unless one answers (for ``make test``); only
    at a local address (:data:`LOCAL_REDIS_HOSTS`)."""
    if redis_reachable(url):
        return
    host, port = local_redis_address(url)
    binary = _redis_server_binary()
    if binary is None:
        raise StartupError(f"Redis at {safe_url(url)} does not answer and redis-server could not be installed")
    started = subprocess.run(
        [binary, "--port", str(port), "--bind", host, "--save", "", "--appendonly", "no", "--daemonize", "yes"],
        check=False,
        capture_output=True,
        text=True,
    )
    if started.returncode != 0:
        said = (started.stdout + started.stderr).strip().splitlines()
        raise StartupError(
            f"redis-server could not start for {safe_url(url)}: {said[-1] if said else started.returncode}"
        )
    for _ in range(100):
        if redis_reachable(url):
            return
        time.sleep(0.1)
    raise StartupError(f"redis-server did not come up at {safe_url(url)}")


if __name__ == "__main__":
    if sys.argv[1:] != ["ensure-redis"]:
        raise SystemExit("usage: python -m chat.stack ensure-redis")
    url = os.environ.get("TEST_REDIS_URL") or os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
    try:
        ensure_redis_daemon(url)
    except StartupError as exc:
        raise SystemExit(f"error: {exc}") from None
