"""The per-object handler state machine, with explicit time (no clocks are read)."""

from __future__ import annotations

import dataclasses
import datetime
import json
from typing import Any

import pytest
from trioperator._engine.bodies import Body
from trioperator._engine.ids import HandlerId
from trioperator._engine.patches import Patch
from trioperator._engine.progress import (
    AnnotationsProgressStorage,
    ProgressStorage,
    SmartProgressStorage,
    StatusProgressStorage,
)
from trioperator._engine.progression import (
    HandlerOutcome,
    HandlerState,
    Outcome,
    State,
    StateCounters,
    deliver_results,
    format_iso8601,
    parse_iso8601,
)
from trioperator._engine.reasons import HANDLER_REASONS, Reason

UTC = datetime.UTC
WEST11 = datetime.timezone(datetime.timedelta(hours=-11))
EAST11 = datetime.timezone(datetime.timedelta(hours=11))

# Timestamps: time zero (0), before (B), after (A), and time zero + 1 s (1).
TSB_ISO = "2020-12-31T23:59:59.000000+00:00"
TS0_ISO = "2020-12-31T23:59:59.123456+00:00"
TS1_ISO = "2021-01-01T00:00:00.123456+00:00"
TSA_ISO = "2020-12-31T23:59:59.999999+00:00"
TSB = datetime.datetime(2020, 12, 31, 23, 59, 59, tzinfo=UTC)
TS0 = datetime.datetime(2020, 12, 31, 23, 59, 59, 123456, tzinfo=UTC)
TS1 = datetime.datetime(2021, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)
TSA = datetime.datetime(2020, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
ZERO = datetime.timedelta(0)


@dataclasses.dataclass(frozen=True)
class Handler:
    id: HandlerId


HANDLER = Handler(HandlerId("some-id"))
SOME_ID = HandlerId("some-id")


def h(name: str) -> Handler:
    return Handler(HandlerId(name))


@pytest.fixture(params=[StatusProgressStorage, SmartProgressStorage])
def storage(request: pytest.FixtureRequest) -> ProgressStorage:
    """Storages that read ``status.kopf.progress``: the state tests use that layout for input."""
    cls: type[ProgressStorage] = request.param
    return cls()


def progress_body(record: dict[str, Any] | None = None, **records: dict[str, Any]) -> Body:
    progress = dict(records)
    if record is not None:
        progress["some-id"] = record
    return Body({"status": {"kopf": {"progress": progress}}})


def stored(patch: Patch, key: str = "some-id") -> dict[str, Any]:
    """The record written to the patch, whichever storage wrote it."""
    status_record = patch.get("status", {}).get("kopf", {}).get("progress", {}).get(key)
    if status_record is not None:
        return dict(status_record)
    annotation = patch["metadata"]["annotations"][f"kopf.zalando.org/{key}"]
    decoded: dict[str, Any] = json.loads(annotation)
    return decoded


# ------------------------------------------------------------------ timestamps


@pytest.mark.parametrize(
    ("timestamp", "expected"),
    [
        (datetime.datetime(2000, 1, 1), "2000-01-01T00:00:00.000000"),
        (datetime.datetime(2000, 1, 1, 9, 8, 7, 654321), "2000-01-01T09:08:07.654321"),
        (datetime.datetime(2000, 1, 1, tzinfo=UTC), "2000-01-01T00:00:00.000000+00:00"),
        (
            datetime.datetime(2000, 1, 1, 9, 8, 7, 654321, tzinfo=UTC),
            "2000-01-01T09:08:07.654321+00:00",
        ),
        (datetime.datetime(2000, 1, 1, tzinfo=WEST11), "2000-01-01T00:00:00.000000-11:00"),
        (datetime.datetime(2000, 1, 1, tzinfo=EAST11), "2000-01-01T00:00:00.000000+11:00"),
    ],
)
def test_iso8601_formatting(timestamp: datetime.datetime, expected: str) -> None:
    assert format_iso8601(timestamp) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2000-01-01T00:00:00.000000", datetime.datetime(2000, 1, 1, tzinfo=UTC)),
        ("2000-01-01T09:08:07.654321", datetime.datetime(2000, 1, 1, 9, 8, 7, 654321, tzinfo=UTC)),
        ("2000-01-01T00:00:00", datetime.datetime(2000, 1, 1, tzinfo=UTC)),
        ("2000-01-01T00:00:00.000000Z", datetime.datetime(2000, 1, 1, tzinfo=UTC)),
        ("2000-01-01T09:08:07Z", datetime.datetime(2000, 1, 1, 9, 8, 7, tzinfo=UTC)),
        ("2000-01-01T00:00:00.000000+00:00", datetime.datetime(2000, 1, 1, tzinfo=UTC)),
        ("2000-01-01T00:00:00.000000-11:00", datetime.datetime(2000, 1, 1, tzinfo=WEST11)),
        (
            "2000-01-01T09:08:07.654321+11:00",
            datetime.datetime(2000, 1, 1, 9, 8, 7, 654321, tzinfo=EAST11),
        ),
        (
            "2018-12-31T23:59:59,999999",
            datetime.datetime(2018, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        ),
    ],
)
def test_iso8601_parsing(text: str, expected: datetime.datetime) -> None:
    parsed = parse_iso8601(text)
    assert parsed == expected
    assert parsed.utcoffset() == expected.utcoffset()


