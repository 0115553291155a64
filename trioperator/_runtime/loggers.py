"""Per-object loggers: every line about an object says which object, as ``[namespace/name]``."""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any

# What handlers get as ``logger`` and what the framework's functions accept (Kopf's alias).
# It is defined once, in the lowest layer that needs it (the API client), and re-exported here.
from trioperator._client.api import Logger as Logger

OBJECTS_LOGGER_NAME = "trioperator.objects"
_OBJECTS_LOGGER = logging.getLogger(OBJECTS_LOGGER_NAME)  # one lookup (and lock), not per object
_LOGGING_FILE = logging.Logger.log.__code__.co_filename  # frames of the logging module itself


class ObjectLogger(logging.LoggerAdapter[logging.Logger]):
    """Prefixes messages with ``[namespace/name]`` and attaches a reference to the object.

    The reference (``record.k8s_ref``) lets structured formatters and the event poster find
    the object without parsing the message.
    """

    def __init__(
        self,
        body: Mapping[str, Any],
        *,
        settings: Any = None,
        logger: logging.Logger | None = None,
    ) -> None:
        # ``settings`` is accepted for Kopf's signature ``ObjectLogger(body=..., settings=...)``;
        # what gets posted as k8s events is decided by the poster, which has the settings.
        metadata = body.get("metadata") or {}
        namespace = metadata.get("namespace")
        name = metadata.get("name")
        self.prefix = f"[{namespace}/{name}]" if namespace else f"[{name}]"
        self.ref = {
            "apiVersion": body.get("apiVersion"),
            "kind": body.get("kind"),
            "name": name,
            "uid": metadata.get("uid"),
            "namespace": namespace,
        }
        super().__init__(logger or _OBJECTS_LOGGER, {"k8s_ref": self.ref})

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        given: Mapping[str, Any] | None = kwargs.get("extra")
        if given:
            extra = dict(given)
            extra.setdefault("k8s_ref", self.ref)
            extra.setdefault("k8s_prefix", self.prefix)
        else:
            extra = {"k8s_ref": self.ref, "k8s_prefix": self.prefix}
        kwargs["extra"] = extra
        return f"{self.prefix} {msg}", kwargs

    def log(self, level: int, msg: Any, *args: Any, **kwargs: Any) -> None:
        """As ``LoggerAdapter.log``, with the same record, made with less work.

        Every handled object logs a few lines; through the adapter, each one checks the level
        twice and walks the stack in ``Logger.findCaller``. Here the record is made and handled
        directly, with the caller (the first frame outside the logging module, as
        ``findCaller`` finds it) taken from the stack at once. Anything unusual (exceptions,
        stack info, a ``stacklevel``) takes the standard way.
        """
        logger = self.logger
        if not logger.isEnabledFor(level):
            return
        msg, processed = self.process(msg, kwargs)
        extra = processed.get("extra")
        if len(processed) > (extra is not None) or not isinstance(level, int):
            options = dict(processed)
            extra = options.pop("extra", None)
            # exc_info=..., stack_info=..., stacklevel=...: one frame more (ours) to skip.
            stacklevel = options.pop("stacklevel", 1) + 1
            logger.log(level, msg, *args, extra=extra, stacklevel=stacklevel, **options)
            return
        frame = sys._getframe(1)
        while frame.f_back is not None and frame.f_code.co_filename == _LOGGING_FILE:
            frame = frame.f_back
        code = frame.f_code
        record = logger.makeRecord(
            logger.name,
            level,
            code.co_filename,
            frame.f_lineno,
            msg,
            args,
            None,
            code.co_name,
            extra,
            None,
        )
        logger.handle(record)


class LocalObjectLogger(ObjectLogger):
    """An ``ObjectLogger`` whose messages are never posted as Kubernetes events.

    For chatty places (e.g. event-watching handlers): the lines still go to the log with the
    object's prefix and reference, but do not flood the cluster with events.
    """

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        msg, kwargs = super().process(msg, kwargs)
        kwargs["extra"]["k8s_skip"] = True
        return msg, kwargs


def level_word(levelno: int, words: tuple[str, str, str, str, str]) -> str:
    """One of five words for a record's level: DEBUG (or lower), INFO, WARNING, ERROR, higher.

    Custom levels in between go to the next standard one up, as Kopf maps them.
    """
    for threshold, word in zip(_THRESHOLDS, words, strict=False):
        if levelno <= threshold:
            return word
    return words[-1]


_THRESHOLDS = (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR)
