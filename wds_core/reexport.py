"""What the adapters re-export: ``wds_core``'s names outside ``__all__`` by attribute.

Each adapter (``wds_torch``, ``wds_jax``, ``wds_tf``) re-exports ``wds_core.__all__``
with ``import *``; :func:`core_attribute`, called from its module ``__getattr__``,
gives the expert names too (``open_shard``, ``iter_members``...), so that
``wds_torch.open_shard`` is ``wds_core.open_shard``, and webdataset's spellings
(``wds_jax.shuffle``: :data:`wds_core.WEBDATASET_NAMES`).
"""

from __future__ import annotations

import sys
import types
from typing import Any

__all__ = ["core_attribute"]


def core_attribute(module: str, name: str) -> Any:
    """For an adapter's ``__getattr__``: a ``wds_core`` name outside ``__all__`` (``open_shard``...), else
    AttributeError."""
    core = sys.modules["wds_core"]
    # by attribute: webdataset's spellings are resolved by the core's own __getattr__ (from the drop-in)
    value = getattr(core, name, None) if not name.startswith("_") else None
    if value is None or isinstance(value, types.ModuleType):
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    return value
