"""Running handlers once each and turning what happened into outcomes.

A handler's outcome is final (success, permanent failure, or an ignored error) or not final
(retry after a delay). Retries and timeouts are counted across cycles from the progress
records; "look-ahead" turns a temporary failure that could never be retried in time into a
final one right away. Sub-handlers (``trioperator.subhandler``/``register``/``execute``) run
inside their parent's invocation and keep their own progress records (``parent/child``).
"""

from __future__ import annotations

import contextvars
import dataclasses
import datetime
import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Protocol

import trio

from trioperator._engine.causes import BaseCause, ChangingCause, ResourceCause
from trioperator._engine.diffs import reduce, resolve
from trioperator._engine.errors import (
    ErrorsMode,
    HandlerChildrenRetry,
    HandlerRetriesError,
    HandlerTimeoutError,
    PermanentError,
    TemporaryError,
)
from trioperator._engine.handlers import (
    BaseHandler,
    ChangingHandler,
    ResourceHandler,
    build_subhandler,
)
from trioperator._engine.ids import HandlerId
from trioperator._engine.lifecycles import LifeCycleFn, get_default_lifecycle
from trioperator._engine.progression import HandlerOutcome, HandlerState, State, deliver_results
from trioperator._engine.registry import SubRegistry, collect_subhandlers
from trioperator._engine.settings import OperatorSettings
from trioperator._runtime.handling.asyncio_bridge import in_asyncio, run_trio_from_asyncio
from trioperator._runtime.handling.invocation import invoke
from trioperator._runtime.handling.loggers import Logger
from trioperator._runtime.support.metrics import OperatorMetrics


class OperatorParts(Protocol):
    """What an execution takes of the running operator (its ``OperatorContext``)."""

    @property
    def settings(self) -> OperatorSettings: ...
    @property
    def thread_limiter(self) -> trio.CapacityLimiter: ...
    @property
    def metrics(self) -> OperatorMetrics | None: ...
    def now(self) -> datetime.datetime: ...


@dataclasses.dataclass
class Execution:
    """What the handlers of one cycle share: the settings, the clock, the thread limiter."""

    now: Callable[[], datetime.datetime]
    default_backoff: float
    limiter: trio.CapacityLimiter
    progress_storage: Any = None
    lifecycle: LifeCycleFn | None = None
    abandon_threads: bool = False
    """On cancellation, let go of a sync handler's thread instead of waiting for it (daemons:
    the thread runs on until it returns; nothing else can stop a thread)."""
    metrics: OperatorMetrics | None = None
    """Where every handler run is counted and timed (``None``: nowhere)."""

    @classmethod
    def for_operator(
        cls, operator: OperatorParts, *, progress: bool = False, abandon_threads: bool = False
    ) -> Execution:
        """The execution of an operator's handlers: its clock, settings, threads and metrics.

        ``progress``: the handlers' progress is stored in the objects (resource-changing
        handlers), with ``settings.persistence.progress_storage``.
        """
        settings = operator.settings
        return cls(
            now=operator.now,
            default_backoff=settings.execution.default_backoff,
            limiter=operator.thread_limiter,
            progress_storage=settings.persistence.progress_storage if progress else None,
            abandon_threads=abandon_threads,
            metrics=operator.metrics,
        )


@dataclasses.dataclass
class _Invocation:
    """The context of a changing handler while it runs, for ``trioperator.execute()``."""

    execution: Execution
    cause: ChangingCause
    handler: ChangingHandler
    subrefs: set[HandlerId]
    ancestors: tuple[set[HandlerId], ...] = ()
    """The sub-refs of the handlers this one runs under: they learn of all descendants
    (as in Kopf), so that purging a parent purges every level even when the intermediate
    records were never stored (all finished in the same cycle)."""


_invocation_var: contextvars.ContextVar[_Invocation] = contextvars.ContextVar(
    "trioperator.invocation"
)

handler_body: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar(
    "trioperator.handler_body", default=None
)
"""The body of the object whose handler (changing, event, daemon, timer, index) runs now.

The hierarchies kit reads it so that ``adopt(child)`` finds its owner without being told, as
in Kopf. trio copies the context into worker threads, so sync handlers see it too."""


