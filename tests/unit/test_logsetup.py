"""``configure()``: the log level and format of the process, as ``trioperator run`` sets them."""

from __future__ import annotations

import datetime
import json
import logging
from pathlib import Path
from typing import Any

import pytest
import trioperator as kopf
from trioperator._engine.registry import OperatorRegistry
from trioperator.cli import CLIControls, main

BODY = {
    "apiVersion": "kopf.dev/v1",
    "kind": "KopfExample",
    "metadata": {"name": "kex", "namespace": "ns1", "uid": "u1"},
}
REF = {
    "apiVersion": "kopf.dev/v1",
    "kind": "KopfExample",
    "name": "kex",
    "uid": "u1",
    "namespace": "ns1",
}


def emitted(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line]


@pytest.mark.parametrize(
    ("options", "level"),
    [
        ({}, logging.INFO),
        ({"verbose": True}, logging.DEBUG),
        ({"debug": True}, logging.DEBUG),
        ({"quiet": True}, logging.WARNING),
    ],
)
def test_levels(options: dict[str, Any], level: int, capsys: pytest.CaptureFixture[str]) -> None:
    kopf.configure(log_format=kopf.LogFormat.PLAIN, **options)
    logger = logging.getLogger("trioperator.test")
    levels = [logging.DEBUG, logging.INFO, logging.WARNING]
    for candidate in levels:
        logger.log(candidate, logging.getLevelName(candidate))
    assert emitted(capsys) == [logging.getLevelName(n) for n in levels if n >= level]


def test_plain_text_with_and_without_the_object_prefix(capsys: pytest.CaptureFixture[str]) -> None:
    kopf.configure(log_format=kopf.LogFormat.PLAIN)  # Kopf's default for configure(): no prefix
    kopf.ObjectLogger(BODY).info("Hello.")
    kopf.configure(log_format="plain", log_prefix=True)
    kopf.ObjectLogger(BODY).info("Hello.")
    assert emitted(capsys) == ["Hello.", "[ns1/kex] Hello."]


def test_full_format_has_time_logger_and_level(capsys: pytest.CaptureFixture[str]) -> None:
    kopf.configure(log_format=kopf.LogFormat.FULL, log_prefix=None)
    logging.getLogger("trioperator.test").warning("Careful.")
    (line,) = emitted(capsys)
    assert line.startswith("[")
    assert "trioperator.test" in line
    assert "[WARNING ] Careful." in line


def test_a_custom_format_string(capsys: pytest.CaptureFixture[str]) -> None:
    kopf.configure(log_format="%(levelname)s|%(message)s", log_prefix=True)
    kopf.ObjectLogger(BODY).error("Bad.")
    assert emitted(capsys) == ["ERROR|[ns1/kex] Bad."]


def test_json_lines_carry_the_object_reference(capsys: pytest.CaptureFixture[str]) -> None:
    kopf.configure(log_format=kopf.LogFormat.JSON)
    kopf.ObjectLogger(BODY).warning("Watch out.")
    kopf.configure(log_format="json", log_refkey="k8s", log_prefix=True)
    kopf.LocalObjectLogger(BODY).info("Local.")
    first, second = (json.loads(line) for line in emitted(capsys))
    assert first["message"] == "Watch out."
    assert first["severity"] == "warn"
    assert first["object"] == REF
    assert "timestamp" in first
    assert second["message"] == "[ns1/kex] Local."
    assert second["severity"] == "info"
    assert second["k8s"] == REF
    assert "object" not in second


