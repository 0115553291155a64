"""Kopf's logger names act on trioperator's records exactly as they would under Kopf.

Records are made by loggers with Kopf's names (``kopf.objects``, ``kopf.activities.probe``,
``kopf._core.engines.peering``, ...); trioperator's names sit between them on the same chain
(``trioperator/_util/lognames.py``). These tests set levels, handlers, filters and
``propagate`` on both kinds of names, and look at which handlers see which records.
"""

from __future__ import annotations

import logging
import logging.config
from collections.abc import Iterator
from typing import Any

import pytest
import trioperator as kopf  # noqa: F401 -- the framework's loggers exist from the import on
from trioperator._engine.handlers import Activity
from trioperator._runtime.handling.loggers import LocalObjectLogger, ObjectLogger
from trioperator._runtime.program.activities import activity_logger
from trioperator._runtime.program.logsetup import make_formatter
from trioperator._util.lognames import framework_logger

BODY = {
    "apiVersion": "kopf.dev/v1",
    "kind": "KopfExample",
    "metadata": {"name": "kex", "namespace": "ns1", "uid": "u1"},
}

# Every name Kopf 1.45 logs with (kopf/**: logging.getLogger), and the loggers above them.
KOPF_LEAVES = [
    "kopf.objects",
    "kopf.activities.startup",
    "kopf.activities.cleanup",
    "kopf.activities.authentication",
    "kopf.activities.probe",
    "kopf._core.engines.activities",
    "kopf._core.engines.admission",
    "kopf._core.engines.peering",
    "kopf._core.engines.posting",
    "kopf._core.engines.probing",
    "kopf._core.reactor.observation",
    "kopf._core.reactor.orchestration",
    "kopf._core.reactor.queueing",
    "kopf._core.reactor.running",
    "kopf._core.actions.lifecycles",
    "kopf._cogs.clients.watching",
    "kopf._kits.webhooks",
]


class Sink(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    @property
    def messages(self) -> list[str]:
        return [record.getMessage() for record in self.records]


@pytest.fixture(autouse=True)
def _restored() -> Iterator[None]:
    """Handlers, filters, propagation and levels of every logger, as they were."""
    manager = logging.Logger.manager
    loggers = [logging.getLogger()] + [
        logger for logger in manager.loggerDict.values() if isinstance(logger, logging.Logger)
    ]
    saved = {
        logger: (logger.level, list(logger.handlers), list(logger.filters), logger.propagate)
        for logger in loggers
    }
    parents = {logger: logger.parent for logger in loggers}
    yield
    for logger, (level, handlers, filters, propagate) in saved.items():
        logger.handlers[:] = handlers
        logger.filters[:] = filters
        logger.propagate = propagate
        logger.disabled = False
        logger.parent = parents[logger]
        logger.setLevel(level)


@pytest.fixture
def root() -> Iterator[Sink]:
    sink = Sink()
    logger = logging.getLogger()
    level = logger.level
    logger.addHandler(sink)
    logger.setLevel(logging.DEBUG)
    try:
        yield sink
    finally:
        logger.removeHandler(sink)
        logger.setLevel(level)


def chain(logger: logging.Logger | None) -> list[str]:
    names = []
    while logger is not None:
        names.append(logger.name)
        logger = logger.parent
    return names


@pytest.mark.parametrize("name", KOPF_LEAVES)
def test_every_kopf_name_is_on_its_own_chain_in_kopfs_order(name: str) -> None:
    logger = logging.getLogger(name)
    names = chain(logger)
    kopf_names = [n for n in names if n == "kopf" or n.startswith("kopf.")]
    parts = name.split(".")
    assert kopf_names == [".".join(parts[:depth]) for depth in range(len(parts), 0, -1)]
    # Everything the framework logs passes trioperator's root, then Kopf's, then the root.
    assert names[-3:] == ["trioperator", "kopf", "root"]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("kopf.objects", ["kopf.objects", "trioperator.objects", "trioperator"]),
        (
            "kopf.activities.probe",
            [
                "kopf.activities.probe",
                "trioperator.activities.probe",
                "kopf.activities",
                "trioperator.activities",
                "trioperator",
            ],
        ),
        (
            "kopf._core.engines.peering",
            [
                "kopf._core.engines.peering",
                "trioperator.peering",
                "kopf._core.engines",
                "kopf._core",
                "trioperator",
            ],
        ),
    ],
)
def test_trioperator_names_are_on_the_same_chain(name: str, expected: list[str]) -> None:
    assert chain(logging.getLogger(name)) == [*expected, "kopf", "root"]


def test_the_records_have_kopfs_names() -> None:
    assert ObjectLogger(BODY).logger.name == "kopf.objects"
    for activity in Activity:
        assert activity_logger(activity).name == f"kopf.activities.{activity.value}"


def test_object_records_are_kopfs_plain_message_and_reference(root: Sink) -> None:
    ObjectLogger(BODY).info("Handler %r succeeded.", "create_fn")
    LocalObjectLogger(BODY).info("Quiet.")
    loud, quiet = root.records
    assert loud.name == quiet.name == "kopf.objects"
    assert loud.getMessage() == "Handler 'create_fn' succeeded."  # no prefix: as Kopf's
    assert loud.k8s_ref == {  # type: ignore[attr-defined]
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfExample",
        "name": "kex",
        "uid": "u1",
        "namespace": "ns1",
    }
    assert (loud.k8s_skip, quiet.k8s_skip) == (False, True)  # type: ignore[attr-defined]
    # The log lines get the prefix from the formatter, as Kopf's do.
    assert make_formatter("plain", log_prefix=True).format(loud) == (
        "[ns1/kex] Handler 'create_fn' succeeded."
    )
    assert make_formatter("plain", log_prefix=False).format(loud) == (
        "Handler 'create_fn' succeeded."
    )


