"""IntentRouter: one isolated model call per attempt, strict replies, two attempts, fails closed."""

from __future__ import annotations

import json

import pytest

from harness.errors import ModelTimeout, ModelUnavailable, RoutingUnavailable
from harness.llm.base import ModelRole, Purpose
from harness.llm.offline.router import classify
from harness.llm.scripted import ScriptedModel, Step, assistant_message, json_message, raise_error
from harness.ports import RoutingContext
from harness.prompts import ROUTER
from harness.routing import Intent, IntentRouter, parse_intent
from tests.harness.scope_fixtures import Harness, build_scope

QUESTION = "Payments are timing out since 10:00 UTC, what is going on?"


def routed(*steps: Step) -> tuple[Harness, ScriptedModel]:
    router = ScriptedModel(steps, name="router")
    return build_scope(router=router), router


@pytest.mark.parametrize("intent", list(Intent))
def test_each_intent_is_routed_on_the_first_attempt(intent: Intent) -> None:
    h, router = routed(json_message({"intent": intent.value}))

    assert IntentRouter().route(h.scope.caller, QUESTION, RoutingContext()) == (intent, 1)
    router.assert_complete()
    assert h.model.calls == []  # the router role has its own model; nothing else is asked


def test_the_router_request_is_two_messages_without_tools_or_history() -> None:
    h, router = routed(json_message({"intent": "DIAGNOSIS"}))
    context = RoutingContext(last_intent="KNOWLEDGE_QUERY", last_user_query="How do I resize the pool?")

    IntentRouter().route(h.scope.caller, QUESTION, context)

    (request,) = router.calls
    assert request.role is ModelRole.ROUTER
    assert request.purpose is Purpose.ROUTING
    assert request.tools == ()
    assert request.json_output is True
    assert [m.role for m in request.messages] == ["system", "user"]
    assert request.messages[0].content == ROUTER
    assert json.loads(request.messages[1].content or "") == {
        "query": QUESTION,
        "last_intent": "KNOWLEDGE_QUERY",
        "last_user_query": "How do I resize the pool?",
    }


def test_without_a_previous_question_the_router_sees_only_the_query() -> None:
    h, router = routed(json_message({"intent": "SYSTEM_CHAT"}))

    IntentRouter().route(h.scope.caller, "hello", RoutingContext())

    assert json.loads(router.calls[0].messages[1].content or "") == {"query": "hello"}


def test_an_invalid_reply_is_retried_and_routed_on_attempt_two() -> None:
    h, router = routed(assistant_message("DIAGNOSIS"), json_message({"intent": "KNOWLEDGE_QUERY"}))

    assert IntentRouter().route(h.scope.caller, QUESTION, RoutingContext()) == (Intent.KNOWLEDGE_QUERY, 2)
    router.assert_complete()
    # the retry is the same isolated request, not a conversation about the bad reply
    assert router.calls[0].messages == router.calls[1].messages


@pytest.mark.parametrize("error", [ModelTimeout(), ModelUnavailable()])
def test_a_model_error_is_retried_and_routed_on_attempt_two(error: Exception) -> None:
    h, router = routed(raise_error(error), json_message({"intent": "DIAGNOSIS"}))

    assert IntentRouter().route(h.scope.caller, QUESTION, RoutingContext()) == (Intent.DIAGNOSIS, 2)
    router.assert_complete()


def test_two_invalid_replies_make_routing_unavailable_never_diagnosis() -> None:
    h, router = routed(assistant_message("I think this is a DIAGNOSIS"), assistant_message(""))

    with pytest.raises(RoutingUnavailable):
        IntentRouter().route(h.scope.caller, QUESTION, RoutingContext())
    router.assert_complete()


def test_two_model_errors_make_routing_unavailable() -> None:
    h, router = routed(raise_error(ModelTimeout()), raise_error(ModelTimeout()))

    with pytest.raises(RoutingUnavailable):
        IntentRouter().route(h.scope.caller, QUESTION, RoutingContext())
    router.assert_complete()


def test_the_router_makes_at_most_two_model_calls() -> None:
    h, router = routed(assistant_message("nope"), assistant_message("still no"), json_message({"intent": "DIAGNOSIS"}))

    with pytest.raises(RoutingUnavailable):
        IntentRouter().route(h.scope.caller, QUESTION, RoutingContext())
    assert len(router.calls) == 2
    assert router.remaining == 1
    assert h.ctx.usage().model_calls == 2


