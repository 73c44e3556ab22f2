"""User-facing errors.

Every error a user can cause (bad configuration, bad dataset file, bad argument) is a
:class:`PtychoError` whose message is one line naming the problem and the fix. The CLI
prints it without a traceback and exits with :attr:`PtychoError.exit_code`.
"""


class PtychoError(Exception):
    """A problem the user can fix; ``str(err)`` is the whole, one-line message."""

    exit_code = 1

    def __init__(self, message: str):
        if "\n" in message:
            raise ValueError("PtychoError messages must be a single line")
        super().__init__(message)


class ConfigError(PtychoError):
    """Invalid configuration value or combination."""

    exit_code = 2


class DatasetError(PtychoError):
    """A dataset file that is missing, unreadable or fails validation."""
