"""Secret redaction: each shape of credential, the words and ids that are not one, structures."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.guards.quotes import EvidenceText
from harness.redact import is_secret_key, redact, redact_text

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq1\nq2J8vVf0aP3x\n-----END RSA PRIVATE KEY-----"
)  # fmt: skip

SHAPES = [
    # (text, secret that must go, what it must become)
    (
        "login failed for bob password=hunter2 retry=3",
        "hunter2",
        "login failed for bob password=[REDACTED:password] retry=3",
    ),
    ("DB_PASSWORD=hunter2", "hunter2", "DB_PASSWORD=[REDACTED:password]"),
    ("passwd: hunter2", "hunter2", "passwd: [REDACTED:password]"),
    ("password=abc/def", "abc/def", "password=[REDACTED:password]"),
    ("pwd=hunter2&user=bob", "hunter2", "pwd=[REDACTED:password]&user=bob"),
    ('password="hunter 2" user=bob', "hunter 2", 'password="[REDACTED:password]" user=bob'),
    ("client_secret: 9f8e7d6c5b", "9f8e7d6c5b", "client_secret: [REDACTED:secret]"),
    ("auth_token=abc123xyz", "abc123xyz", "auth_token=[REDACTED:token]"),
    ("accessToken=abc123xyz", "abc123xyz", "accessToken=[REDACTED:token]"),
    ("api_key=sk-live-4eC39HqLyjWDarjtT1zdp7dc", "4eC39HqLyjWDarjtT1zdp7dc", "api_key=[REDACTED:api_key]"),
    ("apikey=abcdef0123", "abcdef0123", "apikey=[REDACTED:api_key]"),
    ("X-Api-Key: zzz999yyy", "zzz999yyy", "X-Api-Key: [REDACTED:api_key]"),
    ("access_key=AbCdEf123456", "AbCdEf123456", "access_key=[REDACTED:access_key]"),
    ("private_key=MIIEvQIBADANBg", "MIIEvQIBADANBg", "private_key=[REDACTED:private_key]"),
    ('{"password": "hunter2", "user": "bob"}', "hunter2", '{"password": "[REDACTED:password]", "user": "bob"}'),
    ('{"apiKey":"abc123def"}', "abc123def", '{"apiKey":"[REDACTED:api_key]"}'),
    (r"body={\"password\":\"hunter2\"}", "hunter2", r"body={\"password\":\"[REDACTED:password]\"}"),
    ("mysql://app:hunter2@db-1:3306/pay", "hunter2", "mysql://app:[REDACTED:password]@db-1:3306/pay"),
    ("redis://:s3cr3t@cache:6379/0", "s3cr3t", "redis://:[REDACTED:password]@cache:6379/0"),
    (f"Authorization: Bearer {JWT}", JWT, "Authorization: Bearer [REDACTED:authorization]"),
    ("authorization=Basic dXNlcjpwYXNz", "dXNlcjpwYXNz", "authorization=Basic [REDACTED:authorization]"),
    ("sent Bearer abcdefgh12345678 upstream", "abcdefgh12345678", "sent Bearer [REDACTED:token] upstream"),
    ("key id AKIAIOSFODNN7EXAMPLE in use", "AKIAIOSFODNN7EXAMPLE", "key id [REDACTED:aws_access_key_id] in use"),
    ("ASIAY34FZKBOKMUTVV7A expired", "ASIAY34FZKBOKMUTVV7A", "[REDACTED:aws_access_key_id] expired"),
    (
        "creds AKIAIOSFODNN7EXAMPLE wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "creds [REDACTED:aws_access_key_id] [REDACTED:aws_secret_access_key]",
    ),
    (
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "aws_secret_access_key = [REDACTED:access_key]",
    ),
    ("push with ghp_" + "a1B2" * 9, "ghp_" + "a1B2" * 9, "push with [REDACTED:github_token]"),
    ("github_pat_11ABCDEFG0123456789_abcdefghij", "github_pat_11ABCDEFG", "[REDACTED:github_token]"),
    ("hook xoxb-123456789012-abcdefABCDEF", "xoxb-123456789012", "hook [REDACTED:slack_token]"),
    ("maps AIza" + "Sy" + "B" * 33, "AIzaSy", "maps [REDACTED:google_api_key]"),
    ("key sk-live-4eC39HqLyjWDarjtT1zdp7dc used", "sk-live-4eC39", "key [REDACTED:api_key] used"),
    ("sk-proj-Ab12Cd34Ef56Gh78Ij90", "sk-proj-Ab12", "[REDACTED:api_key]"),
    ("stripe sk_live_51H8xYz2eZvKYlo2C", "sk_live_51H8", "stripe [REDACTED:api_key]"),
    (f"session {JWT} rejected", JWT, "session [REDACTED:jwt] rejected"),
    (f"loaded {PEM} ok", "MIIEowIBAAKCAQEA7bq1", "loaded [REDACTED:private_key] ok"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk (cut)", "b3BlbnNzaC1rZXk", "[REDACTED:private_key]"),
]


@pytest.mark.parametrize(("text", "secret", "expected"), SHAPES, ids=[s[2][:40] for s in SHAPES])
def test_each_shape_of_secret_is_redacted_and_its_name_kept(text: str, secret: str, expected: str) -> None:
    redacted = redact_text(text)
    assert redacted == expected
    assert secret not in redacted
    assert redact_text(redacted) == redacted  # idempotent


NOT_SECRETS = [
    "token_count=5 tokens=120 max_tokens=4096",
    "password_reset_requested user=bob",
    "password_reset_requested=true",
    "secret_name=db-credentials key_id=17",
    "deploy 3f786850e387550fdab836ed7e6dc881de23001b rolled out",
    "request 123e4567-e89b-12d3-a456-426614174000 failed",
    "Access denied for user 'app'@'10.0.0.1' (using password: YES)",
    "token=null password= secret=***",
    "tests pass: 5, bypass=true",
    "disk-full-on-node-12345678901234 task-runner-7 risk-assessment",
    "GET https://api.example.com/v1/orders?page=2 200",
    "HikariPool-1 - Connection is not available, request timed out after 30000ms (total=10, active=10)",
    "the password was rotated at 10:00 and the token cache flushed",
    "ts=2026-11-30T10:00:00Z level=error msg=timeout",
    "Bearer token missing",
    "MDENG/bPxRfiCYEXAMPLEKEYwJalrXUtnFEMI/K7 alone is just a 40-character id",
    "支付服务 连接池 耗尽 password",
    "sudo: ec2-user : TTY=pts/0 ; PWD=/home/ec2-user ; USER=root",
    'msg="reconciled secret" ExternalSecret=billing/renewal-worker-db',
]


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_words_ids_and_counts_that_are_not_secrets_are_left_alone(text: str) -> None:
    assert redact_text(text) == text


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("password", True), ("db_password", True), ("DB_PASS", True), ("accessToken", True),
        ("X-Api-Key", True), ("client_secret", True), ("aws_secret_access_key", True),
        ("password_hash", True), ("Authorization", True),
        ("token_count", False), ("tokens", False), ("password_reset_requested", False),
        ("pass", False), ("bypass", False), ("secret_name", False), ("keyword", False), ("monkey", False),
    ],
)  # fmt: skip
def test_a_key_names_a_secret_by_its_last_word(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret


def test_structures_are_redacted_by_key_by_column_and_by_text() -> None:
    raw: dict[str, Any] = {
        "columns": ["id", "user", "password_hash", "api_token"],
        "rows": [[1, "bob", "$2b$12$abcdefghijkl", "tok_9f8e7d6c"], [2, "eve", None, ""]],
        "config": {"db_password": "hunter2", "pool": 10, "secret": {"inner": "mysql://a:b@c/d"}},
        "lines": [{"message": "retry with password=hunter2", "level": "WARN"}],
        "token_count": 5,
    }
    out = redact(raw)
    assert out["rows"] == [[1, "bob", "[REDACTED:password]", "[REDACTED:token]"], [2, "eve", None, ""]]
    assert out["config"] == {
        "db_password": "[REDACTED:password]",
        "pool": 10,
        "secret": {"inner": "mysql://a:[REDACTED:password]@c/d"},
    }
    assert out["lines"] == [{"message": "retry with password=[REDACTED:password]", "level": "WARN"}]
    assert out["token_count"] == 5
    assert "hunter2" not in repr(out) and "$2b$" not in repr(out)
    assert raw["config"]["db_password"] == "hunter2"  # the input is not changed


def test_a_result_without_secrets_is_returned_as_it_is() -> None:
    raw = {"lines": [{"ts": "2026-11-30T10:00:00Z", "message": "timeout (total=10, active=10)"}], "total": 1}
    assert redact(raw) is raw


def test_a_quote_of_a_redacted_line_is_found_in_the_redacted_result() -> None:
    raw = redact({"lines": [{"message": "login failed for bob password=hunter2 from 10.0.0.7"}]})
    text = EvidenceText(raw)
    assert text.find("login failed for bob password=[REDACTED:password] from 10.0.0.7") is not None
    assert text.find("password=hunter2") is None


@given(st.text(alphabet=st.characters(codec="utf-8", categories=["L", "N", "P", "S", "Zs"]), max_size=200))
def test_redaction_is_idempotent_on_any_text(text: str) -> None:
    once = redact_text(text)
    assert redact_text(once) == once


@given(
    st.sampled_from(["password", "api_key", "client_secret", "auth_token", "passwd"]),
    st.sampled_from(["=", ": ", " = ", ":"]),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!$%^*()-_+/", min_size=6),
)
def test_any_value_under_a_secret_name_is_redacted(key: str, sep: str, value: str) -> None:
    value = "Zq" + value  # never one of the harmless placeholders (yes, null, ***)
    redacted = redact_text(f"connect {key}{sep}{value} done")
    assert value not in redacted and f"{key}{sep}[REDACTED:" in redacted


@pytest.mark.parametrize(
    "strings",
    [
        ["cache key product:detail:42 expired", "GET /cart 200"],  # a "key" with no secret after it
        ["cache key product:detail:42 expired", "db password=hunter2-prod"],
        ["Authorization: Bearer abcdefgh12345678", "token refreshed"],
        ["paſsword=hunter2-prod"],  # Unicode case folding: "ſ" is an "s" to the pattern
        ["密钥 api_key=Zm9vYmFyYmF6cXV4MTIzNDU2"],
    ],
)
def test_a_whole_result_is_redacted_as_each_of_its_strings_would_be(strings: list[str]) -> None:
    """The search that skips the key=value rule for a whole result never skips a secret."""
    value = {"templates": [{"template": s, "example": s} for s in strings]}

    assert redact(value) == {"templates": [{"template": redact_text(s), "example": redact_text(s)} for s in strings]}