INVALID_REPLIES = {
    "extra field": '{"intent": "DIAGNOSIS", "confidence": 0.9}',
    "lowercase intent": '{"intent": "diagnosis"}',
    "prose around the JSON": 'Sure! {"intent": "DIAGNOSIS"}',
    "prose after the JSON": '{"intent": "DIAGNOSIS"} because logs are needed',
    "code fence": '```json\n{"intent": "DIAGNOSIS"}\n```',
    "unknown intent": '{"intent": "INCIDENT"}',
    "intent is not a string": '{"intent": ["DIAGNOSIS"]}',
    "bare string": '"DIAGNOSIS"',
    "two objects": '{"intent": "DIAGNOSIS"}{"intent": "SYSTEM_CHAT"}',
    "missing intent": "{}",
    "empty": "",
}


@pytest.mark.parametrize("reply", list(INVALID_REPLIES.values()), ids=list(INVALID_REPLIES))
def test_strictness_every_loose_reply_is_invalid(reply: str) -> None:
    assert parse_intent(reply) is None
    h, router = routed(assistant_message(reply), assistant_message(reply))

    with pytest.raises(RoutingUnavailable):
        IntentRouter().route(h.scope.caller, QUESTION, RoutingContext())
    assert len(router.calls) == 2


def test_surrounding_whitespace_alone_does_not_invalidate_a_reply() -> None:
    assert parse_intent('  {"intent": "SYSTEM_CHAT"}\n') is Intent.SYSTEM_CHAT


OFFLINE_TABLE = [
    # small talk and capability questions
    ("hello", None, "SYSTEM_CHAT"),
    ("thanks!", None, "SYSTEM_CHAT"),
    ("Good morning", None, "SYSTEM_CHAT"),
    ("who are you?", None, "SYSTEM_CHAT"),
    ("what can you do?", None, "SYSTEM_CHAT"),
    ("你好", None, "SYSTEM_CHAT"),
    ("谢谢", None, "SYSTEM_CHAT"),
    ("你是谁", None, "SYSTEM_CHAT"),
    ("你能做什么", None, "SYSTEM_CHAT"),
    # how-to and knowledge
    ("How do I configure the database connection pool size?", None, "KNOWLEDGE_QUERY"),
    ("What is a cache stampede?", None, "KNOWLEDGE_QUERY"),
    ("What is the difference between a liveness and a readiness probe?", None, "KNOWLEDGE_QUERY"),
    ("Explain the release procedure", None, "KNOWLEDGE_QUERY"),
    ("如何配置数据库连接池？", None, "KNOWLEDGE_QUERY"),
    ("什么是缓存击穿", None, "KNOWLEDGE_QUERY"),
    ("发布流程的步骤是什么", None, "KNOWLEDGE_QUERY"),
    # live incidents
    (QUESTION, None, "DIAGNOSIS"),
    ("payment-service is throwing 504 errors right now", None, "DIAGNOSIS"),
    ("checkout latency spiked after the deploy, investigate", None, "DIAGNOSIS"),
    ("why is the search cluster slow today?", None, "DIAGNOSIS"),
    ("支付服务从10点开始一直超时，帮我排查一下", None, "DIAGNOSIS"),
    ("线上订单接口报错了，原因是什么", None, "DIAGNOSIS"),
    ("数据库主从延迟飙升，怎么回事", None, "DIAGNOSIS"),
    # follow-ups of a diagnosis
    ("and what about the gateway?", "DIAGNOSIS", "DIAGNOSIS"),
    ("also check the inventory service", "DIAGNOSIS", "DIAGNOSIS"),
    ("why did that happen?", "DIAGNOSIS", "DIAGNOSIS"),
    ("那为什么会这样？", "DIAGNOSIS", "DIAGNOSIS"),
    ("还有别的原因吗", "DIAGNOSIS", "DIAGNOSIS"),
    # a documentation question stays one, even right after a diagnosis
    ("and how do I configure it?", "DIAGNOSIS", "KNOWLEDGE_QUERY"),
    ("what is the retry policy?", "DIAGNOSIS", "KNOWLEDGE_QUERY"),
]