def test_iso8601_round_trip_keeps_the_offset() -> None:
    for text in [TS0_ISO, "2000-01-01T09:08:07.654321+11:00"]:
        assert format_iso8601(parse_iso8601(text)) == text


def test_iso8601_parsing_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        parse_iso8601("not a time")


# ------------------------------------------------------------------ creation & basic properties


def test_outcome_alias() -> None:
    assert Outcome is HandlerOutcome
    outcome = Outcome(final=True)
    assert (outcome.delay, outcome.result, outcome.exception, outcome.subrefs) == (
        None,
        None,
        None,
        (),
    )


def test_created_empty_from_scratch() -> None:
    state = State.from_scratch()
    assert len(state) == 0
    assert state.purpose is None
    assert state.done is True
    assert state.delay(TS0) is None
    assert state.delays(TS0) == []
    assert state.counts == StateCounters(success=0, failure=0, running=0)
    assert state.extras == {}


@pytest.mark.parametrize(
    "raw",
    [{}, {"status": {}}, {"status": {"kopf": {}}}, {"status": {"kopf": {"progress": {}}}}],
)
def test_created_empty_from_empty_storage(storage: ProgressStorage, raw: dict[str, Any]) -> None:
    state = State.from_storage(body=Body(raw), handlers=[HANDLER], storage=storage)
    assert len(state) == 0
    assert state.done is True
    assert state.delays(TS0) == []
    assert state.counts == StateCounters(0, 0, 0)
    assert state.extras == {}


@pytest.mark.parametrize("record", [{}, {"success": True}, {"failure": True}])
def test_created_empty_without_handlers(storage: ProgressStorage, record: dict[str, Any]) -> None:
    state = State.from_storage(body=progress_body(record), handlers=[], storage=storage)
    assert len(state) == 0
    assert state.done is True


def test_handlers_are_fetched_once_each() -> None:
    fetched: list[str] = []

    class Recording(StatusProgressStorage):
        def fetch(self, *, key: HandlerId, body: Body) -> Any:
            fetched.append(key)
            return super().fetch(key=key, body=body)

    State.from_storage(body=Body({}), handlers=[HANDLER, HANDLER], storage=Recording())
    assert fetched == ["some-id"]


# ------------------------------------------------------------------ active and passive states


def test_created_from_storage_as_passive(storage: ProgressStorage) -> None:
    state = State.from_storage(body=progress_body({}), handlers=[HANDLER], storage=storage)
    assert len(state) == 1
    assert state[SOME_ID].active is False


def test_created_from_handlers_as_active() -> None:
    state = State.from_scratch().with_handlers([HANDLER], now=TS0)
    assert state[SOME_ID].active is True


def test_switched_from_passive_to_active(storage: ProgressStorage) -> None:
    state = State.from_storage(body=progress_body({}), handlers=[HANDLER], storage=storage)
    state = state.with_handlers([HANDLER], now=TS0)
    assert state[SOME_ID].active is True


def test_outcomes_keep_passiveness(storage: ProgressStorage) -> None:
    state = State.from_storage(body=progress_body({}), handlers=[HANDLER], storage=storage)
    state = state.with_outcomes({SOME_ID: Outcome(final=True)}, now=TS0)
    assert state[SOME_ID].active is False
    active = State.from_scratch().with_handlers([HANDLER], now=TS0)
    active = active.with_outcomes({SOME_ID: Outcome(final=True)}, now=TS0)
    assert active[SOME_ID].active is True


def test_passive_states_are_not_in_done_and_delays(storage: ProgressStorage) -> None:
    body = progress_body({"delayed": TS1_ISO})
    state = State.from_storage(body=body, handlers=[HANDLER], storage=storage)
    assert state.done is True
    assert state.delays(TS0) == []
    state = state.with_handlers([HANDLER], now=TS0)
    assert state.done is False
    assert state.delays(TS0) == [1.0]
    assert state.delay(TS0) == 1.0


def test_outcomes_for_unknown_handlers_are_refused() -> None:
    with pytest.raises(RuntimeError, match="unknown handlers"):
        State.from_scratch().with_outcomes({SOME_ID: Outcome(final=True)}, now=TS0)


# ------------------------------------------------------------------ purposes


