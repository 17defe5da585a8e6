"""The TensorFlow adapter of wds: a ``tf.data.Dataset`` from a pipeline.

Everything in :mod:`wds_core` is here too; :class:`TFSource` and
:func:`to_tf_dataset` are the adapter's own pieces (see :mod:`wds_tf.dataset`).
"""

from wds_core import *  # noqa: F401,F403
from wds_core import __all__ as _core_all

from .dataset import TFSource as TFSource
from .dataset import infer_signature as infer_signature
from .dataset import to_tf_dataset as to_tf_dataset

__all__ = sorted(set(_core_all) | {"TFSource", "infer_signature", "to_tf_dataset"})
