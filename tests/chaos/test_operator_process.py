"""The operator process itself dies: SIGKILLed mid-handler and restarted; SIGTERMed mid-burst."""

from __future__ import annotations

import time

from tests.chaos.conftest import Case

OBJECTS = 60


def test_operator_sigkilled_mid_handler_and_restarted(case: Case) -> None:
    case.handler_seconds = 0.3  # handlers are running whenever the kill comes
    case.start()
    restarted: list[float] = []

    def kill(step: int) -> None:
        if step == OBJECTS:
            # All created; killed once 15 have been handled: the others are in flight, many
            # of them between the write of their result and the write of their marks.
            case.wait_records(lambda r: r["event"] == "done" and r["handler"] == "create", 15)
        elif step in (75, 95):  # mid-updates, mid-deletions: while a handler is running
            case.wait_running()
        else:
            return
        case.kill_operator()
        case.start()
        restarted.append(time.monotonic())

    case.burst(OBJECTS, during=kill)
    done = case.wait_handled()
    # Each kill interrupted handlers: runs that started in a killed process and never ended.
    records = case.records()
    ended = {(r["pid"], r["handler"], r["name"]) for r in records if r["event"] == "done"}
    interrupted = [
        r
        for r in records
        if r["event"] == "start" and (r["pid"], r["handler"], r["name"]) not in ended
    ]
    assert {r["pid"] for r in interrupted} == case.killed
    # Results stored at a kill are never run again (checked in finish(), counted separately).
    assert sum(len(stored) for stored in case.stored_at_kill.values()) > 0
    case.wait_liveness(200)
    case.finish(
        f"operator SIGKILLed {len(case.killed)}x mid-handler, restarted",
        recovered_in=done - restarted[-1],
    )


def test_operator_sigtermed_during_a_burst(case: Case) -> None:
    case.handler_seconds = 0.3
    case.start()
    restarted: list[float] = []

    def terminate(step: int) -> None:
        if step == 40:
            assert case.stop() == 0, case.output()[-3000:]
            case.start()
            restarted.append(time.monotonic())

    case.burst(OBJECTS, during=terminate)
    done = case.wait_handled()
    case.finish(
        "operator SIGTERMed mid-burst (exit 0), restarted", recovered_in=done - restarted[0]
    )


def test_every_patch_of_one_object_rejected_with_422(case: Case) -> None:
    case.start()
    case.create("poison", 0, poison=True)
    started = time.monotonic()
    case.burst(OBJECTS)
    done = case.wait_handled(exclude=frozenset({"poison"}))
    # The poisoned object is never marked handled: its result cannot be stored, so it is
    # retried (throttled), and the 422 is logged; nobody else waits for it.
    assert case.unhandled() == ["poison: spec value 0 not handled (handled: None)"]
    assert (
        "/poison] Throttling for 1 seconds due to an unexpected error: APIUnprocessableEntity"
        in (case.output())
    )
    case.finish(
        "every status patch of 1 object rejected (422: invalid status), others served",
        recovered_in=done - started,
        expect_lost=1,
        expect_errors=True,
    )
