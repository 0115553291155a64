"""Per-object loggers: every record about an object carries a reference to that object.

The records are Kopf's: made by the ``kopf.objects`` logger (``trioperator.objects`` reaches it
too, see ``_util/lognames.py``), with the message as the handler or the framework wrote it and
the object in ``record.k8s_ref``; ``record.k8s_skip`` says whether it may be posted as a k8s
event. The ``[namespace/name]`` prefix of the log lines is added by the formatters
(``logsetup.py``), as Kopf's formatters add it: users' own handlers get the plain message.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any

# What handlers get as ``logger`` and what the framework's functions accept (Kopf's alias).
# It is defined once, in the lowest layer that needs it (the API client), and re-exported here.
from trioperator._client.api import Logger as Logger
from trioperator._util.lognames import framework_logger

OBJECTS_LOGGER_NAME = "kopf.objects"
_OBJECTS_LOGGER = framework_logger(OBJECTS_LOGGER_NAME)  # one lookup (and lock), not per object
_LOGGING_FILE = logging.Logger.log.__code__.co_filename  # frames of the logging module itself


class ObjectLogger(logging.LoggerAdapter[logging.Logger]):
    """Attaches a reference to the object (``record.k8s_ref``) to every record, as Kopf's does.

    The reference lets the formatters (the ``[namespace/name]`` prefix, the JSON ``object``) and
    the event poster find the object without parsing the message.
    """

    skip: bool = False
    """``record.k8s_skip``: the records are never posted as k8s events."""

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
        self.ref = {
            "apiVersion": body.get("apiVersion"),
            "kind": body.get("kind"),
            "name": name,
            "uid": metadata.get("uid"),
            "namespace": namespace,
        }
        self._extra = {"k8s_skip": self.skip, "k8s_ref": self.ref}
        super().__init__(logger or _OBJECTS_LOGGER, self._extra)

    @property
    def prefix(self) -> str:
        """``[namespace/name]``: the object as the log lines show it."""
        return object_prefix(self.ref)

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        # As Kopf: the call's own extra wins over the adapter's (and both are kept).
        given: Mapping[str, Any] | None = kwargs.get("extra")
        kwargs["extra"] = {**self._extra, **given} if given else self._extra
        return msg, kwargs

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
    object's reference, but do not flood the cluster with events.
    """

    skip = True


def object_prefix(ref: Mapping[str, Any]) -> str:
    """The ``[namespace/name]`` (or ``[name]``) of an object reference, as Kopf formats it."""
    namespace = ref.get("namespace")
    name = ref.get("name")
    return f"[{namespace}/{name}]" if namespace else f"[{name}]"


def level_word(levelno: int, words: tuple[str, str, str, str, str]) -> str:
    """One of five words for a record's level: DEBUG (or lower), INFO, WARNING, ERROR, higher.

    Custom levels in between go to the next standard one up, as Kopf maps them.
    """
    for threshold, word in zip(_THRESHOLDS, words, strict=False):
        if levelno <= threshold:
            return word
    return words[-1]


_THRESHOLDS = (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR)
