"""The PyTorch adapter of wds: ``import wds_torch as wds`` instead of ``import webdataset as wds``.

Everything in :mod:`wds_core` is here, with ``WebDataset`` and ``DataPipeline``
being ``torch.utils.data.IterableDataset``s, plus ``WebLoader``, the torch
image specs (``"torchrgb8"``...), ``.pth`` fields, ``torch_video`` and
``torch_audio``, and :func:`to_device` (batches decoded and cut on the GPU, from ``crop_images(...,
device="cuda")``).
"""

import sys
from typing import Any

from wds_core import *  # noqa: F401,F403
from wds_core import WEBDATASET_NAMES as _core_webdataset_names
from wds_core import FluidInterface as _core_FluidInterface
from wds_core import __all__ as _core_all
from wds_core import batched as _core_batched
from wds_core.reexport import core_attribute

from . import codecs as _codecs
from . import datasets as _datasets
from . import device as _device
from . import dropin as _dropin
from . import indexed as _indexed
from .codecs import torch_audio as torch_audio
from .codecs import torch_dumps as torch_dumps
from .codecs import torch_loads as torch_loads
from .codecs import torch_video as torch_video
from .datasets import DataPipeline as DataPipeline
from .datasets import DirectoryShardList as DirectoryShardList
from .datasets import EpochLoader as EpochLoader
from .datasets import FluidWrapper as FluidWrapper
from .datasets import MockDataset as MockDataset
from .datasets import MultiShardSample as MultiShardSample
from .datasets import RandomMix as RandomMix
from .datasets import ResampledShards as ResampledShards
from .datasets import RoundRobin as RoundRobin
from .datasets import SimpleShardList as SimpleShardList
from .datasets import WebDataset as WebDataset
from .datasets import WebLoader as WebLoader
from .device import DeviceBatches as DeviceBatches
from .device import to_device as to_device
from .devicecut import cut_planned as cut_planned
from .devicecut import decode_planned as decode_planned
from .devicecut import device_decoder as device_decoder
from .indexed import ChunkedSampler as ChunkedSampler
from .indexed import DistributedChunkedSampler as DistributedChunkedSampler
from .indexed import ShardListDataset as ShardListDataset

# webdataset's submodules with the PyTorch classes (wds_torch.filters, wds_torch.tariterators...) and its
# top-level names from them (wds_torch.gopen is the function, as webdataset.gopen is)
globals().update(_dropin.NAMESPACE)
# but wds's own where webdataset's differ on purpose: the loader that tells its dataset each epoch (webdataset's,
# through the switch, leaves it as the code sets it), and batching that hands a full batch on at once
# (webdataset's waits for the next item)
WebLoader = _datasets.WebLoader  # type: ignore[misc]  # noqa: F811
WebDataset = _datasets.WebDataset  # type: ignore[misc]  # noqa: F811
FluidWrapper = _datasets.FluidWrapper  # type: ignore[misc]  # noqa: F811
FluidInterface = _core_FluidInterface  # type: ignore[misc]  # noqa: F811
batched = _core_batched  # type: ignore[misc]  # noqa: F811

_TORCH_NAMES = [*_datasets.__all__, *_device.__all__, *_indexed.__all__, *_codecs.__all__, "install_as_webdataset"]
# wds_core's native names, the torch ones, and webdataset's spellings, which come through wds_torch (the core
# gives them by attribute only)
__all__ = sorted(set(_core_all) | set(_TORCH_NAMES) | _core_webdataset_names)


def __getattr__(name: str) -> Any:
    return core_attribute(__name__, name)  # open_shard, iter_members...: wds_core names outside __all__


def install_as_webdataset(verbose: bool = True) -> Any:  # type: ignore[no-redef]  # noqa: F811 - the torch one
    """Make ``import webdataset`` (and ``webdataset.filters``, ``.tariterators``...) give ``wds_torch``, and
    ``import wids`` its wids (:mod:`wds_core.dropin.wids`, with PyTorch's ``Dataset`` and ``Sampler``).

    One line at the top of a training script, before anything imports
    webdataset, and the script's ``import webdataset as wds`` and ``from
    webdataset.filters import _shuffle`` use wds; ``python -m wds_torch.run
    train.py ARGS`` does it without editing the script (DataLoader workers
    too).  Safe when the real webdataset is installed: it is simply not used
    (a warning if it was already imported).  Says which package is active
    (``webdataset.__wds__``, the ``wds`` logger, one stderr line when
    ``verbose``); ``wds_core.dropin.uninstall()`` undoes it.
    """
    this = sys.modules[__name__]  # by attribute: the names __all__ has from wds_core's __getattr__ too
    return _dropin.install({name: getattr(this, name) for name in __all__}, verbose)