async def run_handlers(
    handlers: Sequence[BaseHandler],
    *,
    cause: BaseCause,
    state: State,
    execution: Execution,
    logger: Logger,
    lifecycle: LifeCycleFn | None = None,
) -> dict[HandlerId, HandlerOutcome]:
    """Run the handlers that are due now, as many as the lifecycle selects, one after another."""
    now = execution.now()
    due = [
        handler
        for handler in handlers
        if handler.id in state
        and not state[handler.id].finished
        and state[handler.id].awakened(now)
    ]
    chooser = lifecycle or execution.lifecycle or get_default_lifecycle()
    selected = chooser(due, state=state, **_lifecycle_kwargs(cause)) if due else []
    outcomes: dict[HandlerId, HandlerOutcome] = {}
    for handler in selected:
        outcomes[handler.id] = await run_handler_once(
            handler,
            cause=cause,
            handler_state=state[handler.id],
            execution=execution,
            logger=logger,
        )
    return outcomes


def _lifecycle_kwargs(cause: BaseCause) -> dict[str, Any]:
    kwargs = cause.kwargs
    return {key: kwargs[key] for key in ("body", "patch", "logger", "memo") if key in kwargs}


def handler_kwargs(
    handler: BaseHandler,
    *,
    cause: BaseCause,
    handler_state: HandlerState,
    now: datetime.datetime,
) -> dict[str, Any]:
    kwargs = dict(cause.kwargs)  # some causes keep theirs (daemons'): never write into it
    if isinstance(handler, ResourceHandler) and handler.field and isinstance(cause, ChangingCause):
        kwargs["old"] = resolve(cause.old, handler.field)
        kwargs["new"] = resolve(cause.new, handler.field)
        kwargs["diff"] = reduce(cause.diff, handler.field)
    kwargs.update(
        retry=handler_state.retries or 0,
        started=handler_state.started or now,
        runtime=handler_state.runtime(now),
        param=handler.param,
    )
    # Indices (and any explicitly provided extras) win over framework kwargs of the same name.
    indices = cause.indices
    if indices:
        kwargs.update(indices)
    return kwargs


async def run_handler_once(
    handler: BaseHandler,
    *,
    cause: BaseCause,
    handler_state: HandlerState,
    execution: Execution,
    logger: Logger,
    default_errors: ErrorsMode = ErrorsMode.TEMPORARY,
    now: datetime.datetime | None = None,
) -> HandlerOutcome:
    """Invoke one handler once and classify what happened (and count it in the metrics).

    ``now``: the wall-clock time of the call, if the caller has just read it (``None``: read).
    """
    started = trio.current_time()
    outcome = await _run_handler_once(
        handler,
        cause=cause,
        handler_state=handler_state,
        execution=execution,
        logger=logger,
        default_errors=default_errors,
        now=execution.now() if now is None else now,
    )
    metrics = execution.metrics
    if metrics is not None:
        metrics.handler_ran(
            handler.id,
            cause.resource if isinstance(cause, ResourceCause) else None,
            outcome,
            trio.current_time() - started,
            retry=bool(handler_state.retries),
        )
    return outcome


