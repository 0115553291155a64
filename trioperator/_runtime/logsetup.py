"""Process-wide logging as ``trioperator run`` sets it up: ``configure()`` (Kopf's name).

The CLI calls ``configure()`` with its ``--verbose/--debug/--quiet/--log-format/--log-prefix/
--log-refkey`` options; embedding code and tests may call it too. It installs one stream
handler on the root logger, replacing the one an earlier ``configure()`` installed and leaving
every other handler alone (pytest's, the application's).

Per-object lines carry their object's ``[namespace/name]`` prefix in the message (see
``ObjectLogger``); with ``log_prefix=False`` the formatters strip it again. In JSON, the
object's reference goes under ``log_refkey`` instead.
"""

from __future__ import annotations

import enum
import json
import logging
from typing import Any

from trioperator._runtime.loggers import OBJECTS_LOGGER_NAME, level_word

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
    handler = logging.StreamHandler()
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(make_formatter(log_format, log_prefix=log_prefix, log_refkey=log_refkey))

    root = logging.getLogger()
    for existing in list(root.handlers):
        if existing.get_name() == _HANDLER_NAME:
            root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger(OBJECTS_LOGGER_NAME).setLevel(level)
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if debug else logging.WARNING)


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


class TextFormatter(logging.Formatter):
    """A ``logging`` format string, with the object prefix kept or stripped."""

    def __init__(self, fmt: str, *, prefix: bool) -> None:
        super().__init__(fmt)
        self.prefix = prefix

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = _message(record, self.prefix)
        return super().formatMessage(record)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: message, timestamp, severity, logger, the object reference."""

    def __init__(self, *, refkey: str = DEFAULT_JSON_REFKEY, prefix: bool = False) -> None:
        super().__init__()
        self.refkey = refkey
        self.prefix = prefix

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "message": _message(record, self.prefix),
            "timestamp": self.formatTime(record),
            "severity": _severity(record.levelno),
            "logger": record.name,
        }
        ref = getattr(record, "k8s_ref", None)
        if ref:
            payload[self.refkey] = ref
        if record.exc_info:
            payload["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str)


def _severity(levelno: int) -> str:
    # Kopf's names, which log collectors (e.g. Stackdriver) understand.
    return level_word(levelno, ("debug", "info", "warn", "error", "fatal"))


def _message(record: logging.LogRecord, prefix: bool) -> str:
    message = record.getMessage()
    marker = getattr(record, "k8s_prefix", None)
    if marker and not prefix and message.startswith(f"{marker} "):
        return message[len(marker) + 1 :]
    return message
