"""Synchronous tests of a whole operator program: Kopf's ``KopfRunner``, and a fake API for it.

``KopfRunner`` runs the command line (``trioperator run ...``) in a background thread with a trio
run of its own, as Kopf's runner does with its asyncio loop, while the test's thread acts and
asserts. ``FakeAPIThread`` serves a :class:`FakeAPI` from another background thread, so such a
test needs no cluster::

    def test_operator(tmp_path, monkeypatch):
        with FakeAPIThread() as api:
            api.create_object("customresourcedefinitions", crd)
            monkeypatch.setenv("KUBECONFIG", str(api.kubeconfig(tmp_path)))
            with KopfRunner(["run", "-A", "--verbose", "operator.py"]) as runner:
                api.create_object("kopfexamples", body, namespace="default")
                api.wait_for(lambda api: "create_fn" in api.get_object(...).get("status", {}))
        assert runner.exit_code == 0
        assert "And here we are!" in runner.output

These run on real time, in threads. In async tests prefer :func:`run_operator`, which runs the
operator in the test's own nursery and works with trio's mock clock.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypeVar, final

import trio

from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.settings import OperatorSettings
from trioperator._runtime.program.operator import Operator
from trioperator.testing.fakeapi import FakeAPI, RecordedRequest
from trioperator.testing.harness import _single

__all__ = ["FakeAPIThread", "KopfRunner"]

T = TypeVar("T")
Obj = dict[str, Any]


# ------------------------------------------------------------------------------ output capture


class _Output:
    """What the CLI writes to stdout and stderr, kept apart and interleaved, from any thread."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._chunks: list[tuple[str, str]] = []

    def write(self, stream: str, text: str) -> None:
        with self._changed:
            self._chunks.append((stream, text))
            self._changed.notify_all()

    def text(self, stream: str | None = None) -> str:
        with self._changed:
            return "".join(text for name, text in self._chunks if stream in (None, name))

    def wait_for(self, regex: re.Pattern[str], timeout: float | None) -> bool:
        with self._changed:
            return self._changed.wait_for(
                lambda: regex.search("".join(text for _, text in self._chunks)) is not None,
                timeout,
            )


class _Stream(io.TextIOBase):
    def __init__(self, output: _Output, name: str) -> None:
        super().__init__()
        self._output = output
        self._name = name

    encoding = "utf-8"

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._output.write(self._name, text)
        return len(text)


@contextlib.contextmanager
def _logging_restored() -> Iterator[None]:
    """Put back the root handlers and the logger levels that the CLI's logging setup changes."""
    root = logging.getLogger()
    handlers = list(root.handlers)
    levels = {
        name: logger.level
        for name, logger in logging.Logger.manager.loggerDict.items()
        if isinstance(logger, logging.Logger)
    }
    root_level = root.level
    try:
        yield
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        for handler in handlers:
            if handler not in root.handlers:
                root.addHandler(handler)
        root.setLevel(root_level)
        for name, logger in list(logging.Logger.manager.loggerDict.items()):
            if isinstance(logger, logging.Logger):
                logger.setLevel(levels.get(name, logging.NOTSET))


# ------------------------------------------------------------------------------ KopfRunner


