"""Error classes that decide how the command line reports a failure.

``UserError``: the user's program, data or arguments are wrong; printed as is, exit status 2
(``exit_status``: 1 for a run that failed on the way, e.g. a diverged loss).
``InternalError``: morphgen itself failed (e.g. generated code did not build); exit status 3.
Every module's own error class derives from one of these, so the CLI needs no list of them.
"""


class UserError(Exception):
    """Bad input from the user: a located program error, bad data, a bad option."""
    exit_status = 2
    located = False         # the message starts FILE:LINE:COL: error: (printed without a prefix)


class InternalError(Exception):
    """A failure inside morphgen that the user cannot fix by changing their input."""