def test_created_from_purposeless_storage(storage: ProgressStorage) -> None:
    body = progress_body({"purpose": None})
    state = State.from_storage(body=body, handlers=[HANDLER], storage=storage)
    assert state.purpose is None
    assert state[SOME_ID].purpose is None


@pytest.mark.parametrize("reason", HANDLER_REASONS)
def test_created_from_purposeful_storage(storage: ProgressStorage, reason: Reason) -> None:
    body = progress_body({"purpose": reason.value})
    state = State.from_storage(body=body, handlers=[HANDLER], storage=storage)
    assert state.purpose is None
    assert state[SOME_ID].purpose == reason


@pytest.mark.parametrize("reason", HANDLER_REASONS)
def test_purpose_is_kept_through_handlers_and_outcomes(reason: Reason) -> None:
    state = State.from_scratch().with_purpose(reason)
    assert state.with_handlers([HANDLER], now=TS0).purpose == reason
    assert state.with_outcomes({}, now=TS0).purpose == reason
    assert type(state.purpose) is str  # plain strings, as stored


@pytest.mark.parametrize("reason", HANDLER_REASONS)
def test_repurposed_before_handlers(reason: Reason) -> None:
    state = State.from_scratch().with_purpose(reason).with_handlers([HANDLER], now=TS0)
    assert state[SOME_ID].purpose == reason


@pytest.mark.parametrize("reason", HANDLER_REASONS)
def test_repurposed_after_handlers(reason: Reason) -> None:
    state = State.from_scratch().with_handlers([HANDLER], now=TS0).with_purpose(reason)
    assert state.purpose == reason
    assert state[SOME_ID].purpose is None


@pytest.mark.parametrize("reason", HANDLER_REASONS)
def test_repurposed_with_handlers(reason: Reason) -> None:
    state = State.from_scratch().with_handlers([HANDLER], now=TS0)
    state = state.with_purpose(reason, handlers=[HANDLER, h("unknown")])
    assert state[SOME_ID].purpose == reason
    assert HandlerId("unknown") not in state


@pytest.mark.parametrize("reason", HANDLER_REASONS)
def test_repurposing_does_not_affect_existing_states(
    storage: ProgressStorage, reason: Reason
) -> None:
    body = progress_body({"purpose": None})
    state = State.from_storage(body=body, handlers=[HANDLER], storage=storage)
    state = state.with_handlers([HANDLER], now=TS0).with_purpose(reason)
    state = state.with_handlers([HANDLER], now=TS0)
    assert state[SOME_ID].purpose is None


# ------------------------------------------------------------------ counts and extras


COUNTED_RECORDS = [
    pytest.param(StateCounters(0, 0, 1), {}, id="running"),
    pytest.param(StateCounters(0, 1, 0), {"failure": True}, id="failed"),
    pytest.param(StateCounters(1, 0, 0), {"success": True}, id="succeeded"),
]


@pytest.mark.parametrize(("expected", "record"), COUNTED_RECORDS)
@pytest.mark.parametrize(
    ("stored_reason", "processed_reason"),
    [(a, b) for a in HANDLER_REASONS for b in HANDLER_REASONS if a != b],
)
def test_records_of_another_purpose_are_extras(
    storage: ProgressStorage,
    expected: StateCounters,
    record: dict[str, Any],
    stored_reason: Reason,
    processed_reason: Reason,
) -> None:
    body = progress_body({**record, "purpose": stored_reason.value})
    state = State.from_storage(body=body, handlers=[HANDLER], storage=storage)
    state = state.with_purpose(processed_reason)
    assert state.extras == {stored_reason.value: expected}
    assert state.counts == StateCounters(0, 0, 0)
    assert state.done is True
    assert state.delays(TS0) == []


@pytest.mark.parametrize(
    ("expected", "done", "delays", "record"),
    [
        pytest.param(StateCounters(0, 0, 1), False, [0.0], {}, id="running"),
        pytest.param(StateCounters(0, 1, 0), True, [], {"failure": True}, id="failed"),
        pytest.param(StateCounters(1, 0, 0), True, [], {"success": True}, id="succeeded"),
        pytest.param(StateCounters(0, 0, 1), False, [1.0], {"delayed": TS1_ISO}, id="delayed"),
        pytest.param(StateCounters(0, 0, 1), False, [0.0], {"delayed": TSB_ISO}, id="overdue"),
    ],
)
@pytest.mark.parametrize("reason", HANDLER_REASONS)
def test_records_of_the_same_purpose_are_counted(
    storage: ProgressStorage,
    expected: StateCounters,
    done: bool,
    delays: list[float],
    record: dict[str, Any],
    reason: Reason,
) -> None:
    body = progress_body({**record, "purpose": reason.value})
    state = State.from_storage(body=body, handlers=[HANDLER], storage=storage)
    state = state.with_purpose(reason).with_handlers([HANDLER], now=TS0)
    assert state.extras == {}
    assert state.counts == expected
    assert state.done is done
    assert state.delays(TS0) == delays