@final
class KopfRunner:
    """Runs ``trioperator <args>`` in a background thread for the duration of a ``with`` block.

    Compatible with Kopf's ``kopf.testing.KopfRunner``::

        with KopfRunner(["run", "-A", "--verbose", "operator.py"]) as runner:
            ...  # act on the cluster (or a FakeAPIThread) and wait for the outcome
        assert runner.exit_code == 0
        assert runner.exception is None
        assert "And here we are!" in runner.output

    Entering starts the command and returns once the operator is ready (its watchers have
    listed what exists) or the command has ended (e.g. a usage error), waiting at most
    ``timeout`` seconds. Leaving the block stops the operator gracefully, as SIGTERM would, and
    waits up to ``timeout`` seconds (forever if ``None``) for the command to end; if it has not,
    ``TimeoutError`` is raised. With ``reraise``, the error behind a non-zero exit code is
    raised then (chained from the block's own error, if any), or already on entering if the
    command has failed by then (the block does not run).

    While the runner is active, ``sys.stdout`` and ``sys.stderr`` of the whole process go to the
    runner (as with Click's runner behind Kopf's): :attr:`output` has both, :attr:`stdout` and
    :attr:`stderr` each. The CLI's logging setup is undone afterwards.

    ``registry``: the handlers to serve; the files and modules on the command line register
    into it. Pass a new ``OperatorRegistry()`` to keep tests apart: with the default registry,
    files loaded by several tests add their handlers to it again and again. ``settings``: the
    operator's settings, which have no command-line options.
    """

    def __init__(
        self,
        args: Sequence[str],
        *,
        reraise: bool = True,
        timeout: float | None = None,
        registry: OperatorRegistry | None = None,
        settings: OperatorSettings | None = None,
    ) -> None:
        if isinstance(args, str):
            raise TypeError("args must be a list of arguments, e.g. ['run', '-A', 'op.py'].")
        self.args = [os.fspath(arg) for arg in args]
        self.reraise = reraise
        self.timeout = timeout
        self.registry = registry
        self.settings = settings
        self._output = _Output()
        self._lock = threading.Lock()
        self._settled = threading.Event()
        """Set once the operator is ready or the command has ended."""
        self._token: trio.lowlevel.TrioToken | None = None
        self._operator: Operator | None = None
        self._stop_requested = False
        self._exit_code: int | None = None
        self._exception: BaseException | None = None
        self._thread = threading.Thread(
            target=self._target, name=f"KopfRunner {' '.join(self.args)}", daemon=True
        )
        self._context: contextlib.ExitStack | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.args!r} exit_code={self._exit_code!r}>"

    # -------------------------------------------------------------------------- results

    @property
    def output(self) -> str:
        """Everything written to stdout and stderr, interleaved (the logs go to stderr)."""
        return self._output.text()

    @property
    def stdout(self) -> str:
        return self._output.text("stdout")

    @property
    def stderr(self) -> str:
        return self._output.text("stderr")

    @property
    def exit_code(self) -> int | None:
        """The command's exit code; ``None`` while it runs."""
        with self._lock:
            return self._exit_code

    @property
    def exception(self) -> BaseException | None:
        """The error behind a non-zero exit code (a usage error, the operator's failure)."""
        with self._lock:
            return self._exception

    @property
    def operator(self) -> Operator | None:
        """The operator the command runs, once it runs. Touch it only from its own thread."""
        with self._lock:
            return self._operator

    @property
    def finished(self) -> bool:
        return self.exit_code is not None

    def wait_for_output(self, pattern: str | re.Pattern[str], *, timeout: float = 30.0) -> None:
        """Block until the output matches ``pattern`` (``re.search``); ``TimeoutError`` if not."""
        regex = re.compile(pattern)
        if not self._output.wait_for(regex, timeout):
            tail = self.output[-4000:]
            raise TimeoutError(
                f"The output did not match {regex.pattern!r} within {timeout}s:\n{tail}"
            )

    # -------------------------------------------------------------------------- lifecycle

    def __enter__(self) -> KopfRunner:
        if self._context is not None:
            raise RuntimeError("A KopfRunner runs once; make a new one to run again.")
        with contextlib.ExitStack() as context:
            context.enter_context(_logging_restored())
            context.enter_context(contextlib.redirect_stdout(_Stream(self._output, "stdout")))
            context.enter_context(contextlib.redirect_stderr(_Stream(self._output, "stderr")))
            self._thread.start()
            self._context = context.pop_all()
        self._settled.wait(self.timeout)
        if self.finished and self.reraise and self.exception is not None:
            # It failed to start (or the command line is wrong): the body has nothing to test.
            self.__exit__(None, None, None)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        try:
            self._request_stop()
            self._thread.join(self.timeout)
        finally:
            if self._context is not None:
                self._context.close()
        if self._thread.is_alive():
            raise TimeoutError(f"The operator did not stop within {self.timeout}s.")
        error = self.exception
        if error is not None and self.reraise:
            if exc is None:
                raise error
            raise error from exc
        return False

    def _request_stop(self) -> None:
        with self._lock:
            self._stop_requested = True
            token, operator = self._token, self._operator
        if token is not None and operator is not None:
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(operator.stop, trio_token=token)

    # -------------------------------------------------------------------------- the thread

    def _target(self) -> None:
        code: int = 1
        exception: BaseException | None = None
        try:
            code, exception = self._run_cli()
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 0 if exit_.code is None else 1
            exception = exit_ if code else None
        except BaseException as error:  # a bug in the CLI or in here: report it, do not lose it
            exception = error
        finally:
            with self._lock:
                self._exit_code = code
                self._exception = (
                    _single(exception) if isinstance(exception, Exception) else exception
                )
            self._settled.set()

    def _run_cli(self) -> tuple[int, BaseException | None]:
        # Imported here: the CLI's dependencies are needed only by those who run the CLI.
        from trioperator import cli

        controls = cli.CLIControls(
            registry=self.registry,
            settings=self.settings,
            handle_signals=False,  # only the main thread may handle signals
            started=self._started,
        )
        code = cli.main(self.args, controls=controls)
        return code, controls.exception

    def _started(self, operator: Operator) -> None:
        """Called by the CLI in the operator's trio run, before the operator starts."""
        with self._lock:
            self._token = trio.lowlevel.current_trio_token()
            self._operator = operator
            stop_now = self._stop_requested
        if stop_now:
            operator.stop()
        trio.lowlevel.spawn_system_task(self._report_ready, operator.ready_flag)

    async def _report_ready(self, ready_flag: trio.Event) -> None:
        await ready_flag.wait()
        self._settled.set()


