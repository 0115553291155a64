"""Process-wide logging as ``trioperator run`` sets it up: ``configure()`` (Kopf's name).

The CLI calls ``configure()`` with its ``--verbose/--debug/--quiet/--log-format/--log-prefix/
--log-refkey`` options; embedding code and tests may call it too. It installs one stream
handler on the root logger, replacing the one an earlier ``configure()`` installed and leaving
every other handler alone (pytest's, the application's).

Per-object records carry their object's reference (``record.k8s_ref``, see ``ObjectLogger``);
with ``log_prefix`` the formatters put its ``[namespace/name]`` before the message, as Kopf's
do. In JSON, the reference goes under ``log_refkey``.
"""

from __future__ import annotations

import datetime
import enum
import json
import logging
import time
from typing import Any, TextIO

from trioperator._runtime.handling.loggers import level_word, object_prefix

DEFAULT_JSON_REFKEY = "object"

# Marks the handler this module installs, so a second configure() replaces it.
_HANDLER_NAME = "trioperator.configure"

# Libraries that log every request at INFO; only debug mode wants that.
CHATTY_LOGGERS = ("httpx2", "httpcore2", "httpx", "httpcore", "hpack", "asyncio")


class LogFormat(enum.Enum):
    """The log formats of ``--log-format``; the text ones are ``logging`` format strings."""

    PLAIN = "%(message)s"
    FULL = "[%(asctime)s] %(name)-20.20s [%(levelname)-8.8s] %(message)s"
    JSON = "-json-"  # a marker only: JSON lines are not made from a format string


def configure(
    debug: bool | None = None,
    verbose: bool | None = None,
    quiet: bool | None = None,
    log_format: LogFormat | str = LogFormat.FULL,
    log_prefix: bool | None = False,
    log_refkey: str | None = None,
) -> None:
    """Set the log level and the format of the process's log output.

    ``debug`` or ``verbose``: DEBUG; ``quiet``: WARNING; otherwise INFO. ``log_format`` is a
    ``LogFormat``, its lowercase name (``"full"``, ``"plain"``, ``"json"``, as on the command
    line), or any ``logging`` format string. ``log_prefix`` keeps the ``[namespace/name]``
    prefix of per-object lines (``None``: keep it in text, drop it in JSON).
    """
    level = logging.DEBUG if (debug or verbose) else logging.WARNING if quiet else logging.INFO
    handler = LineHandler()
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(make_formatter(log_format, log_prefix=log_prefix, log_refkey=log_refkey))

    root = logging.getLogger()
    for existing in list(root.handlers):
        if existing.get_name() == _HANDLER_NAME:
            root.removeHandler(existing)
    root.addHandler(handler)
    # The root's level only, as Kopf's configure(): levels set on the framework's loggers
    # (e.g. ``kopf.objects`` at WARNING by the operator's code) stay in force.
    root.setLevel(level)
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if debug else logging.WARNING)


class LineHandler(logging.StreamHandler[TextIO]):
    """A ``StreamHandler`` (on ``sys.stderr`` by default) with fewer steps per line.

    Each record is still formatted, written and flushed at once, under the handler's lock, and
    errors go to ``handleError`` as in ``StreamHandler``. What is left out is only the layers in
    between, which every line of a busy operator (e.g. one per timer run) would pass: the
    filter pass when there are no filters, and a second round of the lock for the flush.
    """

    def handle(self, record: logging.LogRecord) -> bool:
        if self.filters:
            return bool(super().handle(record))
        lock = self.lock
        if lock is None:
            self.emit(record)
            return True
        with lock:
            self.emit(record)
        return True

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
            stream = self.stream
            stream.write(text + self.terminator)
            flush = getattr(stream, "flush", None)
            if flush is not None:
                flush()
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)


def make_formatter(
    log_format: LogFormat | str = LogFormat.FULL,
    *,
    log_prefix: bool | None = False,
    log_refkey: str | None = None,
) -> logging.Formatter:
    """The formatter for a log format (see ``configure``)."""
    fmt = _parse_format(log_format)
    prefix = log_prefix if log_prefix is not None else fmt is not LogFormat.JSON
    if fmt is LogFormat.JSON:
        return JsonFormatter(refkey=log_refkey or DEFAULT_JSON_REFKEY, prefix=prefix)
    return TextFormatter(fmt.value if isinstance(fmt, LogFormat) else fmt, prefix=prefix)


