"""The one exception type for user errors: bad flags, files or degrees -> exit status 2."""

EXIT_USAGE = 2
EXIT_FAILURE = 3


class UsageError(ValueError):
    """Invalid user input (flags, suite files, records, calibrations).

    Raised before any communication, identically on every rank, so every rank exits
    with status 2 and rank 0 prints the message once.
    """


# A rank other than 0 that hits a usage error waits this long before it exits: launchers tear
# the whole job down at the first non-zero exit, which must not kill rank 0 mid-message.
# Under mpirun/torchrun rank 0's own exit ends the wait; elsewhere it costs this much once.
USAGE_LINGER_S = 5.0