@pytest.mark.parametrize("name", ["kopf.objects", "trioperator.objects", "kopf", "trioperator"])
def test_a_level_on_either_name_silences_the_object_lines(name: str, root: Sink) -> None:
    logging.getLogger(name).setLevel(logging.WARNING)
    logger = ObjectLogger(BODY)
    logger.info("Handler 'fn' succeeded.")
    logger.warning("Careful.")
    assert root.messages == ["Careful."]


def test_a_level_on_kopf_objects_wins_over_one_on_trioperator_objects(root: Sink) -> None:
    logging.getLogger("trioperator.objects").setLevel(logging.DEBUG)
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)  # nearer: as under Kopf
    ObjectLogger(BODY).info("Handler 'fn' succeeded.")
    assert root.messages == []


def test_a_level_on_one_activity_leaves_the_others(root: Sink) -> None:
    logging.getLogger("kopf.activities.probe").setLevel(logging.WARNING)
    activity_logger(Activity.PROBE).info("Activity 'probe_fn' succeeded.")
    activity_logger(Activity.STARTUP).info("Activity 'startup_fn' succeeded.")
    assert root.messages == ["Activity 'startup_fn' succeeded."]


def test_a_level_on_kopfs_package_names_applies_below_them(root: Sink) -> None:
    logging.getLogger("kopf._core").setLevel(logging.ERROR)
    framework_logger("kopf._core.engines.peering").warning("Pausing.")
    framework_logger("kopf._cogs.clients.watching").warning("Inactive.")
    assert root.messages == ["Inactive."]


def test_handlers_on_kopf_objects_get_the_records(root: Sink) -> None:
    ours, theirs = Sink(), Sink()
    logging.getLogger("kopf.objects").addHandler(ours)
    logging.getLogger("trioperator.objects").addHandler(theirs)
    ObjectLogger(BODY).info("Hello.")
    assert ours.messages == theirs.messages == root.messages == ["Hello."]


def test_no_propagation_from_kopf_objects_stops_everything_above_it(root: Sink) -> None:
    own, above = Sink(), Sink()
    objects = logging.getLogger("kopf.objects")
    objects.addHandler(own)
    objects.propagate = False
    logging.getLogger("trioperator.objects").addHandler(above)
    logging.getLogger("kopf").addHandler(above)
    ObjectLogger(BODY).info("Hello.")
    assert own.messages == ["Hello."]
    assert above.messages == root.messages == []  # under Kopf, nothing above kopf.objects


def test_no_propagation_from_kopf_stops_before_the_root(root: Sink) -> None:
    kopf_logger = logging.getLogger("kopf")
    sink = Sink()
    kopf_logger.addHandler(sink)
    kopf_logger.propagate = False
    ObjectLogger(BODY).info("Hello.")
    framework_logger("kopf._core.reactor.running").info("Running.")
    logging.getLogger("trioperator.sharding").info("Sharded.")  # trioperator's own
    assert sink.messages == ["Hello.", "Running.", "Sharded."]
    assert root.messages == []


def test_no_propagation_from_trioperator_objects_keeps_its_own_handlers(root: Sink) -> None:
    sink = Sink()
    objects = logging.getLogger("trioperator.objects")
    objects.addHandler(sink)
    objects.propagate = False
    ObjectLogger(BODY).info("Hello.")
    assert sink.messages == ["Hello."]
    assert root.messages == []


def test_filters_on_kopf_objects_apply(root: Sink) -> None:
    logging.getLogger("kopf.objects").addFilter(lambda r: "succeeded" not in r.getMessage())
    logger = ObjectLogger(BODY)
    logger.info("Handler 'fn' succeeded.")
    logger.info("Creation is processed: 1 succeeded; 0 failed.")
    logger.info("Something else.")
    assert root.messages == ["Something else."]


def test_loggers_created_later_in_between_keep_the_chains(root: Sink) -> None:
    # Users may create Kopf's package loggers, or trioperator's, after the import.
    for name in ("kopf._core.engines", "kopf._cogs", "trioperator._runtime", "kopf.objects.x"):
        logging.getLogger(name)
    assert chain(logging.getLogger("kopf._core.engines.peering")) == [
        "kopf._core.engines.peering",
        "trioperator.peering",
        "kopf._core.engines",
        "kopf._core",
        "trioperator",
        "kopf",
        "root",
    ]
    assert chain(logging.getLogger("kopf.objects.x"))[:3] == [
        "kopf.objects.x",
        "kopf.objects",
        "trioperator.objects",
    ]


def test_dict_config_of_kopf_keeps_the_kopf_loggers_enabled(root: Sink) -> None:
    # As under Kopf: configuring "kopf" (disable_existing_loggers=True by default) resets the
    # loggers below it and leaves them enabled.
    config: dict[str, Any] = {"version": 1, "loggers": {"kopf": {"level": "INFO"}}}
    logging.config.dictConfig(config)
    ObjectLogger(BODY).info("Hello.")
    framework_logger("kopf._core.engines.peering").info("Pausing.")
    assert root.messages == ["Hello.", "Pausing."]


def test_one_trioperator_name_stands_in_one_chain_only() -> None:
    with pytest.raises(ValueError, match="already a name of"):
        framework_logger("kopf._core.engines.admission", "trioperator.peering")
    with pytest.raises(ValueError, match="Not a name under"):
        framework_logger("trioperator.something")