# ------------------------------------------------------------------------------ FakeAPIThread


@final
class FakeAPIThread:
    """A :class:`FakeAPI` served by a trio run in a background thread, for synchronous tests.

    The fake's state lives in its own thread: every method here runs there (through
    ``trio.from_thread``), so it is safe to call from the test's thread and returns copies.
    :meth:`call` runs anything else, e.g. ``api.call(lambda api: api.inject(...))``.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        bookmark_interval: float = 60.0,
        history_limit: int = 1000,
        tokens: Sequence[str] | None = None,
        track_managed_fields: bool = False,
    ) -> None:
        self._options: dict[str, Any] = {
            "host": host,
            "port": port,
            "bookmark_interval": bookmark_interval,
            "history_limit": history_limit,
            "tokens": tokens,
            "track_managed_fields": track_managed_fields,
        }
        self._api: FakeAPI | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._target, name="FakeAPIThread", daemon=True)

    def __enter__(self) -> FakeAPIThread:
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        token, self._token = self._token, None
        if token is not None and self._stop is not None:
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._stop.set, trio_token=token)
        self._thread.join()
        self._api = None
        if self._error is not None and exc is None:
            raise self._error

    def _target(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as error:
            self._error = error
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        self._stop = trio.Event()
        async with FakeAPI.serve(**self._options) as api:
            self._api = api
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()
            await self._stop.wait()

    # -------------------------------------------------------------------------- access

    def call(self, fn: Callable[[FakeAPI], T]) -> T:
        """Run ``fn(api)`` in the fake's thread and return its result."""
        if self._api is None or self._token is None:
            raise RuntimeError("The fake API is served only inside the `with` block.")
        return trio.from_thread.run_sync(fn, self._api, trio_token=self._token)

    @property
    def url(self) -> str:
        return self.call(lambda api: api.url)

    @property
    def requests(self) -> list[RecordedRequest]:
        """A copy of the requests received so far."""
        return self.call(lambda api: list(api.requests))

    def kubeconfig(
        self, path: str | os.PathLike[str], *, token: str | None = None, namespace: str = "default"
    ) -> Path:
        """Write a kubeconfig for this fake (a directory gets a ``kubeconfig`` file in it)."""
        return self.call(lambda api: api.kubeconfig(path, token=token, namespace=namespace))

    def objects(self, resource: str, namespace: str | None = None) -> list[Obj]:
        return self.call(lambda api: api.objects(resource, namespace))

    def get_object(self, resource: str, name: str, namespace: str | None = None) -> Obj:
        """A copy of one object; ``KeyError`` if absent."""
        return self.call(lambda api: api.get_object(resource, name, namespace))

    def has_object(self, resource: str, name: str, namespace: str | None = None) -> bool:
        return self.call(lambda api: api.has_object(resource, name, namespace))

    def create_object(self, resource: str, body: Obj, namespace: str | None = None) -> Obj:
        return self.call(lambda api: api.create_object(resource, body, namespace))

    def put_object(self, resource: str, body: Obj) -> Obj:
        return self.call(lambda api: api.put_object(resource, body))

    def patch_object(
        self, resource: str, name: str, patch: Obj, namespace: str | None = None
    ) -> Obj:
        return self.call(lambda api: api.patch_object(resource, name, patch, namespace))

    def apply_object(
        self,
        resource: str,
        body: Obj,
        *,
        manager: str,
        force: bool = False,
        namespace: str | None = None,
    ) -> Obj:
        return self.call(
            lambda api: api.apply_object(
                resource, body, manager=manager, force=force, namespace=namespace
            )
        )

    def delete_object(self, resource: str, name: str, namespace: str | None = None) -> None:
        self.call(lambda api: api.delete_object(resource, name, namespace))

    def wait_for(
        self, predicate: Callable[[FakeAPI], T], *, timeout: float = 30.0, interval: float = 0.01
    ) -> T:
        """Check ``predicate(api)`` (in the fake's thread) until truthy; return its value.

        A ``LookupError`` from the predicate counts as "not yet". Real time: ``TimeoutError``
        after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        last_error: LookupError | None = None

        def check(api: FakeAPI) -> T | None:
            nonlocal last_error
            try:
                return predicate(api)
            except LookupError as error:
                last_error = error
                return None

        while True:
            value = self.call(check)
            if value:
                return value
            if time.monotonic() >= deadline:
                detail = f"; the last lookup failed with {last_error!r}" if last_error else ""
                raise TimeoutError(f"Waited {timeout}s in vain for {predicate!r}{detail}.")
            time.sleep(interval)