@pytest.mark.parametrize("reason", [Reason.CREATE, Reason.UPDATE, Reason.RESUME])
def test_deletion_supersedes_other_processing(storage: ProgressStorage, reason: Reason) -> None:
    body = progress_body(
        fn1={"purpose": reason.value, "failure": True},
        fn2={"purpose": reason.value, "success": True},
        fn3={"purpose": reason.value, "delayed": TS1_ISO},
    )
    owned = [h("fn1"), h("fn2"), h("fn3"), h("delete_fn")]
    state = State.from_storage(body=body, handlers=owned, storage=storage)
    state = state.with_purpose(Reason.DELETE).with_handlers([h("delete_fn")], now=TS0)

    assert len(state) == 4
    assert state.extras == {reason.value: StateCounters(success=1, failure=1, running=1)}
    assert state.counts == StateCounters(success=0, failure=0, running=1)
    assert state.done is False
    assert state.delays(TS0) == [0.0]

    state = state.with_outcomes({HandlerId("delete_fn"): Outcome(final=True)}, now=TS0)
    assert state.extras == {reason.value: StateCounters(success=1, failure=1, running=1)}
    assert state.counts == StateCounters(success=1, failure=0, running=0)
    assert state.done is True
    assert state.delays(TS0) == []


def test_purposeless_records_count_for_any_change(storage: ProgressStorage) -> None:
    body = progress_body({"success": True})
    state = State.from_storage(body=body, handlers=[HANDLER], storage=storage)
    state = state.with_purpose(Reason.UPDATE)
    assert state.counts == StateCounters(1, 0, 0)
    assert state.extras == {}


def test_without_successes() -> None:
    state = State.from_scratch().with_handlers([h("a"), h("b"), h("c")], now=TS0)
    state = state.with_outcomes(
        {
            HandlerId("a"): Outcome(final=True),
            HandlerId("b"): Outcome(final=True, exception=Exception("x")),
        },
        now=TS0,
    )
    assert list(state.without_successes()) == ["b", "c"]


# ------------------------------------------------------------------ start times and runtime


def test_started_from_scratch(storage: ProgressStorage) -> None:
    patch = Patch()
    state = State.from_scratch().with_handlers([HANDLER], now=TS0)
    state.store(body=Body({}), patch=patch, storage=storage)
    assert stored(patch)["started"] == TS0_ISO


@pytest.mark.parametrize(
    ("expected", "record"),
    [
        (TS0_ISO, {}),
        (TS0_ISO, {"started": None}),
        (TS0_ISO, {"started": TS0_ISO}),
        (TSB_ISO, {"started": TSB_ISO}),
        (TSA_ISO, {"started": TSA_ISO}),
    ],
)
def test_started_from_storage(
    storage: ProgressStorage, expected: str, record: dict[str, Any]
) -> None:
    patch = Patch()
    state = State.from_storage(
        body=progress_body(record), handlers=[HANDLER], storage=storage, now=TS0
    )
    state = state.with_handlers([HANDLER], now=TS1)  # not a new start: the record is kept
    state.store(body=Body({}), patch=patch, storage=storage)
    assert stored(patch)["started"] == expected


def test_missing_start_without_now_is_set_by_the_first_outcome(storage: ProgressStorage) -> None:
    state = State.from_storage(body=progress_body({}), handlers=[HANDLER], storage=storage)
    assert state[SOME_ID].started is None
    assert state[SOME_ID].runtime(TS1) == ZERO
    state = state.with_handlers([HANDLER], now=TS0)
    state = state.with_outcomes({SOME_ID: Outcome(final=False)}, now=TS1)
    assert state[SOME_ID].started == TS1


@pytest.mark.parametrize(
    ("expected", "record"),
    [
        (ZERO, {}),
        (ZERO, {"started": None}),
        (ZERO, {"started": TS0_ISO}),
        (TS0 - TSB, {"started": TSB_ISO}),
        (TS0 - TSA, {"started": TSA_ISO}),
    ],
)
def test_runtime(
    storage: ProgressStorage, expected: datetime.timedelta, record: dict[str, Any]
) -> None:
    state = State.from_storage(
        body=progress_body(record), handlers=[HANDLER], storage=storage, now=TS0
    )
    state = state.with_handlers([HANDLER], now=TS0)
    assert state[SOME_ID].runtime(TS0) == expected


# ------------------------------------------------------------------ finished, sleeping, awakened


@pytest.mark.parametrize(
    ("expected", "record"),
    [
        (False, {}),
        (False, {"success": False}),
        (False, {"failure": False}),
        (False, {"success": None}),
        (False, {"failure": None}),
        (True, {"success": True}),
        (True, {"failure": True}),
    ],
)
def test_finished_flag(storage: ProgressStorage, expected: bool, record: dict[str, Any]) -> None:
    state = State.from_storage(body=progress_body(record), handlers=[HANDLER], storage=storage)
    assert state[SOME_ID].finished is expected
    assert state[SOME_ID].done is expected


