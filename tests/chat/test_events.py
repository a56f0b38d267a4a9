"""A run's event storage: numbered across processes, replayable from any id, archived to rows;
and who may read a run's channel."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.utils import timezone

from chat.events import (
    PUBSUB_CHANNEL,
    RunChannelManager,
    RunEventStorage,
    archive_events,
    channel_for,
    emit_many,
    events_key,
    owner_key,
)
from chat.models import RunEvent
from tests.django_fixtures import Caller
from traces.models import ChatSession, Run


def new_run(caller: Caller) -> Run:
    session = ChatSession.objects.create(owner=caller.user, title="t")
    return Run.objects.create(session=session, owner=caller.user, question="q", status="running")


def as_tuples(events: list[Any]) -> list[tuple[int, str, str]]:
    return [(int(e.id), e.type, e.data) for e in events]


def five_events(run: Run) -> list[tuple[int, str, str]]:
    """Events written as two processes would: separate storages, single appends and batches."""
    channel = channel_for(run.id)
    api = RunEventStorage()
    first = api.append_event(channel, "metadata", json.dumps({"run_id": str(run.id)}))
    assert first.id == 1
    assert emit_many(run.id, [("status", {"stage": "queued"}), ("status", {"stage": "routing"})]) == [2, 3]
    worker = RunEventStorage()
    fourth = worker.append_event(channel, "content", json.dumps({"text": "连接池耗尽"}, ensure_ascii=False))
    assert fourth.id == 4
    assert emit_many(run.id, [("done", {"outcome": "success"})]) == [5]
    return [
        (1, "metadata", json.dumps({"run_id": str(run.id)})),
        (2, "status", '{"stage": "queued"}'),
        (3, "status", '{"stage": "routing"}'),
        (4, "content", '{"text": "连接池耗尽"}'),
        (5, "done", '{"outcome": "success"}'),
    ]


def test_ids_run_from_one_across_storages_and_batches(alice: Caller) -> None:
    run = new_run(alice)
    expected = five_events(run)
    replay = RunEventStorage().get_events(channel_for(run.id), 0)
    assert as_tuples(replay) == expected
    assert json.loads(replay[3].data) == {"text": "连接池耗尽"}  # text kept as written, not \u-escaped


def test_replay_starts_after_the_given_id_and_honours_the_limit(alice: Caller) -> None:
    run = new_run(alice)
    expected = five_events(run)
    storage, channel = RunEventStorage(), channel_for(run.id)
    assert as_tuples(storage.get_events(channel, 2)) == expected[2:]
    assert as_tuples(storage.get_events(channel, 0, limit=2)) == expected[:2]
    assert as_tuples(storage.get_events(channel, 3, limit=1)) == expected[3:4]
    assert storage.get_events(channel, 5) == []
    assert storage.get_events(channel_for(uuid.uuid4()), 0) == []


def test_an_archived_stream_replays_from_its_rows_once_the_list_is_gone(alice: Caller, service: Any) -> None:
    run = new_run(alice)
    expected = five_events(run)
    assert archive_events(run.id) == 5
    assert archive_events(run.id) == 5  # archiving again (a retried end) adds no rows
    assert RunEvent.objects.filter(run=run).count() == 5

    service.delete(events_key(run.id))  # the live list expired
    storage, channel = RunEventStorage(), channel_for(run.id)
    assert as_tuples(storage.get_events(channel, 0)) == expected
    assert as_tuples(storage.get_events(channel, 3)) == expected[3:]
    assert as_tuples(storage.get_events(channel, 1, limit=2)) == expected[1:3]
    assert storage.get_events(channel, 5) == []
    assert storage.last_event(channel) == (5, "done")
    assert storage.get_current_id(channel) == 5


def ended(run: Run, **fields: Any) -> None:
    Run.objects.filter(id=run.id).update(status="failed", outcome="failed", finished_at=timezone.now(), **fields)


def test_a_list_that_lost_its_end_is_archived_with_the_end_the_row_records(alice: Caller, service: Any) -> None:
    """Redis was restarted mid-run: the list holds what came after, and no ``done``."""
    run = new_run(alice)
    emit_many(run.id, [("status", {"stage": "agent_step"})])
    ended(run, failure_code="worker_lost", failure_message="The worker running this run stopped.")

    assert archive_events(run.id) == 3
    rows = [(e.seq, e.event_type, json.loads(e.data)) for e in RunEvent.objects.filter(run=run).order_by("seq")]
    assert rows == [
        (1, "status", {"stage": "agent_step"}),
        (2, "failure", {"code": "worker_lost", "message": "The worker running this run stopped."}),
        (3, "done", {"outcome": "failed"}),
    ]


def test_a_list_lost_entirely_is_archived_from_the_row_alone(alice: Caller, service: Any) -> None:
    run = new_run(alice)
    ended(run, failure_code="internal_error", failure_message="x")
    assert archive_events(run.id) == 4
    kinds = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("event_type", flat=True))
    assert kinds == ["metadata", "status", "failure", "done"]
    metadata = json.loads(RunEvent.objects.get(run=run, seq=1).data)
    assert metadata == {"session_id": str(run.session_id), "run_id": str(run.id)}


def test_a_live_run_without_events_archives_nothing(alice: Caller, service: Any) -> None:
    assert archive_events(new_run(alice).id) == 0


def test_last_event_is_the_newest_event_live_or_archived(alice: Caller, service: Any) -> None:
    run = new_run(alice)
    storage, channel = RunEventStorage(), channel_for(run.id)
    assert storage.last_event(channel) == (0, None)
    assert storage.get_current_id(channel) == 0
    emit_many(run.id, [("metadata", {}), ("status", {"stage": "queued"})])
    assert storage.last_event(channel) == (2, "status")
    assert storage.get_current_id(channel) == 2
    emit_many(run.id, [("done", {"outcome": "cancelled"})])
    assert storage.last_event(channel) == (3, "done")
    archive_events(run.id)
    service.delete(events_key(run.id))
    assert storage.last_event(channel) == (3, "done")
    assert storage.last_event("not-a-run-channel") == (0, None)


def test_events_only_belong_to_run_channels(service: Any) -> None:
    storage = RunEventStorage()
    with pytest.raises(ValueError, match="not a run channel"):
        storage.append_event("room-1", "status", "{}")
    assert storage.get_events("run-not-a-uuid", 0) == []
    assert storage.get_current_id("room-1") == 0


def test_emit_many_publishes_each_event_with_its_stored_id(alice: Caller, service: Any) -> None:
    run = new_run(alice)
    emit_many(run.id, [("metadata", {"run_id": str(run.id)})])
    pubsub = service.pubsub()
    pubsub.subscribe(PUBSUB_CHANNEL)
    try:
        assert pubsub.get_message(timeout=2)["type"] == "subscribe"
        emit_many(run.id, [("content", {"a": 1}), ("done", {"outcome": "success"})])
        messages = [pubsub.get_message(timeout=2) for _ in range(2)]
    finally:
        pubsub.close()
    published = [json.loads(m["data"]) for m in messages if m is not None]
    assert published == [
        {"channel": channel_for(run.id), "event_type": "content", "data": '{"a": 1}', "pub_id": "2"},
        {"channel": channel_for(run.id), "event_type": "done", "data": '{"outcome": "success"}', "pub_id": "3"},
    ]


def test_emit_many_remembers_the_owner_only_when_given(alice: Caller, service: Any) -> None:
    run, other = new_run(alice), new_run(alice)
    emit_many(run.id, [("metadata", {})], owner_id=alice.user.pk)
    emit_many(other.id, [("metadata", {})])
    assert service.get(owner_key(run.id)) == str(alice.user.pk).encode()
    ttl = int(service.ttl(owner_key(run.id)))
    assert 0 < ttl <= settings.HARNESS["INVOCATION_TTL_S"]
    assert 0 < int(service.ttl(events_key(run.id))) <= settings.HARNESS["INVOCATION_TTL_S"]
    assert service.get(owner_key(other.id)) is None


# --- who may read a channel ------------------------------------------------------------------


def test_only_the_owner_or_staff_may_read_a_run_channel(alice: Caller, bob: Caller, staff: Caller) -> None:
    run = new_run(alice)
    channel = channel_for(run.id)
    manager = RunChannelManager()
    assert manager.can_read_channel(alice.user, channel) is True
    assert manager.can_read_channel(bob.user, channel) is False
    assert manager.can_read_channel(staff.user, channel) is True
    assert manager.can_read_channel(AnonymousUser(), channel) is False
    assert manager.can_read_channel(None, channel) is False


@pytest.mark.parametrize(
    "channel",
    ["", "run-", "run-not-a-uuid", "events", "room-{id}", "{id}", "run-{id}-extra"],
)
def test_malformed_or_unknown_channels_are_unreadable(alice: Caller, staff: Caller, channel: str) -> None:
    run = new_run(alice)
    name = channel.format(id=run.id)
    manager = RunChannelManager()
    assert manager.can_read_channel(alice.user, name) is False
    assert manager.can_read_channel(staff.user, name) is False


def test_staff_cannot_read_a_run_that_does_not_exist(staff: Caller) -> None:
    assert RunChannelManager().can_read_channel(staff.user, channel_for(uuid.uuid4())) is False
