"""The errors handlers raise to steer retries, and the modes that treat other exceptions."""

from __future__ import annotations

import enum


class ErrorsMode(enum.Enum):
    """How an arbitrary (not temporary, not permanent) exception of a handler is treated."""

    IGNORED = enum.auto()
    TEMPORARY = enum.auto()
    PERMANENT = enum.auto()


class PermanentError(Exception):
    """A fatal error of a handler: it is not retried and counts as a final failure."""


class TemporaryError(Exception):
    """A recoverable error of a handler: it is retried after ``delay`` seconds."""

    def __init__(self, __msg: str | None = None, delay: float | None = 60) -> None:
        super().__init__(__msg)
        self.delay = delay


class AdmissionError(PermanentError):
    """Rejects an admission with this message and HTTP code (``code=None`` means 500).

    Any other exception also rejects it, with code 500; when several handlers of one review
    fail, an ``AdmissionError`` is the one reported (see ``_engine/admission.py``).
    """

    def __init__(self, message: str | None = "", code: int | None = 500) -> None:
        super().__init__(message)
        self.code = code


class HandlerTimeoutError(PermanentError):
    """The handler's ``timeout=`` has passed (since its first attempt)."""


class HandlerRetriesError(PermanentError):
    """The handler's ``retries=`` are exhausted."""


class HandlerChildrenRetry(TemporaryError):
    """Internal: a parent handler is retried until its sub-handlers are all done."""


class ActivityError(Exception):
    """One or more activity handlers (startup, cleanup, login, probe) finally failed."""

    def __init__(self, msg: str, *, outcomes: dict[str, BaseException] | None = None) -> None:
        super().__init__(msg)
        self.outcomes = dict(outcomes or {})