@pytest.mark.parametrize(("query", "last_intent", "expected"), OFFLINE_TABLE)
def test_offline_router_classifies(query: str, last_intent: str | None, expected: str) -> None:
    assert classify(query, last_intent) == expected


# A workload in a bad state, or an alert's name, is an incident whatever the question's first words.
INCIDENTS = [
    # a status code counted ("502s"), and the cause asked for with "what is causing it"
    "Users see 502s on dash.ops.example.internal a couple of minutes after they log in. What is causing it?",
    "What is the issue with pod payment-7f9c4?",
    "What is the issue with pod X?",
    "What's wrong with the checkout pods?",
    "the pod never becomes Ready",
    "The frontend pod never becomes ready after the rollout",
    "Why has service X been performing poorly?",
    "why has payment-service been performing poorly since Monday",
    "payment-service is slow",
    "The orders deployment keeps restarting",
    "pods in namespace shop are stuck in Pending",
    "my cronjob report-export failed last night",
    "node worker-3 is NotReady",
    "The catalog pods are being OOMKilled",
    "pods evicted on node pool b",
    "Our redis is down",
    "Checkout API returns 503 errors",
    "Is the ledger-api deployment healthy? its replicas mismatch",
    "job nightly-billing has been failing for two days",
    "the kafka consumer is lagging behind",
    "users report the website is down",
    "How do I fix the payment-service pod that is crashing right now?",
    "Please look at the ledger-api deployment, its pods are crash looping",
    "CrashLoopBackOff on billing-worker",
    "ImagePullBackOff for the api deployment",
    # alert names, alone or as an alerting system sends them
    "KubePodCrashLooping",
    "[FIRING:1] KubePodCrashLooping (payments/payment-api-6d9)",
    "KubeDeploymentReplicasMismatch for deployment ledger-api",
    "Alert KubeDeploymentReplicasMismatch fired",
    "TargetDown on job node-exporter",
    "NodeFilesystemAlmostOutOfSpace on ip-10-0-3-17",
    "We got a HighErrorRate alert for checkout",
    "payment-service 的 pod 一直重启",
    "订单服务的容器一直未就绪",
]
# Documentation stays documentation, even about crashing pods or an alert: a runbook, how to
# configure something, a definition, what any workload does.
DOCUMENTATION = [
    "What is our runbook for KubePodCrashLooping?",
    "What is our runbook for pods stuck in Pending?",
    "How do I configure liveness probes so a pod is not restarted too early?",
    "What is CrashLoopBackOff?",
    "What is KubePodCrashLooping?",
    "What does it mean when a pod is Pending?",
    "Why would a pod be evicted?",
    "What are the common reasons a deployment fails to roll out?",
    "Where can I find the documentation for the payment-service retries?",
    "What is the escalation policy when the database is down?",
    "How to set up alerts for slow services?",
    "how do I restart a pod?",
    "how do I roll back a deployment that is failing?",
    "Explain the difference between a failing readiness probe and a failing liveness probe",
    "How does the payment service handle refunds?",
    "What is the retry policy of the checkout service?",
    "What is the SLA of ledger-api?",
    "The e-mail templates docs: how do I change the footer?",
    "如何配置 pod 的就绪探针？",
    "什么是 CrashLoopBackOff",
]
SMALL_TALK = ["hi there, thanks for the help", "hey", "thank you!", "what can you do?", "who are you?"]


@pytest.mark.parametrize("query", INCIDENTS)
def test_a_workload_in_a_bad_state_or_an_alert_is_an_incident(query: str) -> None:
    assert classify(query) == "DIAGNOSIS"


@pytest.mark.parametrize("query", DOCUMENTATION)
def test_documentation_questions_about_workloads_and_alerts_stay_knowledge_questions(query: str) -> None:
    assert classify(query) == "KNOWLEDGE_QUERY"


@pytest.mark.parametrize("query", SMALL_TALK)
def test_small_talk_stays_small_talk(query: str) -> None:
    assert classify(query) == "SYSTEM_CHAT"


@pytest.mark.parametrize("query", ["and what about the gateway?", "also check the inventory service"])
def test_offline_follow_up_needs_a_previous_diagnosis(query: str) -> None:
    assert classify(query, "DIAGNOSIS") == "DIAGNOSIS"
    assert classify(query, None) != "DIAGNOSIS"
    assert classify(query, "KNOWLEDGE_QUERY") != "DIAGNOSIS"
