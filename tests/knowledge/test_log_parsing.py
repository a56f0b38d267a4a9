"""Parsing log lines and files: every supported format, odd inputs, and never an exception."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.logs import LEVEL_ALIASES, LEVELS, canonical_level, level_rank
from knowledge.logs.parsing import (
    LEVEL_INFERRED,
    MAX_LINE_BYTES,
    MAX_MESSAGE_CHARS,
    LineError,
    ParsedLine,
    infer_level,
    normalise_level,
    parse_file,
    parse_line,
)
from knowledge.models import LogLevel

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
T = datetime(2026, 11, 30, 10, 2, tzinfo=UTC)


def parsed(text: str, **kwargs: Any) -> ParsedLine:
    line = parse_line(text, now=NOW, **kwargs)
    assert line is not None, text
    return line


def fields(line: ParsedLine) -> tuple[datetime, str, str, str, dict[str, Any]]:
    return line.ts, line.service, line.level, line.message, dict(line.attributes)


# --- the formats ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "2026-11-30T10:02:00Z ERROR payment-service Connection is not available",
            (T, "payment-service", "ERROR", "Connection is not available", {}),
            id="iso-level-service",
        ),
        pytest.param(
            "2026-11-30 10:02:00,123 [payment-service] ERROR Connection is not available",
            (T.replace(microsecond=123_000), "payment-service", "ERROR", "Connection is not available", {}),
            id="iso-comma-millis-bracketed-service",
        ),
        pytest.param(
            "2026-11-30T10:02:00.5+01:00 [WARN] payment-service: pool is low",
            (T - timedelta(hours=1, microseconds=-500_000), "payment-service", "WARN", "pool is low", {}),
            id="iso-offset-bracketed-level-colon-service",
        ),
        pytest.param(
            "2026-11-30 10:02:00 ERROR [r2dbc-pool-2] o.w.c.db.PostgresClient - Failed to acquire connection",
            (T, "default-svc", "ERROR", "o.w.c.db.PostgresClient - Failed to acquire connection", {}),
            id="iso-level-logback-thread-is-no-service",
        ),
        pytest.param(
            "2026-11-30 10:02:00 INFO  [http-nio-8080-exec-195] c.n.web.RequestLog - GET / -> 200",
            (T, "default-svc", "INFO", "c.n.web.RequestLog - GET / -> 200", {}),
            id="iso-level-tomcat-thread-is-no-service",
        ),
        pytest.param(
            "2026-11-30 10:02:00 payment-service ERROR upstream timed out",
            (T, "payment-service", "ERROR", "upstream timed out", {}),
            id="iso-service-level",
        ),
        pytest.param(
            "2026-11-30 10:02:00,000 ERROR chat.tasks run failed",
            (T, "chat.tasks", "ERROR", "run failed", {}),
            id="python-logging-format",
        ),
        pytest.param(
            "2026-11-30T10:02:00Z WARNING disk almost full",
            (T, "default-svc", "WARN", "disk almost full", {}),
            id="iso-level-without-service",
        ),
        pytest.param(
            "2026-11-30T10:02:00Z something happened",
            (T, "default-svc", "INFO", "something happened", {}),
            id="iso-without-level",
        ),
        pytest.param(
            "[2026-11-30 10:02:00] payment-service.ERROR: Connection is not available",
            (T, "payment-service", "ERROR", "Connection is not available", {}),
            id="monolog",
        ),
        pytest.param(
            '[2026-11-30T10:02:00.000000+00:00] app.CRITICAL: Payment failed {"order":42} {"uid":"abc"}',
            (T, "app", "FATAL", "Payment failed", {"context": {"order": 42}, "extra": {"uid": "abc"}}),
            id="monolog-context-extra",
        ),
        pytest.param(
            "[2026-11-30 10:02:00] payment-service.NOTICE: retry scheduled [] []",
            (T, "payment-service", "INFO", "retry scheduled", {}),
            id="monolog-empty-context",
        ),
        pytest.param(
            "Nov 30 10:02:00 web-01 payment-service[123]: ERROR Connection is not available",
            (T, "payment-service", "ERROR", "Connection is not available", {"host": "web-01", "pid": "123"}),
            id="syslog",
        ),
        pytest.param(
            "Nov 30 10:02:00 web-01 cron: job finished",
            (T, "cron", "INFO", "job finished", {"host": "web-01"}),
            id="syslog-no-pid-no-level",
        ),
        pytest.param(
            "<11>Nov 30 10:02:00 web-01 sshd[9]: Failed password for root",
            (T, "sshd", "ERROR", "Failed password for root", {"host": "web-01", "pid": "9"}),
            id="syslog-priority-gives-the-level",
        ),
        pytest.param(
            "<165>1 2026-11-30T10:02:00Z web-01 payment-service 77 ID47 - Pool stats ok",
            (T, "payment-service", "INFO", "Pool stats ok", {"host": "web-01", "pid": "77", "msgid": "ID47"}),
            id="rfc5424",
        ),
        pytest.param(
            "2026-11-30T10:02:00.000+00:00 web-01 payment-service[42]: WARN slow query",
            (T, "payment-service", "WARN", "slow query", {"host": "web-01", "pid": "42"}),
            id="rsyslog-iso",
        ),
        pytest.param(
            'ts=2026-11-30T10:02:00Z level=warning service=payment-service msg="pool is \\"low\\"" waiting=12',
            (T, "payment-service", "WARN", 'pool is "low"', {"waiting": "12"}),
            id="logfmt",
        ),
        pytest.param(
            "time=2026-11-30T10:02:00Z lvl=err msg=boom",
            (T, "default-svc", "ERROR", "boom", {}),
            id="logfmt-unquoted-default-service",
        ),
        pytest.param(
            "2026/11/30 10:02:00 [error] 29#29: *1 connect() failed (111: Connection refused) while connecting to upstream",
            (
                T,
                "default-svc",
                "ERROR",
                "connect() failed (111: Connection refused) while connecting to upstream",
                {"pid": "29", "tid": "29", "connection": "1"},
            ),
            id="nginx-error-log",
        ),
        pytest.param(
            "2026/11/30 10:02:00 http: TLS handshake error from 10.0.0.1:5555: EOF",
            (T, "default-svc", "ERROR", "http: TLS handshake error from 10.0.0.1:5555: EOF", {"level_inferred": True}),
            id="go-standard-log",
        ),
        pytest.param(
            "[Mon Nov 30 10:02:00.000000 2026] [proxy:error] [pid 123:tid 456] (111)Connection refused: AH00957: failed",
            (
                T,
                "default-svc",
                "ERROR",
                "(111)Connection refused: AH00957: failed",
                {"module": "proxy", "pid": "123", "tid": "456"},
            ),
            id="apache-error-log",
        ),
        pytest.param(
            "26/11/30 10:02:00 WARN TaskSetManager: Lost task 0.0 in stage 1.0 (TID 1): ExecutorLostFailure",
            (
                T,
                "default-svc",
                "WARN",
                "Lost task 0.0 in stage 1.0 (TID 1): ExecutorLostFailure",
                {"logger": "TaskSetManager"},
            ),
            id="spark-log4j",
        ),
        pytest.param(
            "WARN  [main] 2026-11-30 10:02:00,000 StartupChecks.java:123 - Cassandra server running in degraded mode",
            (
                T,
                "default-svc",
                "WARN",
                "Cassandra server running in degraded mode",
                {"thread": "main", "source": "StartupChecks.java:123"},
            ),
            id="cassandra",
        ),
        pytest.param(
            "2026-11-30 10:02:00,000 [http-nio-8080-exec-1] WARN  c.e.OrderController - slow order lookup",
            (T, "default-svc", "WARN", "c.e.OrderController - slow order lookup", {}),
            id="logback-thread-is-no-service",
        ),
        pytest.param(
            "2026-11-30 10:02:00,000 - app.worker - ERROR - could not connect to broker",
            (T, "default-svc", "ERROR", "could not connect to broker", {"logger": "app.worker"}),
            id="python-cookbook",
        ),
        pytest.param(
            "[2026-11-30T10:02:00.000+0000] {taskinstance.py:1234} ERROR - Task failed with exception",
            (T, "default-svc", "ERROR", "Task failed with exception", {"source": "taskinstance.py:1234"}),
            id="airflow",
        ),
        pytest.param(
            "[2026-11-30 10:02:00.000][14][warning][config] [source/common/config/grpc_stream.h:163] stream closed",
            (
                T,
                "default-svc",
                "WARN",
                "stream closed",
                {"thread": "14", "logger": "config", "source": "source/common/config/grpc_stream.h:163"},
            ),
            id="envoy",
        ),
    ],
)
def test_plain_text_formats(text: str, expected: tuple[Any, ...]) -> None:
    assert fields(parsed(text, default_service="default-svc")) == expected


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        pytest.param(
            {"timestamp": "2026-11-30T10:02:00Z", "service": "payment-service", "level": "error", "message": "boom"},
            (T, "payment-service", "ERROR", "boom", {}),
            id="usual-names",
        ),
        pytest.param(
            {"ts": 1_796_032_920, "app": "pay", "severity": "Warning", "msg": "slow", "order": {"id": 7}},
            (T, "pay", "WARN", "slow", {"order": {"id": 7}}),
            id="epoch-seconds-nested-attribute",
        ),
        pytest.param(
            {"@timestamp": 1_796_032_920_000, "service.name": "pay", "log.level": "crit", "log": "x"},
            (T, "pay", "FATAL", "x", {}),
            id="epoch-millis-dotted-keys",
        ),
        pytest.param(
            {
                "@timestamp": "2026-11-30T11:02:00+01:00",
                "service": {"name": "pay", "version": "1.2"},
                "log": {"level": "ERROR", "logger": "HikariPool"},
                "message": "Connection is not available",
            },
            (
                T,
                "pay",
                "ERROR",
                "Connection is not available",
                {"service": {"version": "1.2"}, "log": {"logger": "HikariPool"}},
            ),
            id="ecs-nested",
        ),
        pytest.param(
            {"time": "2026-11-30T10:02:00.000000000Z", "log": "docker line\n", "stream": "stderr"},
            (T, "default-svc", "INFO", "docker line", {"stream": "stderr"}),
            id="docker-json-no-level",
        ),
        pytest.param(
            {"ts": "2026-11-30 10:02:00", "logger": "com.zaxxer.hikari", "lvl": 50, "msg": "pool"},
            (T, "default-svc", "ERROR", "pool", {"logger": "com.zaxxer.hikari"}),
            id="naive-time-is-utc-numeric-level-logger-kept",
        ),
        pytest.param(
            {"ts": "2026-11-30T10:02:00Z", "level": "error", "msg": "fx lookup failed", "error": "x509: expired"},
            (T, "default-svc", "ERROR", "fx lookup failed: x509: expired", {}),
            id="zap-error-field-joins-the-message",
        ),
        pytest.param(
            {"ts": "2026-11-30T10:02:00Z", "level": "BANANA", "msg": "odd", "service": "pay"},
            (T, "pay", "INFO", "odd", {"raw_level": "BANANA"}),
            id="unknown-level-kept",
        ),
        pytest.param(
            {"ts": "2026-11-30T10:02:00Z", "event": "user logged in", "level": "trace", "value": "NaN"},
            (T, "default-svc", "DEBUG", "user logged in", {"value": "NaN"}),
            id="structlog-event",
        ),
    ],
)
def test_json_lines(record: dict[str, Any], expected: tuple[Any, ...]) -> None:
    assert fields(parsed(json.dumps(record), default_service="default-svc")) == expected


def test_a_kubernetes_event_reads_as_its_workloads_line() -> None:
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "checkout-api-7d9f8b6c5d-xk2p9.17f3", "namespace": "shop"},
        "involvedObject": {"kind": "Pod", "name": "checkout-api-7d9f8b6c5d-xk2p9", "namespace": "shop"},
        "reason": "BackOff",
        "message": "Back-off restarting failed container app in pod checkout-api-7d9f8b6c5d-xk2p9_shop",
        "type": "Warning",
        "count": 896,
        "firstTimestamp": "2026-11-30T09:00:00Z",
        "lastTimestamp": "2026-11-30T10:05:00Z",
        "source": {"component": "kubelet", "host": "node-2"},
    }
    line = parsed(json.dumps(event))

    assert (line.ts, line.service, line.level) == (
        datetime(2026, 11, 30, 10, 5, tzinfo=UTC),
        "checkout-api",
        "WARN",
    )
    assert line.message.startswith("BackOff: Back-off restarting failed container app")
    assert line.attributes["object"] == "checkout-api-7d9f8b6c5d-xk2p9"
    assert (line.attributes["namespace"], line.attributes["count"]) == ("shop", 896)
    assert line.attributes["component"] == "kubelet"
    assert line.attributes["host"] == "node-2"  # the node whose kubelet saw it

    # events.k8s.io/v1: "regarding" and "note", and a Normal event is INFO
    newer = {
        "regarding": {"kind": "Pod", "name": "nightly-export-x7k2q", "namespace": "batch"},
        "reason": "Pulled",
        "note": 'Successfully pulled image "registry.local/export:2.1"',
        "type": "Normal",
        "eventTime": "2026-11-30T10:00:00.000000Z",
    }
    pulled = parsed(json.dumps(newer))
    assert (pulled.service, pulled.level) == ("nightly-export", "INFO")
    assert pulled.message == 'Pulled: Successfully pulled image "registry.local/export:2.1"'

    # an object that merely has a "reason" is no event
    plain = parsed(json.dumps({"ts": "2026-11-30T10:00:00Z", "reason": "x", "message": "done"}))
    assert plain.message == "done" and plain.attributes["reason"] == "x"


def test_an_event_seen_many_times_is_read_at_its_first_and_its_last_time(tmp_path: Path) -> None:
    """``count: 520`` from ``firstTimestamp`` to ``lastTimestamp``: when it began matters as much
    as when it last happened; an event seen once, or at one time, is one entry."""
    base = {
        "involvedObject": {"kind": "Pod", "name": "quote-api-7d5c6f9b8-m2kx4", "namespace": "pricing"},
        "reason": "Unhealthy",
        "message": "Readiness probe failed: dial tcp 10.244.3.41:3000: connect: connection refused",
        "type": "Warning",
    }
    counted = {**base, "count": 520, "firstTimestamp": "2027-09-08T15:31:58Z", "lastTimestamp": "2027-09-08T16:14:40Z"}
    once = {**base, "count": 1, "firstTimestamp": "2027-09-08T15:00:00Z", "lastTimestamp": "2027-09-08T15:00:00Z"}
    series = {  # events.k8s.io/v1
        "regarding": base["involvedObject"],
        "reason": "Unhealthy",
        "note": "Liveness probe failed",
        "type": "Warning",
        "eventTime": "2027-09-08T15:40:00Z",
        "series": {"count": 3, "lastObservedTime": "2027-09-08T15:45:00Z"},
    }
    path = write(tmp_path / "events.jsonl", "\n".join(json.dumps(e) for e in (counted, once, series)).encode())

    entries = [e for e in parse_file(path) if isinstance(e, ParsedLine)]

    assert [(e.ts.strftime("%H:%M:%S"), e.echo) for e in entries] == [
        ("15:31:58", True),
        ("16:14:40", False),
        ("15:00:00", False),
        ("15:40:00", True),
        ("15:45:00", False),
    ]
    assert entries[0].message == entries[1].message and entries[0].attributes["count"] == 520


# What ``kubectl logs --timestamps`` prints: its own UTC time, then the container's line as the
# program wrote it, with its own level (and sometimes its own time) in its own shape.
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "2026-11-30T10:02:00Z W1130 10:01:59.123456       1 reflector.go:424] failed to list *v1.Pod",
            ("svc", "WARN", "failed to list *v1.Pod", {"pid": "1", "caller": "reflector.go:424"}),
            id="klog",
        ),
        pytest.param(
            '2026-11-30T10:02:00Z {"level":"error","msg":"connect failed","logger":"db","attempt":3}',
            ("svc", "ERROR", "connect failed", {"logger": "db", "attempt": 3}),
            id="json",
        ),
        pytest.param(
            "2026-11-30T10:02:00Z 1:M 30 Nov 2026 10:01:59.120 # WARNING overcommit_memory is set to 0!",
            ("svc", "WARN", "WARNING overcommit_memory is set to 0!", {"pid": "1", "role": "M"}),
            id="redis",
        ),
        pytest.param(
            "2026-11-30T10:02:00.000000Z 13 [Warning] [MY-010055] [Server] IP address could not be resolved",
            (
                "svc",
                "WARN",
                "IP address could not be resolved",
                {"thread": "13", "code": "MY-010055", "subsystem": "Server"},
            ),
            id="mysql-8",
        ),
        pytest.param(
            "2026-11-30T10:02:00.000000Z 80 [Note] [MY-010914] [Server] Got an error reading communication packets",
            (
                "svc",
                "INFO",
                "Got an error reading communication packets",
                {"thread": "80", "code": "MY-010914", "subsystem": "Server"},
            ),
            id="mysql-note-is-not-an-error",
        ),
        pytest.param(
            "[2026-11-30T10:02:00.000+0000][info][gc,heap] GC(12) Pause Young (Normal) 120M->40M(256M) 3.2ms",
            ("svc", "INFO", "GC(12) Pause Young (Normal) 120M->40M(256M) 3.2ms", {"tags": "gc,heap"}),
            id="jvm-unified-logging",
        ),
        pytest.param(
            "2026-11-30 10:02:00.000 UTC [1] LOG:  received SIGHUP, reloading configuration files",
            ("svc", "INFO", "received SIGHUP, reloading configuration files", {"pid": "1"}),
            id="postgres-after-the-colon-no-service",
        ),
        pytest.param(
            '2026-11-30T10:02:00Z level=warn msg="slow call" took=3s',
            ("svc", "WARN", "slow call", {"took": "3s"}),
            id="logfmt",
        ),
        pytest.param(
            "2026-11-30T10:02:00Z 2026-11-30 10:01:59.981  WARN 1 --- [           main] o.s.b.SpringApplication"
            "                  : Application run failed",
            (
                "svc",
                "WARN",
                "Application run failed",
                {"pid": "1", "thread": "main", "logger": "o.s.b.SpringApplication"},
            ),
            id="spring-boot",
        ),
        pytest.param(
            "2026-11-30T10:02:00Z [2026-11-30 10:01:59 +0000] [1] [INFO] Starting gunicorn 21.2.0",
            ("svc", "INFO", "Starting gunicorn 21.2.0", {"pid": "1"}),
            id="gunicorn",
        ),
        pytest.param(
            "2026-11-30T10:02:00Z [2026/11/30 10:01:59] [ warn] [input:tail:tail.0] file rotated",
            ("svc", "WARN", "[input:tail:tail.0] file rotated", {}),
            id="fluent-bit",
        ),
        pytest.param(
            "2026-11-30 10:02:00.000 UTC [1] LOG:  database system is ready to accept connections",
            ("svc", "INFO", "database system is ready to accept connections", {"pid": "1"}),
            id="postgres",
        ),
        pytest.param(
            '2026-11-30 10:02:00.000 UTC [57] FATAL:  password authentication failed for user "app"',
            ("svc", "FATAL", 'password authentication failed for user "app"', {"pid": "57"}),
            id="postgres-fatal",
        ),
        pytest.param(
            "2026-11-30T10:02:00Z W, [2026-11-30T10:01:59.357897 #1]  WARN -- : [ReplicaFreshness] serving stale data",
            ("svc", "WARN", "[ReplicaFreshness] serving stale data", {"pid": "1"}),
            id="ruby-logger",
        ),
        pytest.param(
            "E, [2026-11-30T10:02:00.000000 #12] ERROR -- sidekiq: job failed",
            ("svc", "ERROR", "job failed", {"pid": "12", "progname": "sidekiq"}),
            id="ruby-logger-alone",
        ),
        pytest.param(
            '2026-11-30T10:02:00Z {"@timestamp":"2026-11-30T10:01:59.980+00:00","caller":"logic/list.go:61",'
            '"content":"rpc error: code = ResourceExhausted","level":"error"}',
            ("svc", "ERROR", "rpc error: code = ResourceExhausted", {"caller": "logic/list.go:61"}),
            id="go-zero",
        ),
        pytest.param(
            "2026-11-30T10:02:00Z [2026-11-30 10:01:59,428: CRITICAL/MainProcess] Unrecoverable error: x",
            ("svc", "FATAL", "Unrecoverable error: x", {"process": "MainProcess"}),
            id="celery",
        ),
        pytest.param(
            "2026-11-30T10:02:00Z [1] 2026/11/30 10:01:59.000000 [WRN] Slow Consumer Detected",
            ("svc", "WARN", "Slow Consumer Detected", {"pid": "1"}),
            id="nats-server",
        ),
        pytest.param(
            "2026-11-30T10:02:00Z [1] 2026/11/30 10:01:59.000000 [INF] Starting nats-server",
            ("svc", "INFO", "Starting nats-server", {"pid": "1"}),
            id="nats-server-info",
        ),
        pytest.param(
            "2026-11-30T10:02:00Z 2026-11-30 10:01:59,693 [myid:2] - INFO  [SessionTracker:o.a.z.s.ZooKeeperServer@632]"
            " - Expiring session 0x3000b4f1c2e50021, timeout of 30000ms exceeded",
            (
                "svc",
                "INFO",
                "Expiring session 0x3000b4f1c2e50021, timeout of 30000ms exceeded",
                {"context": "myid:2", "thread": "SessionTracker:o.a.z.s.ZooKeeperServer@632"},
            ),
            id="zookeeper",
        ),
        pytest.param(
            "2026-11-30T10:02:00Z 10:01:59.123 [main] ERROR com.example.App - startup failed",
            ("svc", "ERROR", "com.example.App - startup failed", {}),
            id="logback-time-of-day",
        ),
        pytest.param(
            "2026-11-30T10:02:00Z fail: Microsoft.AspNetCore.Server.Kestrel[13]",
            ("svc", "ERROR", "Microsoft.AspNetCore.Server.Kestrel[13]", {}),
            id="dotnet-console",
        ),
        pytest.param(
            "2026-11-30T10:02:00Z [2026-11-30T10:01:59,611][WARN ][logstash.outputs.elasticsearch][main][es-out]"
            " Could not index event to Elasticsearch.",
            (
                "svc",
                "WARN",
                "Could not index event to Elasticsearch.",
                {"logger": "logstash.outputs.elasticsearch", "pipeline": "main", "plugin": "es-out"},
            ),
            id="logstash",
        ),
        pytest.param(
            "2026-11-30T10:02:00Z [2026-11-30T10:01:59,611][INFO ][o.e.n.Node               ] [es-0] started",
            ("svc", "INFO", "[es-0] started", {"logger": "o.e.n.Node"}),
            id="elasticsearch-7",
        ),
        pytest.param(
            '2026-11-30T10:02:00Z {"@timestamp":"2026-11-30T10:01:59.000Z", "log.level":"WARN", "message":"flood stage'
            ' disk watermark [95%] exceeded", "service.name":"ES_ECS"}',
            ("svc", "WARN", "flood stage disk watermark [95%] exceeded", {"service.name": "ES_ECS"}),
            id="elasticsearch-ecs",
        ),
    ],
)
def test_a_containers_own_line_after_the_kubectl_time(text: str, expected: tuple[Any, ...]) -> None:
    line = parsed(text, default_service="svc")
    assert line.ts == T
    assert (line.service, line.level, line.message, dict(line.attributes)) == expected
    assert line.level_stated


def test_a_message_ending_in_a_colon_takes_the_plain_line_it_announces(tmp_path: Path) -> None:
    path = tmp_path / "rabbitmq-0.log"
    path.write_text(
        "2026-11-30T10:02:00.000001Z 2026-11-30 10:02:00.000 [error] <0.145.62> closing AMQP connection "
        "<0.145.62> (10.42.5.160:56444 -> 10.42.8.124:5672):\n"
        "2026-11-30T10:02:00.000002Z missed heartbeats from client, timeout: 60s\n"
        "2026-11-30T10:02:01.000000Z 2026-11-30 10:02:01.000 [info] <0.146.62> settings:\n"
        '2026-11-30T10:02:01.000001Z {"level":"warn","msg":"a record of its own"}\n'
        "2026-11-30T10:02:02.000000Z 2026-11-30 10:02:02.000 [info] <0.147.62> accepting AMQP connection\n"
        "2026-11-30T10:02:03.000000Z a line of its own\n"
    )
    entries = [e for e in parse_file(path, default_service="rabbitmq", now=NOW) if isinstance(e, ParsedLine)]
    assert [(e.level, e.message) for e in entries] == [
        (
            "ERROR",
            "<0.145.62> closing AMQP connection <0.145.62> (10.42.5.160:56444 -> 10.42.8.124:5672): "
            "missed heartbeats from client, timeout: 60s",
        ),
        ("INFO", "<0.146.62> settings:"),  # a record of its own is not the rest of the message
        ("WARN", "a record of its own"),
        ("INFO", "<0.147.62> accepting AMQP connection"),  # (no colon: announces nothing)
        ("INFO", "a line of its own"),
    ]


def test_a_level_padded_on_the_left_begins_an_entry_not_a_continuation(tmp_path: Path) -> None:
    # Python's ``%(levelname)8s:%(filename)s:%(lineno)d:%(message)s`` indents the shorter levels
    path = tmp_path / "parsedmarc-5b8d7c9f6-m2k8x.log"
    path.write_text(
        "2031-03-02T00:05:20.000000Z     INFO:cli.py:94:Saving aggregate report to Elasticsearch\n"
        "2031-03-02T00:05:21.000000Z    ERROR:cli.py:126:Elasticsearch Error: RequestError(400, 'validation_exception')\n"
        "2031-03-02T00:05:22.000000Z  WARNING:utils.py:301:DNS timeout resolving PTR for 203.0.113.146\n"
        "2031-03-02T00:05:23.000000Z CRITICAL:root:giving up\n"
    )
    entries = [e for e in parse_file(path, default_service="parsedmarc", now=NOW) if isinstance(e, ParsedLine)]
    assert [(e.level, e.message, e.continued, e.level_stated) for e in entries] == [
        ("INFO", "Saving aggregate report to Elasticsearch", 0, True),
        ("ERROR", "Elasticsearch Error: RequestError(400, 'validation_exception')", 0, True),
        ("WARN", "DNS timeout resolving PTR for 203.0.113.146", 0, True),
        ("FATAL", "giving up", 0, True),
    ]
    assert dict(entries[1].attributes) == {"logger": "cli.py", "lineno": "126"}
    assert dict(entries[3].attributes) == {"logger": "root"}


def test_a_dotnet_console_entry_takes_its_message_from_the_indented_line(tmp_path: Path) -> None:
    path = tmp_path / "orders-api.log"
    path.write_text(
        "2026-11-30T10:01:59.000000Z fail: Billing.InvoicePdfEndpoint[0]\n"
        "2026-11-30T10:01:59.000001Z       Invoice INV-1 not rendered: signing unavailable (503)\n"
        "2026-11-30T10:01:59.000002Z       Azure.Identity.AuthenticationFailedException: ClientSecretCredential failed\n"
        "2026-11-30T10:01:59.000003Z        ---> Microsoft.Identity.Client.MsalServiceException (0x80131500): AADSTS7000222:"
        " The provided client secret keys are expired.\n"
        "2026-11-30T10:01:59.000004Z          at Billing.Signer.SignAsync()\n"
        "2026-11-30T10:02:00.000000Z fail: Microsoft.EntityFrameworkCore.Database.Connection[20004]\n"
        "2026-11-30T10:02:00.000001Z       An error occurred using the connection to database 'orders' on server 'db'.\n"
        "2026-11-30T10:02:01.000000Z info: Microsoft.Hosting.Lifetime[14]\n"
        "2026-11-30T10:02:01.000001Z       Now listening on: http://[::]:8080\n"
    )
    entries = [e for e in parse_file(path, default_service="orders-api", now=NOW) if isinstance(e, ParsedLine)]
    assert [(e.level, e.message) for e in entries] == [
        (  # the note under the entry goes on with its message; the trace's innermost exception follows
            "ERROR",
            "Billing.InvoicePdfEndpoint[0] Invoice INV-1 not rendered: signing unavailable (503) — "
            "Microsoft.Identity.Client.MsalServiceException (0x80131500): AADSTS7000222: The provided client secret "
            "keys are expired.",
        ),
        (
            "ERROR",
            "Microsoft.EntityFrameworkCore.Database.Connection[20004] An error occurred using the connection to "
            "database 'orders' on server 'db'.",
        ),
        ("INFO", "Microsoft.Hosting.Lifetime[14] Now listening on: http://[::]:8080"),
    ]


def test_kubectl_timestamps_keep_a_stack_trace_and_a_note_with_their_entry(tmp_path: Path) -> None:
    path = tmp_path / "profile-api.log"
    path.write_text(
        "2026-11-30T10:02:00.000001Z Error: Database is uninitialized and superuser password is not specified.\n"
        "2026-11-30T10:02:00.000002Z        You must specify POSTGRES_PASSWORD to a non-empty value for the\n"
        "2026-11-30T10:02:00.000003Z        superuser.\n"
        "2026-11-30T10:02:00.000004Z\n"  # the container printed an empty line
        "2026-11-30T10:02:01.000000Z ERROR 2026-11-30 10:02:01,000 django.request Internal Server Error: /api\n"
        "2026-11-30T10:02:01.000001Z Traceback (most recent call last):\n"
        '2026-11-30T10:02:01.000002Z   File "/app/db.py", line 3, in connect\n'
        "2026-11-30T10:02:01.000003Z psycopg2.OperationalError: connection to server failed: Connection refused\n"
        "2026-11-30T10:02:01.000004Z \tIs the server running on that host and accepting TCP/IP connections?\n"
        "2026-11-30T10:02:02.000000Z next request\n"
    )
    entries = [e for e in parse_file(path, default_service="profile-api", now=NOW) if isinstance(e, ParsedLine)]
    assert len(entries) == len(list(parse_file(path, now=NOW)))  # no line refused
    first, second, third = entries
    assert (first.level, first.continued) == ("ERROR", 2)
    assert first.message == (
        "Database is uninitialized and superuser password is not specified. "
        "You must specify POSTGRES_PASSWORD to a non-empty value for the superuser."
    )
    assert (second.level, second.message) == (
        "ERROR",
        "django.request Internal Server Error: /api — psycopg2.OperationalError: connection to server failed: "
        "Connection refused Is the server running on that host and accepting TCP/IP connections?",
    )
    assert "psycopg2.OperationalError" in second.attributes["continuation"]
    assert "Is the server running" in second.attributes["continuation"]
    assert third.message == "next request"


def test_a_klog_line_under_journald_keeps_its_level() -> None:
    line = parsed(
        'Nov 30 10:02:00 node-1 kubelet[1234]: W1130 10:02:00.000000    1234 eviction_manager.go:349] "Eviction manager:'
        ' attempting to reclaim" resourceName="ephemeral-storage"'
    )
    assert (line.ts, line.service, line.level) == (T, "kubelet", "WARN")
    assert line.message.startswith('"Eviction manager: attempting to reclaim"')
    assert line.attributes["caller"] == "eviction_manager.go:349"


def test_the_kernel_under_journald_is_its_own_service_on_its_host() -> None:
    # journald's short-iso: the kernel has no process id, and states no level
    line = parsed("2026-11-30T10:02:00+0000 node-1 kernel: nf_conntrack: table full, dropping packet")
    assert (line.ts, line.service, line.level) == (T, "kernel", "ERROR")
    assert (line.message, line.attributes["host"]) == ("nf_conntrack: table full, dropping packet", "node-1")
    assert line.attributes[LEVEL_INFERRED] is True
    # another program without a process id is not taken for a host and a tag
    other = parsed("2026-11-30T10:02:00+0000 INFO main: started", default_service="svc")
    assert other.service == "svc" and "host" not in other.attributes


def test_a_mongodb_structured_record_reads_its_severity_and_reason() -> None:
    record = {
        "t": {"$date": "2026-11-30T10:02:00.000+00:00"},
        "s": "F",
        "c": "CONTROL",
        "id": 20573,
        "ctx": "initandlisten",
        "msg": "Wrong mongod version",
        "attr": {"error": "UPGRADE PROBLEM: Found an invalid featureCompatibilityVersion document"},
    }
    line = parsed(f"2026-11-30T10:02:00.000000001Z {json.dumps(record)}", default_service="catalog-mongo")
    assert (line.ts, line.service, line.level) == (T, "catalog-mongo", "FATAL")
    assert (
        line.message == "Wrong mongod version: UPGRADE PROBLEM: Found an invalid featureCompatibilityVersion document"
    )
    assert (line.attributes["c"], line.attributes["ctx"]) == ("CONTROL", "initandlisten")
    for severity, level in [("E", "ERROR"), ("W", "WARN"), ("I", "INFO"), ("D2", "DEBUG")]:
        quiet = parsed(json.dumps({**record, "s": severity, "attr": {"port": 27017}}))
        assert (quiet.level, quiet.message) == (level, "Wrong mongod version")


def test_a_pino_error_object_gives_its_message_and_a_coredns_plugin_is_no_service() -> None:
    pino = {
        "level": 50,
        "time": 1796032920000,
        "msg": "upstream request failed",
        "err": {"type": "Error", "message": "getaddrinfo EAI_AGAIN payments-api.payments.svc", "code": "EAI_AGAIN"},
    }
    line = parsed(json.dumps(pino), default_service="storefront-api")
    assert (line.level, line.message) == (
        "ERROR",
        "upstream request failed: getaddrinfo EAI_AGAIN payments-api.payments.svc",
    )

    coredns = parsed(
        '2026-11-30T10:02:00Z [FATAL] plugin/loop: Loop (127.0.0.1:34614 -> :53) detected for zone ".".',
        default_service="coredns",
    )
    assert (coredns.service, coredns.level) == ("coredns", "FATAL")
    assert coredns.message.startswith("plugin/loop: Loop (127.0.0.1:34614 -> :53) detected")


def test_gunicorns_own_line_reads_its_level_not_its_pid() -> None:
    line = parsed("[2026-11-30 10:02:00 +0000] [1] [INFO] Booting worker with pid: 8", default_service="svc")
    assert (line.ts, line.service, line.level, line.message) == (T, "svc", "INFO", "Booting worker with pid: 8")


def test_a_logger_names_the_service_only_when_nothing_else_does() -> None:
    line = parse_line('{"ts": "2026-11-30T10:02:00Z", "logger": "karpenter", "msg": "launched"}')
    assert line is not None and line.service == "karpenter"
    # an Argo CD line's application is the one it deploys, not the controller that wrote it
    argo = parsed("time=2026-11-30T10:02:00Z level=info msg=synced application=argocd/pricing", default_service="svc")
    assert (argo.service, argo.attributes["application"]) == ("svc", "argocd/pricing")


def test_a_redis_line_of_its_own() -> None:
    line = parsed("1:M 30 Nov 2026 10:02:00.000 * Ready to accept connections tcp")
    assert (line.ts, line.level, line.message) == (T, "INFO", "Ready to accept connections tcp")


def test_a_klog_line_of_its_own_takes_the_current_year() -> None:
    line = parsed('E1130 10:02:00.000000       1 controller.go:123] error syncing "ops/reconciler"')
    assert (line.ts, line.level, line.attributes["caller"]) == (T, "ERROR", "controller.go:123")
    # a December line read in January is last year's
    january = parse_line("I1231 23:59:00.000000 1 main.go:1] ok", now=datetime(2027, 1, 1, tzinfo=UTC))
    assert january is not None and january.ts.year == 2026


def test_kubectl_prefix_names_the_pods_workload_and_container() -> None:
    line = parsed(
        "[pod/checkout-api-7d9f8b6c5d-xk2p9/app] 2026-11-30T10:02:00Z exec /start.sh: no such file or directory"
    )
    assert (line.ts, line.service, line.level) == (T, "checkout-api", "ERROR")
    assert line.message == "exec /start.sh: no such file or directory"
    assert (line.attributes["pod"], line.attributes["container"]) == ("checkout-api-7d9f8b6c5d-xk2p9", "app")


@pytest.mark.parametrize(
    ("kind", "name", "workload"),
    [
        ("ReplicaSet", "checkout-api-7d9f8b6c5d", "checkout-api"),
        ("Job", "nightly-export-28596540", "nightly-export"),
        ("Pod", "nightly-export-28596540-x7k2q", "nightly-export"),
        ("PersistentVolumeClaim", "data-ledger-0", "data-ledger-0"),
        ("Node", "node-7d9f8b6c5d", "node-7d9f8b6c5d"),  # a node's name is its own, whatever it looks like
    ],
)
def test_an_events_object_names_its_workload_by_its_kind(kind: str, name: str, workload: str) -> None:
    event = {"involvedObject": {"kind": kind, "name": name}, "reason": "R", "message": "m", "type": "Warning"}
    line = parsed(json.dumps({**event, "lastTimestamp": "2026-11-30T10:02:00Z"}))
    assert (line.service, line.attributes["object"]) == (workload, name)


@pytest.mark.parametrize(
    ("word", "level"),
    [
        ("DEBUG", "DEBUG"),
        ("trace", "DEBUG"),
        ("info", "INFO"),
        ("Notice", "INFO"),
        ("warn", "WARN"),
        ("WARNING", "WARN"),
        ("err", "ERROR"),
        ("Error", "ERROR"),
        ("critical", "FATAL"),
        ("crit", "FATAL"),
        ("panic", "FATAL"),
        ("alert", "FATAL"),
        ("emerg", "FATAL"),
        ("[WRN]", "WARN"),
        ("INF", "INFO"),
        ("dbug", "DEBUG"),
        ("FATAL", "FATAL"),
        (30, "INFO"),
        ("60", "FATAL"),
        (10, "DEBUG"),
        ("banana", None),
        (True, None),
        (3, None),
        (float("nan"), None),
    ],
)
def test_levels_are_normalised(word: object, level: str | None) -> None:
    assert normalise_level(word) == level


def test_the_parser_and_the_log_table_agree_with_the_harness_levels() -> None:
    for word in (*LEVELS, *LEVEL_ALIASES):
        assert normalise_level(word.lower()) == canonical_level(word), word
    assert [(level.name, level.value) for level in LogLevel] == [(name, level_rank(name)) for name in LEVELS]


def test_a_capitalised_first_word_is_message_not_level() -> None:
    line = parsed("2026-11-30T10:02:00Z Error connecting to db")
    # the message is whole; its level is what it says, marked as read from the content
    assert (line.level, line.message, line.level_stated) == ("ERROR", "Error connecting to db", False)
    assert line.attributes == {LEVEL_INFERRED: True}
    stated = parsed("2026-11-30T10:02:00Z Error: connecting to db")
    assert (stated.level, stated.level_stated, dict(stated.attributes)) == ("ERROR", True, {})


# --- a level from the content, for lines that state none -------------------------------------

UNLEVELLED_FAILURES = [
    ("[Errno 28] No space left on device", "ERROR"),
    ("OSError: [Errno 28] No space left on device: '/data/export.csv'", "ERROR"),
    ("java.net.ConnectException: Connection refused", "ERROR"),
    ("Environment variable FOO is undefined", "ERROR"),
    (
        "urllib3.exceptions.NameResolutionError: <urllib3.connection.HTTPSConnection object>: "
        "Failed to resolve 'api.example.com'",
        "ERROR",
    ),
    ("Traceback (most recent call last):", "ERROR"),
    ("permission denied while trying to connect to the Docker daemon socket", "ERROR"),
    ("x509: certificate has expired", "ERROR"),
    ("connect ECONNREFUSED 10.0.0.7:5432", "ERROR"),
    ("Killed", "ERROR"),
    ("container exited with code 137", "ERROR"),
    ("request to ledger timed out after 30s", "ERROR"),
    ("Timeout waiting for a connection from the pool", "ERROR"),
    ("upload failed: disk quota", "ERROR"),
    ("could not open config file /etc/app.yaml", "ERROR"),
    ("the worker hit a fatal error and stopped", "FATAL"),
    ("panicked at 'index out of bounds', src/main.rs:10:5", "FATAL"),
    ("Last state: Terminated, Reason: OOMKilled, Exit Code: 137", "FATAL"),
    ("DeprecationWarning: the 'fork' start method is deprecated", "WARN"),
    ("retrying in 5 s (attempt 2 of 5)", "WARN"),
    ("exec /start.sh: no such file or directory", "ERROR"),
    ('pods is forbidden: User "system:serviceaccount:ops:reconciler" cannot list resource "pods"', "ERROR"),
    ('10.0.0.1 - - [30/Nov/2026:10:02:00 +0000] "GET /api/v1/home HTTP/1.1" 502 157 "-" "curl/8.5"', "ERROR"),
    ("nf_conntrack: table full, dropping packet", "ERROR"),
    ("send queue is full, dropping 12 messages", "ERROR"),
    ("connection pool exhausted", "ERROR"),
    ("memory resource limit alarm set on node rabbit@rabbitmq-0", "WARN"),
]
UNLEVELLED_ORDINARY = [
    "Listening on 0.0.0.0:8080",
    "Server started in 3.2 s with timeout=30s",
    "processed 120 items, 0 errors",
    "no errors found",
    "error_count=0 warnings=0",
    "process exited with code 0",
    "Registered 12 routes",
    "GET /healthz 200 1ms",
    '10.0.0.1 - - [30/Nov/2026:10:02:00 +0000] "GET /api/v1/home HTTP/1.1" 200 5120 "-" "curl/8.5"',
]


@pytest.mark.parametrize(("message", "level"), UNLEVELLED_FAILURES)
def test_a_line_without_a_level_gets_the_level_its_content_shows(message: str, level: str) -> None:
    assert infer_level(message) == level
    for text in (f"2026-11-30T10:02:00Z {message}", json.dumps({"ts": "2026-11-30T10:02:00Z", "log": message})):
        line = parsed(text)
        assert (line.level, line.message, line.level_stated) == (level, message, False), text
        assert line.attributes[LEVEL_INFERRED] is True


@pytest.mark.parametrize("message", UNLEVELLED_ORDINARY)
def test_a_line_without_a_level_or_a_failure_stays_info_unmarked(message: str) -> None:
    assert infer_level(message) is None
    line = parsed(f"2026-11-30T10:02:00Z {message}")
    assert (line.level, line.level_stated) == ("INFO", False)
    assert LEVEL_INFERRED not in line.attributes


def test_a_stated_level_is_never_changed_by_the_content() -> None:
    for text in (
        "2026-11-30T10:02:00Z INFO payment-service retry budget refused: Connection refused (expected in tests)",
        json.dumps({"ts": "2026-11-30T10:02:00Z", "level": "debug", "msg": "java.net.ConnectException: refused"}),
        "<14>Nov 30 10:02:00 host app[1]: [Errno 28] No space left on device",  # the priority says info
    ):
        line = parsed(text)
        assert line.level in ("INFO", "DEBUG") and line.level_stated, text
        assert LEVEL_INFERRED not in line.attributes


def test_an_unknown_level_word_is_kept_and_the_content_decides() -> None:
    line = parsed(json.dumps({"ts": "2026-11-30T10:02:00Z", "level": "BANANA", "msg": "Connection refused"}))
    assert (line.level, dict(line.attributes)) == ("ERROR", {"raw_level": "BANANA", LEVEL_INFERRED: True})


def test_a_stack_trace_under_an_unlevelled_line_makes_it_an_error(tmp_path: Path) -> None:
    path = write(
        tmp_path / "worker.log",
        b"2026-11-30T10:02:00Z worker: handling job 42\n"
        b"Traceback (most recent call last):\n"
        b'  File "job.py", line 3, in run\n'
        b"KeyError: 'customer'\n"
        b"2026-11-30T10:02:01Z INFO worker: handling job 43\n"
        b"Traceback (most recent call last):\n"
        b"KeyError: 'customer'\n",
    )
    first, second = list(parse_file(path))
    assert isinstance(first, ParsedLine) and isinstance(second, ParsedLine)
    assert (first.level, first.attributes[LEVEL_INFERRED], first.continued) == ("ERROR", True, 3)
    assert (second.level, second.level_stated) == ("INFO", True)  # stated INFO stays INFO
    assert LEVEL_INFERRED not in second.attributes


def test_an_unknown_level_word_stays_in_the_plain_text_message() -> None:
    line = parsed("2026-11-30T10:02:00Z BANANA payment-service went bad")
    assert (line.level, line.service, line.message) == ("INFO", "unknown", "BANANA payment-service went bad")


def test_timestamps_with_offsets_become_utc() -> None:
    for text in (
        "2026-11-30T15:32:00+05:30 ERROR a-b x",
        "2026-11-30T05:02:00-0500 ERROR a-b x",
        "2026-11-30T10:02:00 UTC ERROR a-b x",
        "2026-11-30t10:02:00z ERROR a-b x",
    ):
        ts = parsed(text).ts
        assert ts == T and ts.tzinfo == UTC, text
    assert parsed(json.dumps({"ts": "Mon, 30 Nov 2026 11:02:00 +0100", "msg": "x"})).ts == T
    assert parsed(json.dumps({"ts": "30/Nov/2026:10:02:00 +0000", "msg": "x"})).ts == T
    assert parsed(json.dumps({"ts": 1_796_032_920_000_000_000, "msg": "ns"})).ts == T


def test_syslog_assumes_the_current_year_and_utc() -> None:
    assert parsed("Nov 30 10:02:00 h app: x").ts == T
    assert parsed("Nov  3 10:02:00 h app: x").ts == datetime(2026, 11, 3, 10, 2, tzinfo=UTC)
    # A date that would lie in the future is last year's (logs read just after New Year).
    assert parsed("Dec 31 23:59:59 h app: x").ts.year == 2025
    now = datetime.now(UTC)
    stamp = (now - timedelta(hours=1)).strftime("%b %d %H:%M:%S")
    line = parse_line(f"{stamp} h app: x")
    assert line is not None and line.ts.year == (now - timedelta(hours=1)).year


def test_a_missing_service_becomes_the_callers_default() -> None:
    assert parsed('{"ts": "2026-11-30T10:02:00Z", "msg": "x"}', default_service="checkout").service == "checkout"
    assert parsed("2026-11-30T10:02:00Z ERROR boom", default_service="checkout").service == "checkout"
    assert parsed("2026-11-30T10:02:00Z ERROR boom").service == "unknown"


# --- odd inputs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("   \t ", id="blank"),
        pytest.param("hello world", id="no-format"),
        pytest.param('{"ts": "2026-11-30T10:02:00Z", "msg": "trunc', id="truncated-json"),
        pytest.param("[1, 2, 3]", id="json-array"),
        pytest.param('{"msg": "no time"}', id="json-without-time"),
        pytest.param('{"ts": "yesterday", "msg": "x"}', id="json-bad-time"),
        pytest.param('{"ts": "2026-11-30T10:02:00Z", "level": "info"}', id="json-without-message"),
        pytest.param('{"ts": "2026-11-30T10:02:00Z", "msg": "   "}', id="json-blank-message"),
        pytest.param('{"ts": 1e300, "msg": "x"}', id="json-absurd-epoch"),
        pytest.param('{"ts": "0001-01-01T00:00:00+05:00", "msg": "x"}', id="json-time-overflow"),
        pytest.param("[" * 100_000, id="deeply-nested"),
        pytest.param('{"a":' * 20_000 + "1" + "}" * 20_000, id="deeply-nested-object"),
        pytest.param("\x00\x01\x02\x03binary\x04\x05", id="binary-nul"),
        pytest.param("\ufffd\ufffd\x07\x08\ufffd\ufffd", id="binary-replacement-chars"),
        pytest.param("2026-13-40T10:02:00Z ERROR a-b x", id="impossible-date"),
        pytest.param("Feb 30 10:02:00 host app: x", id="impossible-syslog-date"),
        pytest.param("x" * (MAX_LINE_BYTES + 1), id="huge-line"),
        pytest.param("a=1", id="single-logfmt-pair"),
    ],
)
def test_odd_lines_are_refused_not_raised(text: str) -> None:
    assert parse_line(text, now=NOW) is None


def test_a_huge_message_is_cut_and_its_length_kept() -> None:
    message = "m" * (MAX_MESSAGE_CHARS + 500)
    line = parsed(json.dumps({"ts": "2026-11-30T10:02:00Z", "msg": message}))
    assert len(line.message) == MAX_MESSAGE_CHARS
    assert line.attributes["message_chars"] == MAX_MESSAGE_CHARS + 500


def test_unstorable_json_strings_are_made_safe() -> None:
    line = parsed('{"ts": "2026-11-30T10:02:00Z", "msg": "a\\u0000b\\ud800c", "k": ["\\udfff"]}')
    assert line.message == "a\ufffdb?c"
    assert line.attributes == {"k": ["?"]}
    line.message.encode("utf-8")


@given(st.text(max_size=300))
@settings(max_examples=400, deadline=None)
def test_parse_line_never_raises_on_arbitrary_text(text: str) -> None:
    result = parse_line(text, now=NOW)
    assert result is None or isinstance(result, ParsedLine)


_PREFIXES = st.sampled_from(
    [
        "",
        "{",
        '{"ts": ',
        "2026-11-30T10:02:00Z ",
        "2026-11-30 10:02:00,123 [svc] ",
        "[2026-11-30 10:02:00] svc.",
        "Nov 30 10:02:00 host ",
        "<34>",
        "<34>1 ",
        "ts=",
        "ts=2026-11-30T10:02:00Z msg=",
    ]
)


@given(_PREFIXES, st.text(max_size=200))
@settings(max_examples=600, deadline=None)
def test_parse_line_never_raises_on_plausible_beginnings(prefix: str, text: str) -> None:
    result = parse_line(prefix + text, now=NOW)
    if result is not None:
        assert result.ts.tzinfo == UTC
        assert result.level in ("DEBUG", "INFO", "WARN", "ERROR", "FATAL")
        assert result.message.strip() and result.service


@given(
    st.dictionaries(
        st.text(max_size=12),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
            lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
            max_leaves=8,
        ),
        max_size=6,
    )
)
@settings(max_examples=300, deadline=None)
def test_any_json_object_parses_or_is_refused(record: dict[str, Any]) -> None:
    result = parse_line(json.dumps(record), now=NOW)
    assert result is None or isinstance(result, ParsedLine)


# --- files ---------------------------------------------------------------------------------


def write(path: Path, content: bytes) -> Path:
    path.write_bytes(content)
    return path


def test_a_file_gives_entries_and_numbered_errors(tmp_path: Path) -> None:
    path = write(
        tmp_path / "app.log",
        b"\xef\xbb\xbf2026-11-30T10:02:00Z INFO svc-a started\r\n"
        b"\r\n"
        b"garbage line\n"
        b'{"ts": "2026-11-30T10:03:00Z", "msg": "json"\n'
        b"2026-11-30T10:04:00Z ERROR svc-a caf\xe9 \xff\xfe broken bytes\n"
        b"\x00\x01\x02\x03\x04\x05\x06\n"
        b"2026-11-30T10:05:00Z WARN svc-a last",
    )
    items = list(parse_file(path, default_service="dflt"))

    entries = [i for i in items if isinstance(i, ParsedLine)]
    errors = [i for i in items if isinstance(i, LineError)]
    assert [(e.line_number, e.message) for e in entries] == [
        (1, "started"),
        (5, "caf\ufffd \ufffd\ufffd broken bytes"),
        (7, "last"),
    ]
    assert [(e.line_number, e.reason) for e in errors] == [
        (3, "unrecognised format"),
        (4, "invalid JSON: Expecting ',' delimiter (column 45)"),
        (6, "binary data"),
    ]
    assert errors[0].excerpt == "garbage line"
    assert errors[0].source == str(path)
    assert "\x00" not in errors[2].excerpt


def test_stack_traces_are_folded_into_their_entry(tmp_path: Path) -> None:
    path = write(
        tmp_path / "java.log",
        b"2026-11-30T10:02:00Z ERROR payment-service Request failed\n"
        b"java.lang.IllegalStateException: pool exhausted\n"
        b"\tat com.zaxxer.hikari.pool.HikariPool.getConnection(HikariPool.java:181)\n"
        b"\tat com.example.Pay.run(Pay.java:10)\n"
        b"Caused by: java.sql.SQLTransientConnectionException: timeout\n"
        b"\t... 12 more\n"
        b"2026-11-30T10:02:01Z INFO payment-service next\n"
        b"    an indented line continues the entry before it\n",
    )
    items = list(parse_file(path))

    first, second = items[0], items[1]
    assert isinstance(first, ParsedLine) and isinstance(second, ParsedLine)
    # the trace's last exception (its root cause) is said with the message
    assert first.message == "Request failed — java.sql.SQLTransientConnectionException: timeout"
    assert first.continued == 5
    assert first.attributes["continuation"].splitlines()[0] == "java.lang.IllegalStateException: pool exhausted"
    assert "HikariPool.java:181" in first.attributes["continuation"]
    # an indented line of words goes on with the message; a stack trace stays beside it
    assert second.message == "next an indented line continues the entry before it" and second.line_number == 7
    assert second.continued == 1 and "continuation" not in second.attributes
    assert len(items) == 2


def test_a_line_too_long_to_read_is_an_error_and_reading_goes_on(tmp_path: Path) -> None:
    huge = b"2026-11-30T10:02:00Z INFO svc-a " + b"x" * (MAX_LINE_BYTES + 10) + b"\n"
    path = write(tmp_path / "huge.log", huge + b"2026-11-30T10:03:00Z INFO svc-a after\n")
    items = list(parse_file(path))

    assert isinstance(items[0], LineError)
    assert items[0].line_number == 1 and "longer than" in items[0].reason
    assert isinstance(items[1], ParsedLine) and items[1].message == "after" and items[1].line_number == 2


def test_gzip_files_are_read(tmp_path: Path) -> None:
    path = tmp_path / "app.log.gz"
    with gzip.open(path, "wb") as f:
        f.write(b"2026-11-30T10:02:00Z ERROR svc-a boom\n")
    (line,) = parse_file(path)
    assert isinstance(line, ParsedLine) and line.message == "boom"


def test_offsets_other_than_utc_in_a_file(tmp_path: Path) -> None:
    tz = timezone(timedelta(hours=-8))
    local = T.astimezone(tz)
    path = write(tmp_path / "tz.log", f"{local.isoformat()} ERROR svc-a x\n".encode())
    (line,) = parse_file(path)
    assert isinstance(line, ParsedLine) and line.ts == T


def test_a_short_level_mark_in_lower_case_begins_a_message() -> None:
    line = parsed("2026-11-30T10:02:00Z inf loop detected in rule set 4")
    assert (line.level, line.message) == ("INFO", "inf loop detected in rule set 4")
    assert not line.level_stated


def test_a_postgres_syslog_line_keeps_its_level_after_the_sequence_number() -> None:
    line = '2026-05-06T09:27:41.191Z db-0 postgres[477]: [7-1] FATAL:  password authentication failed for user "svc"'
    detail = "2026-05-06T09:27:41.191Z db-0 postgres[477]: [7-2] DETAIL:  Connection matched pg_hba.conf line 99"

    fatal, other = parse_line(line), parse_line(detail)

    assert fatal is not None and other is not None
    assert (fatal.service, fatal.level) == ("postgres", "FATAL")
    assert fatal.message == 'password authentication failed for user "svc"'
    assert (other.level, other.message) == ("INFO", "[7-2] DETAIL:  Connection matched pg_hba.conf line 99")
