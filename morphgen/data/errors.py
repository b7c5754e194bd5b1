"""The one error type raised for bad dataset input.

A ``DataError`` is a ``ValueError`` (and a ``morphgen.errors.UserError``) whose message names the
offending field (and the file it came from when there is one), so the command line can print it
as is instead of a traceback.
"""
from __future__ import annotations

from morphgen.errors import UserError


class DataError(UserError, ValueError):
    """Malformed, missing or unusable dataset input; the message names the field and the source.

    A ``UserError`` so the command line prints the message (exit status 2) instead of a traceback.
    """


def located(source: str | None, message: str) -> str:
    """Prefix ``message`` with the file or spec it concerns, when known."""
    return f"{source}: {message}" if source else message