SLEEP_CASES = [
    # Finished is never sleeping nor awakened, whatever the delay says.
    (False, False, {"success": True}),
    (False, False, {"failure": True}),
    (False, False, {"success": True, "delayed": TSA_ISO}),
    (False, False, {"failure": True, "delayed": TSA_ISO}),
    # Unfinished without a delay is awake.
    (False, True, {}),
    (False, True, {"delayed": None}),
    (False, True, {"success": None, "delayed": None}),
    (False, True, {"failure": None}),
    # Unfinished with a delay: it depends on now.
    (False, True, {"delayed": TS0_ISO}),
    (False, True, {"delayed": TSB_ISO}),
    (False, True, {"delayed": TSB_ISO, "success": None}),
    (True, False, {"delayed": TSA_ISO}),
    (True, False, {"delayed": TSA_ISO, "failure": None}),
]


@pytest.mark.parametrize(("sleeping", "awakened", "record"), SLEEP_CASES)
def test_sleeping_and_awakened(
    storage: ProgressStorage, sleeping: bool, awakened: bool, record: dict[str, Any]
) -> None:
    state = State.from_storage(body=progress_body(record), handlers=[HANDLER], storage=storage)
    state = state.with_handlers([HANDLER], now=TS0)
    assert state[SOME_ID].sleeping(TS0) is sleeping
    assert state[SOME_ID].awakened(TS0) is awakened


@pytest.mark.parametrize(
    ("expected", "record"),
    [(None, {}), (None, {"delayed": None}), (TS0, {"delayed": TS0_ISO})],
)
def test_awakening_time(
    storage: ProgressStorage, expected: datetime.datetime | None, record: dict[str, Any]
) -> None:
    state = State.from_storage(body=progress_body(record), handlers=[HANDLER], storage=storage)
    assert state[SOME_ID].delayed == expected


@pytest.mark.parametrize(
    ("expected", "record"),
    [(0, {}), (0, {"retries": None}), (6, {"retries": 6})],
)
def test_retries(storage: ProgressStorage, expected: int, record: dict[str, Any]) -> None:
    state = State.from_storage(body=progress_body(record), handlers=[HANDLER], storage=storage)
    assert state[SOME_ID].retries == expected


# ------------------------------------------------------------------ outcomes into records


@pytest.mark.parametrize(
    ("delay", "expected"),
    [(None, None), (0, TS0_ISO), (1, TS1_ISO)],
)
def test_delayed_time(storage: ProgressStorage, delay: float | None, expected: str | None) -> None:
    patch = Patch()
    state = State.from_scratch().with_handlers([HANDLER], now=TS0)
    state = state.with_outcomes({SOME_ID: Outcome(final=False, delay=delay)}, now=TS0)
    state.store(body=Body({}), patch=patch, storage=storage)
    assert stored(patch).get("delayed") == expected


@pytest.mark.parametrize(
    ("expected_retries", "delay", "record"),
    [
        (1, None, None),
        (1, 0, None),
        (1, 1, {"retries": None}),
        (6, None, {"retries": 5}),
        (6, 1, {"retries": 5}),
    ],
)
def test_retries_counted(
    storage: ProgressStorage,
    expected_retries: int,
    delay: float | None,
    record: dict[str, Any] | None,
) -> None:
    body = progress_body(record) if record is not None else Body({})
    patch = Patch()
    state = State.from_storage(body=body, handlers=[HANDLER], storage=storage, now=TS0)
    state = state.with_handlers([HANDLER], now=TS0)
    state = state.with_outcomes({SOME_ID: Outcome(final=False, delay=delay)}, now=TS0)
    state.store(body=body, patch=patch, storage=storage)
    assert stored(patch)["retries"] == expected_retries


def test_subrefs_are_sorted_and_deduplicated(storage: ProgressStorage) -> None:
    body = progress_body({"subrefs": ["sub9/2", "sub9/1"]})
    patch = Patch()
    outcome = Outcome(
        final=True,
        subrefs=[HandlerId(s) for s in ["sub2/b", "sub2/a", "sub2", "sub1", "sub3", "sub9/1"]],
    )
    state = State.from_storage(body=body, handlers=[HANDLER], storage=storage, now=TS0)
    state = state.with_handlers([HANDLER], now=TS0)
    state = state.with_outcomes({SOME_ID: outcome}, now=TS0)
    state.store(body=body, patch=patch, storage=storage)
    assert stored(patch)["subrefs"] == [
        "sub1",
        "sub2",
        "sub2/a",
        "sub2/b",
        "sub3",
        "sub9/1",
        "sub9/2",
    ]


