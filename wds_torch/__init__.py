"""The PyTorch adapter of wds: ``import wds_torch as wds`` instead of ``import webdataset as wds``.

Everything in :mod:`wds_core` is here, with ``WebDataset`` and ``DataPipeline``
being ``torch.utils.data.IterableDataset``s, plus ``WebLoader``, the torch
image specs (``"torchrgb8"``...), ``.pth`` fields, ``torch_video`` and
``torch_audio``, and :func:`to_device` (batches decoded and cut on the GPU, from ``crop_images(...,
device="cuda")``).
"""

import importlib
import importlib.abc
import importlib.util
import sys
from typing import Any

import wds_core.stages.devicecrop
import wds_core.state
from wds_core import *  # noqa: F401,F403
from wds_core import WEBDATASET_NAMES as _core_webdataset_names
from wds_core import __all__ as _core_all
from wds_core.reexport import core_attribute

from . import codecs as _codecs
from . import datasets as _datasets
from . import device as _device
from . import devicecut as _devicecut
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

# webdataset's forms of these names, as the design's drop-in (``import wds_torch as wds``) gives them:
# TarWriter(fileobj, user, group, mode, ...), decode's and Decoder's handler lists, splitters and tarfile_to_samples
# that honour webdataset's replaced hooks; from the drop-in, loaded when one of them is first asked for
WEBDATASET_FORMS = frozenset(
    {"Decoder", "TarWriter", "decode", "single_node_only", "split_by_node", "split_by_worker", "tarfile_to_samples"}
)
for _name in WEBDATASET_FORMS:
    del globals()[_name]

# a DataLoader read by a pipeline run stops its workers when the run is closed (the pipeline knows no framework)
wds_core.state.plug_in(source_closer=_datasets.stop_workers)
_codecs.register()  # torch's image specs and .pth codecs, in the core's tables
wds_core.stages.devicecrop.register_pinner(_devicecut.pin_planned)  # DataLoader's pin-memory thread pins plans

_TORCH_NAMES = [*_datasets.__all__, *_device.__all__, *_indexed.__all__, *_codecs.__all__, "install_as_webdataset"]
# wds_core's native names, the torch ones, and webdataset's spellings, which come through wds_torch (the core
# gives them by attribute only)
__all__ = sorted(set(_core_all) | set(_TORCH_NAMES) | _core_webdataset_names)


# webdataset's submodules with the PyTorch classes (``wds_torch.filters``...: :mod:`wds_torch.dropin`), made when
# first asked for, by attribute or by ``import wds_torch.filters``; ``gopen`` is the function as an attribute, as in
# webdataset, so its module comes only once the drop-in is loaded
WEBDATASET_MODULES = frozenset(
    {"autodecode", "cache", "cborsiterators", "compat", "extradatasets", "filters", "handlers", "mix", "multi",
     "pipeline", "pytorch", "shardlists", "tariterators", "tenbin", "utils", "writer"}
)  # fmt: skip


def __getattr__(name: str) -> Any:
    """wds_core's names outside ``__all__`` (``open_shard``...), then webdataset's names and modules, from the
    drop-in (loaded the first time one is asked for: ``import wds_torch`` loads none of it)."""
    if name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _core_webdataset_names and name not in WEBDATASET_FORMS:
        try:
            return core_attribute(__name__, name)
        except AttributeError:
            pass
    namespace = _dropin().NAMESPACE
    if name in namespace:
        return namespace[name]
    return core_attribute(__name__, name)  # a webdataset spelling with nothing of PyTorch (``Processor``...)


def _dropin() -> Any:
    """:mod:`wds_torch.dropin`, imported by name (``from . import dropin`` would ask this module's ``__getattr__``)."""
    return importlib.import_module(f"{__name__}.dropin")


class _WebDatasetModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import wds_torch.filters`` (one of :data:`WEBDATASET_MODULES`): the drop-in's module, loaded on demand.

    Last on ``sys.meta_path``: asked only about modules no other finder has, and answers only for these names.
    """

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        package, _, name = fullname.partition(".")
        if package != __name__ or name not in WEBDATASET_MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: Any) -> Any:
        return _dropin().MODULES[spec.name.partition(".")[2]]

    def exec_module(self, module: Any) -> None:
        pass  # the drop-in made it


if not any(isinstance(finder, _WebDatasetModules) for finder in sys.meta_path):
    sys.meta_path.append(_WebDatasetModules())


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
    return _dropin().install({name: getattr(this, name) for name in __all__}, verbose)
