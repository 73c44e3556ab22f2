"""User-facing errors.

Every error a user can cause (bad configuration, bad dataset file, bad argument) is a
:class:`PtychoError` whose message is one line naming the problem and the fix. The CLI
prints it without a traceback and exits with :attr:`PtychoError.exit_code`.
"""

from __future__ import annotations

from collections.abc import Iterator


def causes(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc`` and the errors behind it (``__cause__``, else ``__context__``), each once.

    What happened is often not the error that arrives: h5py, Keras, SQLAlchemy and MLflow
    wrap the OSError, the SQLite lock or the refused connection in their own, and a
    clean-up that fails while an interrupt unwinds replaces it. Readers of an error
    (a full disk, a lock, a gone server, an interrupt) look along this chain.
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


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
