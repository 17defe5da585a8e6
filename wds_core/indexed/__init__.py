"""Indexed random access (the wids capability): ``ShardListDataset`` (:mod:`.dataset`) and its samplers
(:mod:`.samplers`)."""

from .dataset import *  # noqa: F401,F403
from .dataset import __all__ as __all__
