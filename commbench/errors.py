"""The one exception type for user errors: bad flags, files or degrees -> exit status 2."""

EXIT_USAGE = 2
EXIT_FAILURE = 3


class UsageError(ValueError):
    """Invalid user input (flags, suite files, records, calibrations).

    Raised before any communication, identically on every rank, so every rank exits
    with status 2 and rank 0 prints the message once.
    """
