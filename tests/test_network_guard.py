"""The autouse guard really blocks a provider that is not on this machine."""

from __future__ import annotations

import socket

import pytest

from harness.errors import ModelError
from harness.llm.base import Message, ModelRequest, ModelRole, Purpose
from harness.llm.openai_compat import OpenAICompatibleModel, OpenAIConfig
from tests.conftest import RealNetworkBlocked


@pytest.mark.usefixtures("expect_blocked_network")
def test_a_socket_to_a_public_address_fails_the_test() -> None:
    with pytest.raises(RealNetworkBlocked), socket.create_connection(("203.0.113.7", 443), timeout=1):
        pass


@pytest.mark.usefixtures("expect_blocked_network")
def test_the_openai_provider_cannot_reach_a_real_endpoint() -> None:
    model = OpenAICompatibleModel(
        OpenAIConfig("https://203.0.113.7/v1", "sk-not-real", "gpt-x", max_retries=0, timeout_s=2)
    )
    request = ModelRequest(ModelRole.AGENT, Purpose.SYSTEM_CHAT, (Message.user("hi"),), timeout_s=2)
    # The client wraps the guard's error as a connection error; either way no request leaves.
    with pytest.raises((RealNetworkBlocked, ModelError)):
        model.complete(request)


def test_loopback_is_allowed() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    with socket.create_connection(server.getsockname(), timeout=1):
        pass
    server.close()
