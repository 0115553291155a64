"""The progress of handlers of one object through one change, as a pure state machine.

One change (a creation, an update, …) is handled over possibly many processing cycles. At the
start of a cycle the state is read from the progress storage; the lifecycle picks some of the
handlers that are due; their outcomes are merged in; the changed records are written back into
the cycle's patch. When every handler of the change has finished, all records are purged.

Every state is immutable: the ``with_*`` methods return new states. Nothing here reads a clock:
the caller passes ``now`` (an aware UTC datetime), so that tests and the runtime control time.

``active`` handler states are those of the current change's handlers: only they decide whether
the change is ``done`` and how long to sleep. Passive ones are records found in the storage for
other handlers of the object (e.g. an update interrupted by a deletion); they are counted for
the log (``extras``) and purged together with the active ones.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any, NamedTuple, Protocol

from trioperator._engine.bodies import Body
from trioperator._engine.conventions import copy_json
from trioperator._engine.ids import HandlerId
from trioperator._engine.patches import Patch
from trioperator._engine.progress import ProgressRecord, ProgressStorage

__all__ = [
    "HandlerLike",
    "HandlerOutcome",
    "HandlerState",
    "Outcome",
    "State",
    "StateCounters",
    "deliver_results",
    "format_iso8601",
    "parse_iso8601",
]


class HandlerLike(Protocol):
    """What the state needs from a handler: its id."""

    @property
    def id(self) -> HandlerId: ...


@dataclasses.dataclass(frozen=True)
class HandlerOutcome:
    """What one invocation of a handler ended with.

    ``final`` means no more attempts (success if ``exception`` is ``None``, failure otherwise).
    A non-final outcome is retried after ``delay`` seconds (``None``: at once, in the next cycle).
    ``subrefs`` are the ids of the sub-handlers it scheduled, to purge their records later.
    """

    final: bool
    delay: float | None = None
    result: Any = None
    exception: BaseException | None = None
    subrefs: Collection[HandlerId] = ()
    ignored_error: BaseException | None = None
    """The error the handler raised when its ``errors`` mode ignores errors: the outcome is a
    success for the progress, but the error still counts in the metrics."""


Outcome = HandlerOutcome


# ------------------------------------------------------------------ timestamps


def format_iso8601(value: datetime.datetime) -> str:
    """ISO-8601 with microseconds always present; ``+00:00`` for aware UTC (as Kopf writes)."""
    return value.isoformat(timespec="microseconds")


def parse_iso8601(value: str) -> datetime.datetime:
    """Parse what Kopf (any version) or a human wrote: ``Z``, offsets, or naive (taken as UTC).

    An offset is kept as it is (so the value is written back unchanged); naive values, which
    older Kopf versions wrote, are UTC by convention.
    """
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = f"{text[:-1]}+00:00"
    parsed = datetime.datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return parsed


def _parse_optional(value: Any) -> datetime.datetime | None:
    return parse_iso8601(value) if isinstance(value, str) and value else None


def _format_optional(value: datetime.datetime | None) -> str | None:
    return None if value is None else format_iso8601(value)


# ------------------------------------------------------------------ one handler


@dataclasses.dataclass(frozen=True)
class HandlerState:
    """The progress of one handler within one change (see the module docstring on ``active``)."""

    active: bool = False
    started: datetime.datetime | None = None  # None: the record had no start time
    stopped: datetime.datetime | None = None  # None: not finished yet
    delayed: datetime.datetime | None = None  # None: due at once (or finished)
    purpose: str | None = None  # None: unknown (records of old versions), matches any change
    retries: int = 0
    success: bool = False
    failure: bool = False
    message: str | None = None
    subrefs: tuple[HandlerId, ...] = ()
    origin: ProgressRecord | None = dataclasses.field(default=None, compare=False, repr=False)
    """The record as read from the storage, to store only what has changed."""

    @classmethod
    def from_scratch(cls, *, purpose: str | None = None, now: datetime.datetime) -> HandlerState:
        return cls(active=True, started=now, purpose=_purpose(purpose))

    @classmethod
    def from_storage(
        cls, record: ProgressRecord, *, now: datetime.datetime | None = None
    ) -> HandlerState:
        """A passive state from a stored record; a missing start time becomes ``now`` if given."""
        return cls(
            active=False,
            started=_parse_optional(record.get("started")) or now,
            stopped=_parse_optional(record.get("stopped")),
            delayed=_parse_optional(record.get("delayed")),
            purpose=_purpose(record.get("purpose") or None),
            retries=int(record.get("retries") or 0),
            success=bool(record.get("success")),
            failure=bool(record.get("failure")),
            message=record.get("message"),
            subrefs=tuple(HandlerId(ref) for ref in record.get("subrefs") or ()),
            origin=record,
        )

    def as_record(self) -> ProgressRecord:
        """The full record to store: every field, ``None`` where unset (dropped unless verbose)."""
        return ProgressRecord(
            started=_format_optional(self.started),
            stopped=_format_optional(self.stopped),
            delayed=_format_optional(self.delayed),
            purpose=self.purpose,
            retries=self.retries,
            success=self.success,
            failure=self.failure,
            message=self.message,
            subrefs=sorted(self.subrefs) if self.subrefs else None,
        )

    def as_in_storage(self) -> dict[str, Any]:
        """The record as it ends up on the object (no ``None`` fields), to compare with origin."""
        return {key: value for key, value in self.as_record().items() if value is not None}

    @property
    def changed(self) -> bool:
        """Whether the record differs from what was read (new states always differ)."""
        return self.origin is None or self.as_in_storage() != dict(self.origin)

    def as_active(self) -> HandlerState:
        return dataclasses.replace(self, active=True)

    def with_purpose(self, purpose: str | None) -> HandlerState:
        return dataclasses.replace(self, purpose=_purpose(purpose))

    def with_outcome(self, outcome: HandlerOutcome, *, now: datetime.datetime) -> HandlerState:
        """The state after one more attempt that ended with ``outcome`` at ``now``."""
        delayed = None
        if outcome.delay is not None:
            delayed = now + datetime.timedelta(seconds=outcome.delay)
        # Constructed directly, not by ``dataclasses.replace()``: this runs after every call of
        # every handler (each run of every timer), and ``replace()`` is several times slower.
        return HandlerState(
            active=self.active,
            started=self.started or now,
            stopped=self.stopped or (now if outcome.final else None),
            delayed=delayed,
            purpose=self.purpose,
            retries=self.retries + 1,
            success=outcome.final and outcome.exception is None,
            failure=outcome.final and outcome.exception is not None,
            message=None if outcome.exception is None else str(outcome.exception),
            subrefs=(
                tuple(sorted(set(self.subrefs) | set(outcome.subrefs)))
                if self.subrefs or outcome.subrefs
                else ()
            ),
            origin=self.origin,
        )

    @property
    def finished(self) -> bool:
        """Succeeded or failed for good: it will not run again in this change."""
        return self.success or self.failure

    done = finished

    def sleeping(self, now: datetime.datetime) -> bool:
        """Not finished, and its next attempt is later than ``now``."""
        return not self.finished and self.delayed is not None and self.delayed > now

    def awakened(self, now: datetime.datetime) -> bool:
        """Not finished, and due at ``now`` (never delayed, or the delay has passed)."""
        return not self.finished and not self.sleeping(now)

    def runtime(self, now: datetime.datetime) -> datetime.timedelta:
        """How long since the first attempt (zero if the start is unknown)."""
        return now - (self.started or now)

    def delay(self, now: datetime.datetime) -> float:
        """Seconds until the next attempt is due (0 if due already)."""
        if self.delayed is None:
            return 0.0
        return max(0.0, (self.delayed - now).total_seconds())


def _purpose(purpose: Any) -> str | None:
    # Reason is a str enum; keep plain strings so that states compare and serialise uniformly.
    return None if purpose is None else str(purpose)


# ------------------------------------------------------------------ all handlers of an object


class StateCounters(NamedTuple):
    success: int
    failure: int
    running: int


class State(Mapping[HandlerId, HandlerState]):
    """The handler states of one object for one change (``purpose``), by handler id."""

    def __init__(
        self, states: Mapping[HandlerId, HandlerState] | None = None, *, purpose: str | None = None
    ) -> None:
        self._states: dict[HandlerId, HandlerState] = dict(states or {})
        self.purpose = _purpose(purpose)

    @classmethod
    def from_scratch(cls) -> State:
        return cls()

    @classmethod
    def from_storage(
        cls,
        *,
        body: Body,
        storage: ProgressStorage,
        handlers: Iterable[HandlerLike],
        now: datetime.datetime | None = None,
        on_corrupt: Callable[[HandlerId, Exception], None] | None = None,
    ) -> State:
        """The (passive) states of those ``handlers`` that have a record on the object.

        ``now`` stands in for a missing start time of a record (as a fresh start). A record
        that cannot be read (invalid JSON, fields of the wrong types) is taken as absent: the
        handler runs as if for the first time (at least once, never lost), and its next record
        replaces the corrupt one; ``on_corrupt`` is told which one and why, to log it.
        """
        states: dict[HandlerId, HandlerState] = {}
        for handler_id in dict.fromkeys(handler.id for handler in handlers):
            try:
                record = storage.fetch(key=handler_id, body=body)
                if record is not None:
                    states[handler_id] = HandlerState.from_storage(record, now=now)
            except (ValueError, TypeError, AttributeError) as exc:
                if on_corrupt is not None:
                    on_corrupt(handler_id, exc)
        return cls(states)

    def with_purpose(self, purpose: str | None, handlers: Iterable[HandlerLike] = ()) -> State:
        """The same states for the change ``purpose``; the given handlers' records re-purposed.

        Handlers added later by ``with_handlers`` get this purpose; existing records keep theirs
        unless listed here.
        """
        states = dict(self._states)
        for handler in handlers:
            if handler.id in states:
                states[handler.id] = states[handler.id].with_purpose(purpose)
        return type(self)(states, purpose=purpose)

    def with_handlers(self, handlers: Iterable[HandlerLike], *, now: datetime.datetime) -> State:
        """Make the given handlers active: existing states as they are, new ones started ``now``."""
        states = dict(self._states)
        for handler in handlers:
            existing = states.get(handler.id)
            if existing is None:
                states[handler.id] = HandlerState.from_scratch(purpose=self.purpose, now=now)
            else:
                states[handler.id] = existing.as_active()
        return type(self)(states, purpose=self.purpose)

    def with_outcomes(
        self, outcomes: Mapping[HandlerId, HandlerOutcome], *, now: datetime.datetime
    ) -> State:
        unknown = [handler_id for handler_id in outcomes if handler_id not in self._states]
        if unknown:
            raise RuntimeError(f"Unexpected outcomes for unknown handlers: {unknown!r}")
        states = {
            handler_id: (
                state
                if handler_id not in outcomes
                else state.with_outcome(outcomes[handler_id], now=now)
            )
            for handler_id, state in self._states.items()
        }
        return type(self)(states, purpose=self.purpose)

    def without_successes(self) -> State:
        """Only the states still running or failed (e.g. to report what is left)."""
        states = {hid: state for hid, state in self._states.items() if not state.success}
        return type(self)(states, purpose=self.purpose)

    def store(self, body: Body, patch: Patch, storage: ProgressStorage) -> None:
        """Write the records that differ from what was read (all new ones) into the patch."""
        for handler_id, state in self._states.items():
            if state.changed:
                storage.store(key=handler_id, record=state.as_record(), body=body, patch=patch)
        storage.flush()

    def purge(
        self,
        body: Body,
        patch: Patch,
        storage: ProgressStorage,
        handlers: Iterable[HandlerLike],
    ) -> None:
        """Remove the records of ``handlers``, of all known states, and of their sub-handlers.

        Records of other handlers (e.g. of another operator sharing the prefix) stay. The
        sub-handlers' own records are looked up to find their sub-handlers too, to any depth.
        """
        pending: list[HandlerId] = [handler.id for handler in handlers]
        pending.extend(self._states)
        for state in self._states.values():
            pending.extend(state.subrefs)

        purged: set[HandlerId] = set()
        while pending:
            handler_id = pending.pop(0)
            if handler_id in purged:
                continue
            purged.add(handler_id)
            if handler_id not in self._states:
                # A sub-handler (or a handler without a loaded state): its record knows more.
                record = storage.fetch(key=handler_id, body=body)
                subrefs = (record or {}).get("subrefs") or ()
                pending.extend(HandlerId(ref) for ref in subrefs)
            storage.purge(key=handler_id, body=body, patch=patch)
        storage.flush()

    def __len__(self) -> int:
        return len(self._states)

    def __iter__(self) -> Iterator[HandlerId]:
        return iter(self._states)

    def __getitem__(self, key: HandlerId) -> HandlerState:
        return self._states[key]

    def __repr__(self) -> str:
        return f"State({self._states!r}, purpose={self.purpose!r})"

    @property
    def done(self) -> bool:
        """All active handlers have finished (trivially true without handlers)."""
        return all(state.finished for state in self._states.values() if state.active)

    @property
    def counts(self) -> StateCounters:
        """Successes, failures and unfinished ones of this change (records of no purpose too)."""
        relevant = [
            state
            for state in self._states.values()
            if self.purpose is None or state.purpose is None or state.purpose == self.purpose
        ]
        return _count(relevant)

    @property
    def extras(self) -> dict[str, StateCounters]:
        """Counters of records left by other changes, by their purpose.

        These are reported as "<Title> is superseded by <title>: N succeeded; N failed; N left
        to the moment." and purged with the rest.
        """
        by_purpose: dict[str, list[HandlerState]] = {}
        for state in self._states.values():
            if state.purpose is not None and state.purpose != self.purpose:
                by_purpose.setdefault(state.purpose, []).append(state)
        return {purpose: _count(states) for purpose, states in by_purpose.items()}

    def delays(self, now: datetime.datetime) -> list[float]:
        """Seconds until each unfinished active handler is due (0 for those due already)."""
        return [
            state.delay(now)
            for state in self._states.values()
            if state.active and not state.finished
        ]

    def delay(self, now: datetime.datetime) -> float | None:
        """The shortest of ``delays(now)``; ``None`` if nothing is left to run."""
        delays = self.delays(now)
        return min(delays) if delays else None


def _count(states: Iterable[HandlerState]) -> StateCounters:
    success = failure = running = 0
    for state in states:
        success += state.success
        failure += state.failure
        running += not state.finished
    return StateCounters(success=success, failure=failure, running=running)


def deliver_results(*, outcomes: Mapping[HandlerId, HandlerOutcome], patch: Patch) -> None:
    """Put the handlers' return values into ``status.<handler-id>`` of the patch (as Kopf does).

    Dicts are merged into what is there already (so several handlers, or a handler and its own
    ``patch.status[...]`` edits, can fill one stanza); other values replace it. Failed handlers
    and ``None`` results deliver nothing.
    """
    for handler_id, outcome in outcomes.items():
        if outcome.exception is not None or outcome.result is None:
            continue
        status = patch.setdefault("status", {})
        if isinstance(outcome.result, Mapping):
            existing = status.get(handler_id)
            if not isinstance(existing, dict):
                existing = status[handler_id] = {}
            existing.update(copy_json(dict(outcome.result)))
        else:
            status[handler_id] = copy_json(outcome.result)
