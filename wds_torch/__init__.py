"""The PyTorch adapter of wds: ``import wds_torch as wds`` instead of ``import webdataset as wds``.

Everything in :mod:`wds_core` is here, with ``WebDataset`` and ``DataPipeline``
being ``torch.utils.data.IterableDataset``s, plus ``WebLoader``, the torch
image specs (``"torchrgb8"``...), ``.pth`` fields, ``torch_video`` and
``torch_audio``.
"""

from wds_core import *  # noqa: F401,F403
from wds_core import __all__ as _core_all

from .codecs import torch_audio as torch_audio
from .codecs import torch_loads as torch_loads
from .codecs import torch_video as torch_video
from .datasets import DataPipeline as DataPipeline
from .datasets import EpochLoader as EpochLoader
from .datasets import RandomMix as RandomMix
from .datasets import RoundRobin as RoundRobin
from .datasets import WebDataset as WebDataset
from .datasets import WebLoader as WebLoader
from .indexed import ChunkedSampler as ChunkedSampler
from .indexed import DistributedChunkedSampler as DistributedChunkedSampler
from .indexed import ShardListDataset as ShardListDataset

_TORCH_NAMES = [
    "ChunkedSampler",
    "DataPipeline",
    "DistributedChunkedSampler",
    "EpochLoader",
    "RandomMix",
    "RoundRobin",
    "ShardListDataset",
    "WebDataset",
    "WebLoader",
    "torch_audio",
    "torch_loads",
    "torch_video",
]
__all__ = sorted(set(_core_all) | set(_TORCH_NAMES))