def test_json_lines_are_kopfs(capsys: pytest.CaptureFixture[str]) -> None:
    # As Kopf 1.45.2 writes them (python-json-logger): the same fields, in the same order.
    kopf.configure(log_format=kopf.LogFormat.JSON)
    logger = kopf.ObjectLogger(BODY)
    logger.info("Handler 'create_fn' succeeded.")
    try:
        raise ValueError("boom")
    except ValueError:
        logger.exception("Failed")
    logging.getLogger("kopf._core.reactor.running").info("Stopping.", extra={"foo": "bar"})
    first, second, third = (json.loads(line) for line in emitted(capsys))
    assert list(first) == ["message", "timestamp", "object", "severity"]
    assert first["message"] == "Handler 'create_fn' succeeded."
    assert first["object"] == REF
    assert datetime.datetime.fromisoformat(first["timestamp"]).tzinfo == datetime.UTC
    assert list(second) == ["message", "exc_info", "timestamp", "object", "severity"]
    assert second["exc_info"].startswith("Traceback (most recent call last):")
    assert second["exc_info"].endswith("ValueError: boom")
    assert second["severity"] == "error"
    assert list(third) == ["message", "foo", "timestamp", "severity"]
    assert third["foo"] == "bar"


def test_an_unknown_format_is_refused_before_anything_changes() -> None:
    root = logging.getLogger()
    before = list(root.handlers), root.level
    with pytest.raises(ValueError, match="Unsupported log format: 'yaml'"):
        kopf.configure(log_format="yaml")
    assert (list(root.handlers), root.level) == before


def test_configure_again_replaces_only_its_own_handler(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    foreign = logging.NullHandler()
    root.addHandler(foreign)
    try:
        kopf.configure(log_format="plain")
        kopf.configure(log_format="plain")
        logging.getLogger("trioperator.test").info("Once.")
        assert emitted(capsys) == ["Once."]  # not twice
        assert foreign in root.handlers
    finally:
        root.removeHandler(foreign)


def test_the_cli_configures_through_configure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.py"
    empty.write_text("")
    controls = CLIControls(registry=OperatorRegistry(), handle_signals=False)
    argv = ["run", "--quiet", "--log-format=json", "--log-refkey=ref", str(empty)]
    assert main(argv, controls=controls) == 2  # no handlers: but logging is set up by then
    capsys.readouterr()

    kopf.ObjectLogger(BODY).info("Too low for --quiet.")
    kopf.ObjectLogger(BODY).warning("Shown.")
    (line,) = emitted(capsys)
    assert json.loads(line)["ref"] == REF
    assert json.loads(line)["message"] == "Shown."  # the prefix is off in JSON by default


def test_every_line_reaches_the_stream_at_once_in_order_with_filters_and_tracebacks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    kopf.configure(log_format="%(levelname)s %(message)s", log_prefix=True)
    (handler,) = [
        h for h in logging.getLogger().handlers if h.get_name() == "trioperator.configure"
    ]
    logger = kopf.ObjectLogger(BODY)
    logger.info("One.")
    assert emitted(capsys) == ["INFO [ns1/kex] One."]  # written and flushed by the call itself
    logger.warning("Two.")
    logging.getLogger("trioperator.test").info("Three.")
    assert emitted(capsys) == ["WARNING [ns1/kex] Two.", "INFO Three."]

    handler.addFilter(lambda record: "secret" not in record.getMessage())
    try:
        logger.info("A secret.")
        logger.info("Public.")
    finally:
        handler.filters.clear()
    assert emitted(capsys) == ["INFO [ns1/kex] Public."]

    try:
        raise ValueError("boom")
    except ValueError:
        logger.exception("Failed.")
    lines = emitted(capsys)
    assert lines[0] == "ERROR [ns1/kex] Failed."
    assert lines[1] == "Traceback (most recent call last):"
    assert lines[-1] == "ValueError: boom"


def test_the_prefix_is_in_the_line_not_in_the_record(capsys: pytest.CaptureFixture[str]) -> None:
    # Handlers after the CLI's (e.g. an operator's own) get Kopf's record: the plain message.
    seen: list[tuple[str, str]] = []

    class After(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append((record.getMessage(), record.message))

    kopf.configure(log_format=kopf.LogFormat.PLAIN, log_prefix=True)
    after = After()
    logging.getLogger().addHandler(after)
    try:
        kopf.ObjectLogger(BODY).warning("Watch out.")
    finally:
        logging.getLogger().removeHandler(after)
    assert emitted(capsys) == ["[ns1/kex] Watch out."]
    assert seen == [("Watch out.", "Watch out.")]
