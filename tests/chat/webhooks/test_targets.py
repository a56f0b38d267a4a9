"""Where a webhook may go: every internal address refused in every spelling, at request time
and again at delivery (DNS rebinding); only the networks of the allow-list admitted."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chat.webhooks.targets import Resolver, TargetPolicy, WebhookUrlForbidden, check

PUBLIC = "93.184.216.34"
OPEN = TargetPolicy()


def resolving(*addresses: str) -> Resolver:
    def resolver(host: str, port: int) -> Sequence[str]:
        return addresses

    return resolver


def reason(url: str, policy: TargetPolicy = OPEN, resolver: Resolver | None = None) -> str:
    with pytest.raises(WebhookUrlForbidden) as refused:
        check(url, policy, resolver=resolver)
    assert refused.value.code == "webhook_url_forbidden"
    return str(refused.value.details["reason"])


@pytest.mark.parametrize(
    "url",
    [
        # loopback, in the spellings the resolver accepts
        "http://127.0.0.1/hook", "http://127.1/hook", "http://2130706433/hook", "http://017700000001/hook",
        "http://0x7f000001/hook", "http://0x7f.1/hook", "http://[::1]/hook", "http://[::ffff:127.0.0.1]/hook",
        "http://[0:0:0:0:0:ffff:7f00:1]/hook",
        # private, link-local (cloud metadata), CGNAT, unspecified, multicast, reserved, benchmarking
        "http://10.0.0.5/", "http://172.16.0.1/", "http://192.168.1.1/", "http://169.254.169.254/latest/meta-data",
        "http://100.64.0.1/", "http://0.0.0.0/", "http://224.0.0.1/", "http://240.0.0.1/", "http://198.18.0.1/",
        "http://[fc00::1]/", "http://[fe80::1]/", "http://[ff02::1]/", "http://[::]/",
        # documentation ranges
        "http://192.0.2.1/", "http://198.51.100.7/", "http://203.0.113.9/", "http://[2001:db8::1]/",
        # private IPv4 inside IPv6: mapped, NAT64, 6to4
        "http://[::ffff:10.0.0.1]/", "http://[64:ff9b::a00:1]/", "http://[2002:a00:1::1]/",
        "http://[64:ff9b::7f00:1]/",
    ],
)  # fmt: skip
def test_an_internal_address_is_refused_however_it_is_written(url: str) -> None:
    assert reason(url) == "address"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://hooks.example.com/", "scheme"),
        ("file:///etc/passwd", "scheme"),
        ("gopher://hooks.example.com/", "scheme"),
        ("http://user:pw@hooks.example.com/", "credentials"),
        ("http://user@hooks.example.com/", "credentials"),
        ("http://hooks.example.com:8080/", "port"),
        ("http://hooks.example.com:22/", "port"),
        ("http://hooks.example.com:99999/", "bad_port"),
        ("http:///nohost", "malformed"),
        ("http://hooks.example.com/a b", "malformed"),
        ("http://hooks.example.com/\r\nX: y", "malformed"),
        ("https://" + "a" * 2_001, "malformed"),
        ("not a url", "malformed"),
        ("//hooks.example.com/in", "scheme"),
    ],
)
def test_a_malformed_url_is_refused_with_its_reason(url: str, why: str) -> None:
    assert reason(url, resolver=resolving(PUBLIC)) == why


def test_a_name_is_judged_by_every_address_it_resolves_to() -> None:
    assert check("https://hooks.example.com/in", OPEN, resolver=resolving(PUBLIC)).port == 443
    assert reason("https://hooks.example.com/in", resolver=resolving(PUBLIC, "10.1.2.3")) == "address"
    assert reason("https://localhost.example/in", resolver=resolving("127.0.0.1")) == "address"

    def nowhere(host: str, port: int) -> Sequence[str]:
        raise OSError("no such host")

    assert reason("https://gone.example/in", resolver=nowhere) == "unresolvable"


def test_ports_80_and_443_pass_and_others_only_when_allowed() -> None:
    public = resolving(PUBLIC)
    assert check("http://hooks.example.com:80/", OPEN, resolver=public).port == 80
    assert check("https://hooks.example.com:443/", OPEN, resolver=public).port == 443
    allowed = TargetPolicy.from_settings(["8443"], [])
    assert check("https://hooks.example.com:8443/", allowed, resolver=public).port == 8443
    assert reason("https://hooks.example.com:8444/", allowed, resolver=public) == "port"


def test_the_allow_list_admits_only_the_networks_it_names() -> None:
    policy = TargetPolicy.from_settings([], ["127.0.0.1/32", "10.20.0.0/16"])
    assert check("http://127.0.0.1/", policy).addresses[0].compressed == "127.0.0.1"
    assert check("http://10.20.3.4/", policy).host == "10.20.3.4"
    assert reason("http://127.0.0.2/", policy) == "address"
    assert reason("http://10.21.0.1/", policy) == "address"
    assert reason("http://[::1]/", policy) == "address"


def test_the_target_keeps_the_host_for_the_host_header_and_connects_to_the_checked_address() -> None:
    target = check("https://hooks.example.com:443/in?x=1", OPEN, resolver=resolving(PUBLIC, "2606:4700::1111"))
    assert target.host_header == "hooks.example.com"
    assert target.url_for(target.addresses[0]) == f"https://{PUBLIC}:443/in?x=1"
    assert target.url_for(target.addresses[1]) == "https://[2606:4700::1111]:443/in?x=1"


@given(st.ip_addresses(v=4) | st.ip_addresses(v=6))
def test_any_address_passes_only_if_it_is_public_unicast(address: object) -> None:
    import ipaddress

    ip = ipaddress.ip_address(str(address))
    literal = f"[{ip}]" if ip.version == 6 else str(ip)
    embedded = getattr(ip, "ipv4_mapped", None) or getattr(ip, "sixtofour", None)
    if ip.version == 6 and ip in ipaddress.ip_network("64:ff9b::/96"):
        embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    public = (
        ip.is_global
        and not ip.is_multicast
        and (embedded is None or (embedded.is_global and not embedded.is_multicast))
    )
    if public:
        assert check(f"http://{literal}/", OPEN).addresses == (ip,)
    else:
        with pytest.raises(WebhookUrlForbidden):
            check(f"http://{literal}/", OPEN)
