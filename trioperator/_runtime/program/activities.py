"""Operator-level activities: startup, cleanup, login and probe handlers.

All handlers of an activity run (together) and are retried per their options until each is
finished; a final failure of any of them is an ``ActivityError`` naming the failed ones.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

import trio

from trioperator._engine.causes import BaseCause
from trioperator._engine.errors import ActivityError
from trioperator._engine.handlers import Activity, ActivityHandler
from trioperator._engine.ids import HandlerId
from trioperator._engine.lifecycles import all_at_once
from trioperator._engine.progression import HandlerOutcome, State
from trioperator._runtime.handling.execution import Execution, run_handlers
from trioperator._util.lognames import framework_logger


def activity_logger(activity: Activity) -> logging.Logger:
    """The logger of one activity's handlers, as Kopf names it (``kopf.activities.probe``);
    ``trioperator.activities.probe`` and ``trioperator.activities`` reach it too."""
    name = activity.value
    return framework_logger(f"kopf.activities.{name}", f"trioperator.activities.{name}")


# All of them at once, at import: the names exist (linked as _util/lognames.py says) whether or
# not the operator has handlers for the activity, as users may configure any of them.
_LOGGERS = {activity: activity_logger(activity) for activity in Activity}


@dataclasses.dataclass(frozen=True)
class ActivityCause(BaseCause):
    activity: Activity
    settings: Any

    def _own_kwargs(self) -> dict[str, Any]:
        return {**super()._own_kwargs(), "activity": self.activity, "settings": self.settings}


async def run_activity(
    handlers: list[ActivityHandler],
    *,
    activity: Activity,
    execution: Execution,
    settings: Any,
    memo: Any,
    indices: Mapping[str, Any] | None = None,
) -> dict[HandlerId, HandlerOutcome]:
    """Run the handlers until all are finished; return the outcomes of the last attempts."""
    logger = _LOGGERS[activity]
    cause = ActivityCause(
        logger=logger, memo=memo, indices=indices or {}, activity=activity, settings=settings
    )
    state = (
        State.from_scratch()
        .with_purpose(activity.value)
        .with_handlers(handlers, now=execution.now())
    )
    final: dict[HandlerId, HandlerOutcome] = {}
    while not state.done:
        outcomes = await run_handlers(
            handlers,
            cause=cause,
            state=state,
            execution=execution,
            logger=logger,
            lifecycle=all_at_once,
        )
        final.update(outcomes)
        state = state.with_outcomes(outcomes, now=execution.now())
        delay = state.delay(execution.now())
        if not state.done and delay:
            await trio.sleep(delay)
    failures = {hid: o.exception for hid, o in final.items() if o.exception is not None}
    if failures:
        names = ", ".join(repr(hid) for hid in failures)
        raise ActivityError(
            f"One or more {activity.value} handlers failed: {names}.",
            outcomes={str(hid): exc for hid, exc in failures.items()},
        )
    return final
