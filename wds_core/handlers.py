"""What to do when a stage meets bad data: raise, skip, or stop.

A handler is called with the exception and returns ``True`` to skip the item
and continue, ``False`` to end the stream quietly, or raises.  These are the
webdataset-compatible policies; :func:`reraise_exception` is the default
everywhere.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable

from .errors import redact

__all__ = [
    "Handler",
    "ignore_and_continue",
    "ignore_and_stop",
    "reraise_exception",
    "warn_and_continue",
    "warn_and_stop",
]

#: What every stage's ``handler=`` is: called with the exception, ``True`` to go on, ``False`` to stop.
Handler = Callable[[BaseException], bool]

log = logging.getLogger("wds")


def reraise_exception(exn: BaseException) -> bool:
    """Raise the exception again (the default)."""
    raise exn


def ignore_and_continue(exn: BaseException) -> bool:
    """Skip the item silently and go on."""
    return True


def warn_and_continue(exn: BaseException) -> bool:
    """Warn about the item, skip it and go on."""
    warnings.warn(redact(f"skipped after {type(exn).__name__}: {exn}"), stacklevel=2)
    return True


def ignore_and_stop(exn: BaseException) -> bool:
    """End the stream silently."""
    return False


def warn_and_stop(exn: BaseException) -> bool:
    """Warn and end the stream."""
    warnings.warn(redact(f"stopped after {type(exn).__name__}: {exn}"), stacklevel=2)
    return False
