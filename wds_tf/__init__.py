"""The TensorFlow adapter of wds: a ``tf.data.Dataset`` from a pipeline.

Everything in :mod:`wds_core` is here too; :class:`TFSource`,
:func:`to_tf_dataset` and :func:`infer_signature` are the adapter's own pieces
(see :mod:`wds_tf.dataset`).  TensorFlow is imported when one of them is first
used, so that processes which only run pipelines (such as
:class:`~wds_core.Loader` workers re-importing a training script) start fast.
"""

from typing import Any

from wds_core import *  # noqa: F401,F403
from wds_core import __all__ as _core_all
from wds_core.reexport import core_attribute

_ADAPTER_NAMES = ("TFSource", "infer_signature", "to_tf_dataset")
__all__ = sorted(set(_core_all) | set(_ADAPTER_NAMES))


def __getattr__(name: str) -> Any:
    if name in _ADAPTER_NAMES:
        from . import dataset

        return getattr(dataset, name)
    return core_attribute(__name__, name)  # open_shard, iter_members...: wds_core names outside __all__
