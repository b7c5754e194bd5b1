"""The one error type raised for bad dataset input.

A ``DataError`` is a ``ValueError`` whose message names the offending field (and the file it came
from when there is one), so the command line can print it as is instead of a traceback.
"""
from __future__ import annotations


class DataError(ValueError):
    """Malformed, missing or unusable dataset input; the message names the field and the source."""


def located(source: str | None, message: str) -> str:
    """Prefix ``message`` with the file or spec it concerns, when known."""
    return f"{source}: {message}" if source else message
