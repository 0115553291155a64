"""One mapping of log levels to words, for the JSON logs' severity and the events' types."""

from __future__ import annotations

import logging

import pytest
from trioperator._runtime.handling.loggers import level_word

WORDS = ("debug", "info", "warn", "error", "fatal")


@pytest.mark.parametrize(
    ("levelno", "word"),
    [
        (logging.NOTSET, "debug"),
        (logging.DEBUG, "debug"),
        (logging.DEBUG + 1, "info"),  # a custom level between two goes to the next one up
        (logging.INFO, "info"),
        (logging.INFO + 5, "warn"),
        (logging.WARNING, "warn"),
        (logging.ERROR, "error"),
        (logging.ERROR + 1, "fatal"),
        (logging.CRITICAL, "fatal"),
        (logging.CRITICAL + 10, "fatal"),
    ],
)
def test_a_level_gets_the_word_of_the_next_standard_level_up(levelno: int, word: str) -> None:
    assert level_word(levelno, WORDS) == word