def _parse_format(log_format: LogFormat | str) -> LogFormat | str:
    if isinstance(log_format, LogFormat):
        return log_format
    if isinstance(log_format, str):
        try:
            return LogFormat[log_format.upper()]
        except KeyError:
            pass
        if "%(" in log_format or "{" in log_format:
            return log_format  # a custom logging format string
    choices = ", ".join(repr(fmt.name.lower()) for fmt in LogFormat)
    raise ValueError(
        f"Unsupported log format: {log_format!r}. Use one of {choices}, a LogFormat, "
        f"or a logging format string."
    )


class _SecondsCache(logging.Formatter):
    """``formatTime`` as ``logging.Formatter`` has it, with the seconds' text made once.

    Lines come in bursts: ``time.strftime`` of the same second over and over is a noticeable
    part of a log line's cost. Only the default way (no ``datefmt``, local time) is cached.
    """

    _second: tuple[int, str] = (-1, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None or self.converter is not time.localtime:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        cached_second, text = self._second
        if second != cached_second:
            text = time.strftime(self.default_time_format, time.localtime(second))
            self._second = (second, text)
        if self.default_msec_format:
            return self.default_msec_format % (text, record.msecs)
        return text


class TextFormatter(_SecondsCache):
    """A ``logging`` format string; with ``prefix``, objects' records begin with their
    ``[namespace/name]``."""

    def __init__(self, fmt: str, *, prefix: bool) -> None:
        super().__init__(fmt)
        self.prefix = prefix
        self._uses_time = self.usesTime()  # the format string is fixed: look at it once

    def format(self, record: logging.LogRecord) -> str:
        # As ``logging.Formatter.format``, with the format string's use of the time looked up
        # once. The prefix is in the line only: the record is left with the plain message, as
        # any formatter leaves it, for the handlers after this one (Kopf's formats a copy).
        message = record.getMessage()
        record.message = _prefixed(record, message) if self.prefix else message
        if self._uses_time:
            record.asctime = self.formatTime(record, self.datefmt)
        text = self._style.format(record)
        record.message = message
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            text = _joined(text, record.exc_text)
        if record.stack_info:
            text = _joined(text, self.formatStack(record.stack_info))
        return text

    def formatMessage(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        record.message = _prefixed(record, message) if self.prefix else message
        text = super().formatMessage(record)
        record.message = message
        return text


def _joined(text: str, more: str) -> str:
    return f"{text}{more}" if text[-1:] == "\n" else f"{text}\n{more}"


class JsonFormatter(_SecondsCache):
    """One JSON object per line, as Kopf's (python-json-logger's, as Kopf sets it up) in fields,
    their order and values: ``message``; ``exc_info``/``stack_info`` if any; the record's extra
    fields (e.g. of ``logger.info(..., extra={...})``); ``timestamp`` (ISO-8601, UTC); the
    object's reference under ``refkey``; ``severity`` (unless an extra field has that name).
    """

    def __init__(self, *, refkey: str = DEFAULT_JSON_REFKEY, prefix: bool = False) -> None:
        super().__init__()
        self.refkey = refkey
        self.prefix = prefix

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {"message": _message(record, self.prefix)}
        if record.exc_info:
            payload["exc_info"] = self.formatException(record.exc_info)
        elif record.exc_text:
            payload["exc_info"] = record.exc_text
        if record.stack_info:
            payload["stack_info"] = self.formatStack(record.stack_info)
        for key, value in record.__dict__.items():
            if key not in _NOT_EXTRA and not key.startswith("_"):
                payload[key] = value
        created = datetime.datetime.fromtimestamp(record.created, tz=datetime.UTC)
        payload["timestamp"] = created.isoformat()
        ref = getattr(record, "k8s_ref", None)
        if ref is not None and self.refkey:
            payload[self.refkey] = ref
        payload.setdefault("severity", _severity(record.levelno))
        return json.dumps(payload, default=str)


# The attributes of every record, and those the framework's records carry for the formatters
# and the event poster: not extra fields (Kopf's reserved attributes, plus ``taskName``).
_NOT_EXTRA = frozenset(
    {
        *vars(logging.LogRecord("", logging.INFO, "", 0, "", (), None)),
        "asctime",
        "message",
        "taskName",
        "k8s_ref",
        "k8s_skip",
        "settings",
    }
)


def _severity(levelno: int) -> str:
    # Kopf's names, which log collectors (e.g. Stackdriver) understand.
    return level_word(levelno, ("debug", "info", "warn", "error", "fatal"))


def _message(record: logging.LogRecord, prefix: bool) -> str:
    message = record.getMessage()
    return _prefixed(record, message) if prefix else message


def _prefixed(record: logging.LogRecord, message: str) -> str:
    # As Kopf's formatters: any record with an object's reference gets its [namespace/name].
    ref = getattr(record, "k8s_ref", None)
    return f"{object_prefix(ref)} {message}" if ref is not None else message
