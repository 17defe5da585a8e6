"""The JAX adapter of wds: numpy batches (optionally global ``jax.Array``s) for JAX training loops.

Everything in :mod:`wds_core` is here too; :class:`BatchIterator` is the
adapter's own piece (see :mod:`wds_jax.iterator`).
"""

from wds_core import *  # noqa: F401,F403
from wds_core import __all__ as _core_all

from .iterator import BatchIterator as BatchIterator

__all__ = sorted(set(_core_all) | {"BatchIterator"})