async def _run_handler_once(
    handler: BaseHandler,
    *,
    cause: BaseCause,
    handler_state: HandlerState,
    execution: Execution,
    logger: Logger,
    default_errors: ErrorsMode,
    now: datetime.datetime,
) -> HandlerOutcome:
    name = str(handler)
    errors = handler.errors or default_errors
    backoff = handler.backoff if handler.backoff is not None else execution.default_backoff
    retries_done = handler_state.retries or 0
    runtime = handler_state.runtime(now).total_seconds()

    # Limits reached in earlier attempts: a final failure without invoking it again.
    # (The log lines here and below are Kopf's, word for word: people grep for them.)
    if handler.timeout is not None and runtime >= handler.timeout:
        elapsed = datetime.timedelta(seconds=runtime)
        timeout_exc = HandlerTimeoutError(f"{name} has timed out after {elapsed}.")
        logger.error(str(timeout_exc))
        return HandlerOutcome(final=True, exception=timeout_exc)
    if handler.retries is not None and retries_done >= handler.retries:
        retries_exc = HandlerRetriesError(f"{name} has exceeded {retries_done} retries.")
        logger.error(str(retries_exc))
        return HandlerOutcome(final=True, exception=retries_exc)

    kwargs = handler_kwargs(handler, cause=cause, handler_state=handler_state, now=now)
    subrefs: set[HandlerId] = set()
    if logger.isEnabledFor(logging.DEBUG):  # a line per call of every timer: not made for nothing
        logger.debug(f"{name} is invoked.")
    body_token = handler_body.set(cause.body if isinstance(cause, ResourceCause) else None)
    try:
        result = await _invoke_with_subhandlers(
            handler,
            kwargs=kwargs,
            cause=cause,
            execution=execution,
            subrefs=subrefs,
            time_left=None if handler.timeout is None else handler.timeout - runtime,
        )
    except trio.Cancelled:
        # Said as Kopf says it (people grep for it): a stopped daemon, an exiting operator.
        logger.warning(f"{name} is cancelled. Will escalate.")
        raise
    except HandlerChildrenRetry as exc:
        logger.debug(f"{name} has unfinished sub-handlers; it will continue soon.")
        return HandlerOutcome(final=False, delay=exc.delay, subrefs=frozenset(subrefs))
    except TemporaryError as exc:
        text = str(exc) or repr(exc)
        limit = _limit_ahead(handler, retries_done=retries_done, runtime=runtime + (exc.delay or 0))
        if limit is None:
            logger.error(f"{name} failed temporarily: {text}")
            return HandlerOutcome(
                final=False, exception=exc, delay=exc.delay, subrefs=frozenset(subrefs)
            )
        reached = (
            f"time out after {handler.timeout} seconds"
            if limit is HandlerTimeoutError
            else f"exceed {handler.retries} retries"
        )
        message = f"{name} failed temporarily but will {reached}: {text}"
        logger.error(message)
        return HandlerOutcome(final=True, exception=limit(message), subrefs=frozenset(subrefs))
    except PermanentError as exc:
        logger.error(f"{name} failed permanently: {str(exc) or repr(exc)}")
        return HandlerOutcome(final=True, exception=exc, subrefs=frozenset(subrefs))
    except Exception as exc:
        if errors is ErrorsMode.IGNORED:
            logger.exception(f"{name} failed with an exception and will ignore it: {exc}")
            return HandlerOutcome(final=True, subrefs=frozenset(subrefs), ignored_error=exc)
        if errors is ErrorsMode.PERMANENT:
            logger.exception(f"{name} failed with an exception and will stop now: {exc}")
            return HandlerOutcome(final=True, exception=exc, subrefs=frozenset(subrefs))
        limit = _limit_ahead(handler, retries_done=retries_done, runtime=runtime + backoff)
        if limit is None:
            logger.exception(
                f"{name} failed with an exception and will try again in {backoff} seconds: {exc}"
            )
            return HandlerOutcome(
                final=False, exception=exc, delay=backoff, subrefs=frozenset(subrefs)
            )
        reached = (
            f"time out in {handler.timeout} seconds"
            if limit is HandlerTimeoutError
            else f"exceed {handler.retries} retries"
        )
        message = (
            f"{name} failed with an exception and will stop now "
            f"(it would {reached} on the next attempt): {exc}"
        )
        logger.exception(message)
        return HandlerOutcome(final=True, exception=limit(message), subrefs=frozenset(subrefs))
    finally:
        handler_body.reset(body_token)
    logger.info(f"{name} succeeded.")
    return HandlerOutcome(final=True, result=result, subrefs=frozenset(subrefs))


def _limit_ahead(
    handler: BaseHandler, *, retries_done: int, runtime: float
) -> type[HandlerTimeoutError] | type[HandlerRetriesError] | None:
    """The limit that the next attempt would reach anyway (so fail now, without waiting), as
    the error to fail with; ``None`` if a retry is worth it.

    ``runtime`` is the handler's runtime at the time of the next attempt; the timeout is checked
    first, then the retries, as Kopf checks them.
    """
    if handler.timeout is not None and runtime >= handler.timeout:
        return HandlerTimeoutError
    if handler.retries is not None and retries_done + 1 >= handler.retries:
        return HandlerRetriesError
    return None


async def _invoke_with_subhandlers(
    handler: BaseHandler,
    *,
    kwargs: Mapping[str, Any],
    cause: BaseCause,
    execution: Execution,
    subrefs: set[HandlerId],
    time_left: float | None,
) -> Any:
    if not (isinstance(handler, ChangingHandler) and isinstance(cause, ChangingCause)):
        return await _invoke_in_time(
            handler, kwargs=kwargs, execution=execution, time_left=time_left
        )

    outer = _invocation_var.get(None)
    ancestors = (*outer.ancestors, outer.subrefs) if outer is not None else ()
    invocation = _Invocation(
        execution=execution, cause=cause, handler=handler, subrefs=subrefs, ancestors=ancestors
    )
    token = _invocation_var.set(invocation)
    try:
        with collect_subhandlers(handler) as subregistry:
            result = await _invoke_in_time(
                handler, kwargs=kwargs, execution=execution, time_left=time_left
            )
        if len(subregistry):
            await _execute_subhandlers(invocation, subregistry)
    finally:
        _invocation_var.reset(token)
    return result


