"""Parked workers: revived by the next event, retired when their idle timeout has passed."""

from __future__ import annotations

from typing import Any

import trio
from trioperator._runtime.objects.mailboxes import Backlog, IdleWorkers, Mailbox


def event(version: str) -> Any:
    return {"type": "MODIFIED", "object": {"metadata": {"resourceVersion": version}}}


class Calls:
    def __init__(self) -> None:
        self.log: list[str] = []

    def revive(self, name: str) -> Any:
        return lambda: self.log.append(f"revive {name}")

    def retire(self, name: str) -> Any:
        def retire() -> bool:
            self.log.append(f"retire {name}")
            return True

        return retire

    def retire_at(self, retired_at: dict[str, float]) -> Any:
        """Retirements that note their time into ``retired_at``."""

        def retirement(name: str) -> Any:
            def retire() -> bool:
                retired_at[name] = trio.current_time()
                return True

            return retire

        return retirement


def test_a_parked_mailbox_is_revived_once_and_not_retired_then() -> None:
    idle, calls = IdleWorkers(), Calls()
    mailbox = Mailbox(Backlog(), keep_all=False)
    idle.park(mailbox, 10.0, calls.revive("a"), calls.retire("a"))
    assert mailbox.parked
    assert len(idle) == 1
    IdleWorkers.unpark(mailbox)
    IdleWorkers.unpark(mailbox)  # not parked any more: nothing to start
    assert not mailbox.parked
    assert idle.retire_due(20.0) == 0
    assert calls.log == ["revive a"]


def test_parked_mailboxes_retire_in_the_order_of_their_deadlines() -> None:
    idle, calls = IdleWorkers(), Calls()
    boxes = {name: Mailbox(Backlog(), keep_all=False) for name in "abc"}
    idle.park(boxes["a"], 5.0, calls.revive("a"), calls.retire("a"))
    idle.park(boxes["b"], 3.0, calls.revive("b"), calls.retire("b"))
    idle.park(boxes["c"], 9.0, calls.revive("c"), calls.retire("c"))
    assert idle.retire_due(2.9) == 0
    assert idle.retire_due(5.0) == 2
    assert calls.log == ["retire b", "retire a"]
    assert not boxes["a"].parked
    assert boxes["c"].parked
    assert len(idle) == 1


def test_a_revived_and_parked_again_mailbox_retires_at_its_new_deadline() -> None:
    idle, calls = IdleWorkers(), Calls()
    mailbox = Mailbox(Backlog(), keep_all=False)
    idle.park(mailbox, 3.0, calls.revive("a"), calls.retire("a"))
    IdleWorkers.unpark(mailbox)
    idle.park(mailbox, 8.0, calls.revive("a"), calls.retire("a"))
    assert idle.retire_due(3.0) == 0  # the old parking is over
    assert idle.retire_due(8.0) == 1
    assert calls.log == ["revive a", "retire a"]


def test_a_discarded_parked_mailbox_never_comes_back() -> None:
    idle, calls = IdleWorkers(), Calls()
    mailbox = Mailbox(Backlog(), keep_all=False)
    idle.park(mailbox, 3.0, calls.revive("a"), calls.retire("a"))
    mailbox.discard()
    IdleWorkers.unpark(mailbox)
    assert idle.retire_due(3.0) == 0
    assert calls.log == []


async def test_the_retirer_wakes_up_for_an_earlier_deadline(autojump_clock: Any) -> None:
    idle, calls = IdleWorkers(), Calls()
    retired_at: dict[str, float] = {}
    retire = calls.retire_at(retired_at)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(idle.run)
        await trio.sleep(1)
        idle.park(Mailbox(Backlog(), keep_all=False), 100.0, calls.revive("a"), retire("late"))
        await trio.sleep(1)
        idle.park(Mailbox(Backlog(), keep_all=False), 5.0, calls.revive("b"), retire("early"))
        await trio.sleep(200)
        nursery.cancel_scope.cancel()
    assert retired_at == {"early": 5.0, "late": 100.0}


async def test_retirements_due_within_the_slack_share_one_wake_up(autojump_clock: Any) -> None:
    idle, calls = IdleWorkers(), Calls()
    retired_at: dict[str, float] = {}
    retire = calls.retire_at(retired_at)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(idle.run)
        for name, until in (("a", 5.0), ("b", 5.2), ("c", 5.4), ("d", 7.0)):
            idle.park(
                Mailbox(Backlog(), keep_all=False),
                until,
                calls.revive(name),
                retire(name),
                slack=0.5,
            )
        await trio.sleep(20)
        nursery.cancel_scope.cancel()
    # The first one's slack runs out at 5.5: everyone due by then goes at once; none early.
    assert retired_at == {"a": 5.5, "b": 5.5, "c": 5.5, "d": 7.5}


def test_a_parked_mailbox_absorbs_its_own_workers_echoes_only() -> None:
    idle, calls = IdleWorkers(), Calls()
    mailbox = Mailbox(Backlog(), keep_all=False)
    idle.park(mailbox, 10.0, calls.revive("a"), calls.retire("a"))
    mailbox.echo = "7"  # the worker's settling write; "6" was its status write before it
    deleted: Any = {"type": "DELETED", "object": {"metadata": {"resourceVersion": "7"}}}

    assert not mailbox.absorbs(event("8"), ("6",))  # someone else's state: for the worker
    assert not mailbox.absorbs(deleted, ("6",))
    assert mailbox.absorbs(event("6"), ("6",))  # the earlier write's echo comes first
    assert mailbox.echo == "7"
    assert mailbox.absorbs(event("7"), ("6",))
    assert mailbox.echo is None
    assert not mailbox.absorbs(event("7"), ("6",))  # once only
    assert mailbox.has_seen("6")
    assert mailbox.has_seen("7")
    assert len(mailbox) == 0
    assert mailbox.parked
    assert calls.log == []


def test_a_mailbox_with_queued_events_or_a_revived_worker_absorbs_nothing() -> None:
    idle, calls = IdleWorkers(), Calls()
    mailbox = Mailbox(Backlog(), keep_all=False)
    idle.park(mailbox, 10.0, calls.revive("a"), calls.retire("a"))
    mailbox.echo = "7"
    IdleWorkers.unpark(mailbox)
    assert mailbox.echo is None
    assert not mailbox.absorbs(event("7"), ())
    mailbox.echo = "7"
    mailbox.put(event("5"))
    assert not mailbox.absorbs(event("7"), ())