def test_empty_subrefs_are_not_stored() -> None:
    state = State.from_scratch().with_handlers([HANDLER], now=TS0)
    state = state.with_outcomes({SOME_ID: Outcome(final=True, subrefs=[])}, now=TS0)
    assert state[SOME_ID].as_record()["subrefs"] is None
    assert "subrefs" not in state[SOME_ID].as_in_storage()


@pytest.mark.parametrize("record", [None, {"retries": 5}])
def test_store_failure(storage: ProgressStorage, record: dict[str, Any] | None) -> None:
    body = progress_body(record) if record is not None else Body({})
    patch = Patch()
    state = State.from_storage(body=body, handlers=[HANDLER], storage=storage, now=TSB)
    state = state.with_handlers([HANDLER], now=TSB)
    outcome = Outcome(final=True, exception=Exception("some-error"))
    state = state.with_outcomes({SOME_ID: outcome}, now=TS0)
    state.store(body=body, patch=patch, storage=storage)
    result = stored(patch)
    assert result["success"] is False
    assert result["failure"] is True
    assert result["retries"] == (1 if record is None else 6)
    assert result["stopped"] == TS0_ISO
    assert result["message"] == "some-error"
    assert result.get("delayed") is None


@pytest.mark.parametrize("record", [None, {"retries": 5, "message": "old error"}])
def test_store_success(storage: ProgressStorage, record: dict[str, Any] | None) -> None:
    body = progress_body(record) if record is not None else Body({})
    patch = Patch()
    state = State.from_storage(body=body, handlers=[HANDLER], storage=storage, now=TSB)
    state = state.with_handlers([HANDLER], now=TSB)
    state = state.with_outcomes({SOME_ID: Outcome(final=True, result={"x": 1})}, now=TS0)
    state.store(body=body, patch=patch, storage=storage)
    result = stored(patch)
    assert result["success"] is True
    assert result["failure"] is False
    assert result["retries"] == (1 if record is None else 6)
    assert result["stopped"] == TS0_ISO
    assert result.get("message") is None


def test_stopped_time_is_kept_once_set() -> None:
    state = State.from_scratch().with_handlers([HANDLER], now=TSB)
    state = state.with_outcomes({SOME_ID: Outcome(final=True)}, now=TS0)
    state = state.with_outcomes({SOME_ID: Outcome(final=True)}, now=TS1)
    assert state[SOME_ID].stopped == TS0
    assert state[SOME_ID].retries == 2


def test_unchanged_records_are_not_stored_again() -> None:
    storage = AnnotationsProgressStorage()
    patch = Patch()
    state = State.from_scratch().with_purpose(Reason.CREATE).with_handlers([HANDLER], now=TS0)
    state.store(body=Body({}), patch=patch, storage=storage)
    body = Body({"metadata": {"annotations": patch["metadata"]["annotations"]}})

    again = Patch()
    state = State.from_storage(body=body, handlers=[HANDLER], storage=storage, now=TS1)
    state = state.with_purpose(Reason.CREATE).with_handlers([HANDLER], now=TS1)
    state.store(body=body, patch=again, storage=storage)
    assert not again


def test_store_flushes_the_storage() -> None:
    flushes: list[int] = []

    class Recording(StatusProgressStorage):
        def flush(self) -> None:
            flushes.append(1)

    state = State.from_scratch().with_handlers([HANDLER], now=TS0)
    state.store(body=Body({}), patch=Patch(), storage=Recording())
    state.purge(body=Body({}), patch=Patch(), storage=Recording(), handlers=[])
    assert flushes == [1, 1]


# ------------------------------------------------------------------ purging


def test_purge_when_in_body(storage: ProgressStorage) -> None:
    body = progress_body({"retries": 5})
    patch = Patch()
    state = State.from_storage(body=body, handlers=[HANDLER], storage=storage)
    state.purge(body=body, patch=patch, storage=storage, handlers=[HANDLER])
    assert patch == {"status": {"kopf": {"progress": {"some-id": None}}}}


def test_purge_when_nowhere(storage: ProgressStorage) -> None:
    patch = Patch()
    state = State.from_storage(body=Body({}), handlers=[HANDLER], storage=storage)
    state.purge(body=Body({}), patch=patch, storage=storage, handlers=[HANDLER])
    assert not patch


def test_purge_when_only_in_patch() -> None:
    storage = StatusProgressStorage()
    patch = Patch({"status": {"kopf": {"progress": {"some-id": {"retries": 5}}}}})
    state = State.from_storage(body=Body({}), handlers=[HANDLER], storage=storage)
    state.purge(body=Body({}), patch=patch, storage=storage, handlers=[HANDLER])
    assert not patch


