"""The JAX adapter of wds: numpy batches (optionally global ``jax.Array``s) for JAX training loops.

Everything in :mod:`wds_core` is here too; :class:`BatchIterator` is the
adapter's own piece (see :mod:`wds_jax.iterator`).
"""

from typing import Any

from wds_core import *  # noqa: F401,F403
from wds_core import __all__ as _core_all
from wds_core.reexport import core_attribute

from .iterator import BatchIterator as BatchIterator

__all__ = sorted(set(_core_all) | {"BatchIterator"})


def __getattr__(name: str) -> Any:
    return core_attribute(__name__, name)  # open_shard, iter_members...: wds_core names outside __all__
