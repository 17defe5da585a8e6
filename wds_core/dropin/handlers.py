"""``webdataset.handlers``: what a stage does with an error (raise, skip, stop); wds's own policies."""

from ..handlers import ignore_and_continue, ignore_and_stop, reraise_exception, warn_and_continue, warn_and_stop

__all__ = ["ignore_and_continue", "ignore_and_stop", "reraise_exception", "warn_and_continue", "warn_and_stop"]