def test_purge_when_known_at_restoration_only(storage: ProgressStorage) -> None:
    body = progress_body({"retries": 5})
    patch = Patch()
    state = State.from_storage(body=body, handlers=[HANDLER], storage=storage)
    state.purge(body=body, patch=patch, storage=storage, handlers=[])
    assert patch == {"status": {"kopf": {"progress": {"some-id": None}}}}


def test_purge_when_known_at_purge_only(storage: ProgressStorage) -> None:
    body = progress_body({"retries": 5})
    patch = Patch()
    state = State.from_storage(body=Body({}), handlers=[HANDLER], storage=storage)
    state.purge(body=body, patch=patch, storage=storage, handlers=[HANDLER])
    assert patch == {"status": {"kopf": {"progress": {"some-id": None}}}}


def test_purge_leaves_other_handlers_alone(storage: ProgressStorage) -> None:
    body = progress_body({"retries": 5}, **{"other-operator-fn": {"retries": 1}})
    patch = Patch()
    state = State.from_storage(body=body, handlers=[HANDLER], storage=storage)
    state.purge(body=body, patch=patch, storage=storage, handlers=[HANDLER])
    assert patch == {"status": {"kopf": {"progress": {"some-id": None}}}}


def test_purge_sub_handlers_to_any_depth(storage: ProgressStorage) -> None:
    others: dict[str, dict[str, Any]] = {
        "some-id/a": {"success": True},
        "some-id/b": {"success": True, "subrefs": ["some-id/b/x"]},
        "some-id/b/x": {"subrefs": ["some-id/b/x/y"]},
        "some-id/b/x/y": {"success": True},
        "unrelated": {"success": True},
    }
    body = progress_body({"subrefs": ["some-id/a", "some-id/b"]}, **others)
    patch = Patch()
    state = State.from_storage(body=body, handlers=[HANDLER], storage=storage)
    state.purge(body=body, patch=patch, storage=storage, handlers=[HANDLER])
    assert patch == {
        "status": {
            "kopf": {
                "progress": {
                    "some-id": None,
                    "some-id/a": None,
                    "some-id/b": None,
                    "some-id/b/x": None,
                    "some-id/b/x/y": None,
                }
            }
        }
    }


def test_purge_survives_cyclic_subrefs() -> None:
    storage = StatusProgressStorage()
    body = progress_body({"subrefs": ["a"]}, a={"subrefs": ["some-id", "a"]})
    patch = Patch()
    state = State.from_storage(body=body, handlers=[HANDLER], storage=storage)
    state.purge(body=body, patch=patch, storage=storage, handlers=[HANDLER])
    assert patch == {"status": {"kopf": {"progress": {"some-id": None, "a": None}}}}


# ------------------------------------------------------------------ acceptance: on-cluster records


T0 = datetime.datetime(2020, 1, 1, tzinfo=UTC)


def test_temporary_error_delay_is_stored_with_microseconds() -> None:
    # As Kopf records it: TemporaryError(delay=296.789) at 2020-01-01T00:00:00.
    storage = SmartProgressStorage()
    patch = Patch()
    state = State.from_scratch().with_purpose(Reason.CREATE).with_handlers([h("fn")], now=T0)
    outcome = Outcome(final=False, delay=296.789, exception=Exception("Not ready yet."))
    state = state.with_outcomes({HandlerId("fn"): outcome}, now=T0)
    state.store(body=Body({}), patch=patch, storage=storage)
    assert patch == {
        "metadata": {
            "annotations": {
                "kopf.zalando.org/fn": (
                    '{"started":"2020-01-01T00:00:00.000000+00:00",'
                    '"delayed":"2020-01-01T00:04:56.789000+00:00",'
                    '"purpose":"create","retries":1,"success":false,"failure":false,'
                    '"message":"Not ready yet."}'
                )
            }
        }
    }
    assert state.delay(T0) == pytest.approx(296.789)
    assert state.delay(T0 + datetime.timedelta(seconds=300)) == 0.0