async def _invoke_in_time(
    handler: BaseHandler,
    *,
    kwargs: Mapping[str, Any],
    execution: Execution,
    time_left: float | None,
) -> Any:
    # Only async handlers can be interrupted; a thread runs to its end regardless.
    abandon = execution.abandon_threads
    is_async = handler.is_async
    if time_left is None or not is_async:
        return await invoke(
            handler.fn,
            kwargs=kwargs,
            limiter=execution.limiter,
            abandon_on_cancel=abandon,
            flavor=handler.flavor,
            is_async=is_async,
        )
    with trio.move_on_after(max(time_left, 0)) as scope:
        return await invoke(
            handler.fn,
            kwargs=kwargs,
            limiter=execution.limiter,
            flavor=handler.flavor,
            is_async=True,
        )
    if scope.cancelled_caught:
        raise HandlerTimeoutError(
            f"Handler {handler.id!r} was cancelled after its timeout "
            f"of {handler.timeout:g} seconds."
        )


def warn_corrupt_progress(logger: Logger) -> Callable[[HandlerId, Exception], None]:
    """What to log for a progress record that cannot be read (see ``State.from_storage``)."""

    def warn(handler_id: HandlerId, exc: Exception) -> None:
        logger.warning(
            f"The progress record of handler {handler_id!r} cannot be read ({exc}); "
            "the handler runs as if for the first time, and its new record replaces it."
        )

    return warn


async def _execute_subhandlers(
    invocation: _Invocation, subhandlers: Iterable[ChangingHandler]
) -> None:
    cause = invocation.cause
    execution = invocation.execution
    handlers = list(subhandlers)
    if isinstance(subhandlers, SubRegistry):
        handlers = subhandlers.iter_handlers(
            reason=cause.reason,
            body=cause.body,
            old=cause.old,
            new=cause.new,
            diff=cause.diff,
            initial=cause.initial,
            kwargs=cause.kwargs,
        )
    storage = execution.progress_storage
    now = execution.now()
    state = State.from_storage(
        body=cause.body,
        storage=storage,
        handlers=handlers,
        now=now,
        on_corrupt=warn_corrupt_progress(cause.logger),
    )
    state = state.with_purpose(cause.reason.value, handlers=handlers).with_handlers(
        handlers, now=now
    )
    outcomes = await run_handlers(
        handlers,
        cause=cause,
        state=state,
        execution=execution,
        logger=cause.logger,
    )
    state = state.with_outcomes(outcomes, now=execution.now())
    state.store(body=cause.body, patch=cause.patch, storage=storage)
    deliver_results(outcomes=outcomes, patch=cause.patch)
    for container in (*invocation.ancestors, invocation.subrefs):
        container.update(handler.id for handler in handlers)
    if not state.done:
        raise HandlerChildrenRetry(delay=state.delay(execution.now()))


async def execute(
    *,
    fns: Mapping[str, Callable[..., Any]] | Collection[Callable[..., Any]] | None = None,
    handlers: Collection[ChangingHandler] | None = None,
    registry: SubRegistry | None = None,
    lifecycle: LifeCycleFn | None = None,
) -> None:
    """Run sub-handlers right here, inside the running handler; return when all are done.

    Until they are all done, the parent handler is retried (and calls this again); the
    sub-handlers that already succeeded are not re-run. Awaitable from asyncio-flavoured
    handlers too: it then runs in trio on their behalf.
    """
    if in_asyncio():
        return await run_trio_from_asyncio(  # type: ignore[no-any-return]
            execute, fns=fns, handlers=handlers, registry=registry, lifecycle=lifecycle
        )
    try:
        invocation = _invocation_var.get()
    except LookupError:
        raise RuntimeError(
            "trioperator.execute() can be used only inside a resource-changing handler."
        ) from None
    collected: list[ChangingHandler] = []
    parent = invocation.handler
    if fns is not None:
        items = fns.items() if isinstance(fns, Mapping) else ((None, fn) for fn in fns)
        collected.extend(build_subhandler(fn, parent=parent, id=fn_id) for fn_id, fn in items)
    if handlers is not None:
        collected.extend(handlers)
    if registry is not None:
        collected.extend(registry)
    if lifecycle is not None:
        invocation = dataclasses.replace(
            invocation, execution=dataclasses.replace(invocation.execution, lifecycle=lifecycle)
        )
    await _execute_subhandlers(invocation, collected)