def test_multistep_progress_then_purge() -> None:
    # As in Kopf, asap runs one handler per cycle; the other gets a fresh record.
    storage = SmartProgressStorage()
    handlers = [h("fn1"), h("fn2")]
    t1 = T0 + datetime.timedelta(seconds=1)

    # Cycle 1: fn1 succeeds; fn2 is not run yet.
    patch1 = Patch()
    state = State.from_storage(body=Body({}), handlers=handlers, storage=storage, now=T0)
    state = state.with_purpose(Reason.CREATE).with_handlers(handlers, now=T0)
    state = state.with_outcomes({HandlerId("fn1"): Outcome(final=True)}, now=T0)
    state.store(body=Body({}), patch=patch1, storage=storage)
    assert not state.done
    assert patch1 == {
        "metadata": {
            "annotations": {
                "kopf.zalando.org/fn1": (
                    '{"started":"2020-01-01T00:00:00.000000+00:00",'
                    '"stopped":"2020-01-01T00:00:00.000000+00:00",'
                    '"purpose":"create","retries":1,"success":true,"failure":false}'
                ),
                "kopf.zalando.org/fn2": (
                    '{"started":"2020-01-01T00:00:00.000000+00:00",'
                    '"purpose":"create","retries":0,"success":false,"failure":false}'
                ),
            }
        }
    }

    # Cycle 2: the object comes back with the records; fn2 succeeds; all is purged.
    body = Body({"metadata": {"annotations": dict(patch1["metadata"]["annotations"])}})
    patch2 = Patch()
    state = State.from_storage(body=body, handlers=handlers, storage=storage, now=t1)
    state = state.with_purpose(Reason.CREATE).with_handlers(handlers, now=t1)
    assert state[HandlerId("fn1")].finished
    assert state[HandlerId("fn2")].awakened(t1)
    state = state.with_outcomes({HandlerId("fn2"): Outcome(final=True)}, now=t1)
    state.store(body=body, patch=patch2, storage=storage)
    assert patch2 == {
        "metadata": {
            "annotations": {
                "kopf.zalando.org/fn2": (
                    '{"started":"2020-01-01T00:00:00.000000+00:00",'
                    '"stopped":"2020-01-01T00:00:01.000000+00:00",'
                    '"purpose":"create","retries":1,"success":true,"failure":false}'
                ),
            }
        }
    }
    assert state.done
    assert state.counts == StateCounters(success=2, failure=0, running=0)
    state.purge(body=body, patch=patch2, storage=storage, handlers=handlers)
    assert patch2 == {
        "metadata": {"annotations": {"kopf.zalando.org/fn1": None, "kopf.zalando.org/fn2": None}}
    }


def test_records_written_by_kopf_are_read_back_identically() -> None:
    # A record exactly as Kopf 1.44 writes it: reading and re-storing changes nothing.
    record = (
        '{"started":"2026-03-01T10:00:00.123456+00:00","delayed":"2026-03-01T10:01:00.123456+00:00",'
        '"purpose":"create","retries":1,"success":false,"failure":false,"message":"error text",'
        '"subrefs":["create_fn/item1","create_fn/item2"]}'
    )
    body = Body({"metadata": {"annotations": {"kopf.zalando.org/create_fn": record}}})
    storage = SmartProgressStorage()
    state = State.from_storage(body=body, handlers=[h("create_fn")], storage=storage)
    handler_state = state[HandlerId("create_fn")]
    assert handler_state.as_in_storage() == json.loads(record)
    assert not handler_state.changed
    patch = Patch()
    state.with_purpose(Reason.CREATE).with_handlers([h("create_fn")], now=TS0).store(
        body=body, patch=patch, storage=storage
    )
    assert not patch


def test_handler_state_from_legacy_naive_timestamps() -> None:
    state = HandlerState.from_storage({"started": "2020-02-14T16:58:25.396364", "retries": 1})
    assert state.started == datetime.datetime(2020, 2, 14, 16, 58, 25, 396364, tzinfo=UTC)
    assert state.as_record()["started"] == "2020-02-14T16:58:25.396364+00:00"
    assert state.changed  # the normalised form differs: it is re-stored when stored at all


# ------------------------------------------------------------------ results into the status


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        pytest.param(Outcome(final=True), {}, id="none"),
        pytest.param(
            Outcome(final=True, result="string"), {"status": {"some-id": "string"}}, id="str"
        ),
        pytest.param(
            Outcome(final=True, result=[1, 2]), {"status": {"some-id": [1, 2]}}, id="list"
        ),
        pytest.param(Outcome(final=True, result=0), {"status": {"some-id": 0}}, id="falsy"),
        pytest.param(
            Outcome(final=True, result={"field": "value"}),
            {"status": {"some-id": {"field": "value"}}},
            id="dict",
        ),
        pytest.param(Outcome(final=True, result="x", exception=Exception("e")), {}, id="failed"),
        pytest.param(
            Outcome(final=False, result={"partial": 1}),
            {"status": {"some-id": {"partial": 1}}},
            id="not-final",
        ),
    ],
)
def test_results_delivered_to_the_status(outcome: Outcome, expected: dict[str, Any]) -> None:
    patch = Patch()
    deliver_results(outcomes={SOME_ID: outcome}, patch=patch)
    assert patch == expected


def test_dict_results_are_merged_and_copied() -> None:
    result = {"b": {"deep": 1}}
    patch = Patch({"status": {"some-id": {"a": 1}, "other": 2}})
    deliver_results(outcomes={SOME_ID: Outcome(final=True, result=result)}, patch=patch)
    assert patch == {"status": {"some-id": {"a": 1, "b": {"deep": 1}}, "other": 2}}
    assert patch["status"]["some-id"]["b"] is not result["b"]
