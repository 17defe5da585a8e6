"""webdataset's module tree with the PyTorch classes: ``wds_torch.filters``, ``wds_torch.tariterators``...

Each module is :mod:`wds_core.dropin`'s of the same name, with the names this
adapter defines for PyTorch put in place of the core's (``DataPipeline``,
``WebDataset``, ``WebLoader`` and the shard lists as ``IterableDataset``s, the
``torch_*`` codecs, ``pytorch.DataLoader``...).  The modules are registered as
``wds_torch.<name>`` in ``sys.modules``, so ``from wds_torch.filters import
_shuffle`` works, and :func:`wds_torch.install_as_webdataset` makes them
``webdataset.<name>``.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import torch
import torch.utils.data

from wds_core import dropin
from wds_core.dropin import compat, hooks, wids
from wds_core.dropin.widssamplers import distributed_chunked_sampler

from . import codecs, datasets, indexed

__all__ = ["MODULES", "NAMESPACE", "WIDS", "CompatFluidWrapper", "CompatWebDataset", "CompatWebLoader", "install"]


class CompatWebDataset(datasets.WebDataset, dropin.FluidInterface):
    """webdataset's ``WebDataset``, as ``webdataset.WebDataset`` gives it through the drop-in: ``.batched(n)`` hands
    a full batch on once the item after it has come, as webdataset's does
    (:class:`wds_core.stages.batching.ReadAheadBatch`).  Replaced pieces of webdataset's reader and splitters
    are used as webdataset uses them (:mod:`wds_core.dropin.hooks`).
    """

    __init__ = compat.webdataset_init
    reader_stages = compat.reader_stages
    splitter_stage = compat.splitter_stage


class CompatFluidWrapper(datasets.FluidWrapper, dropin.FluidInterface):
    """webdataset's ``FluidWrapper``, batching as webdataset does (see :class:`CompatWebDataset`)."""


class CompatWebLoader(datasets.WebLoader, dropin.FluidInterface):
    """webdataset's ``WebLoader``, as ``webdataset.WebLoader`` gives it through the drop-in: the dataset's epoch is
    left as the code sets it.  With workers started anew each epoch, a stage seeded once (``detshuffle(...,
    seed=S)``, ``shuffle(n, seed=S)``) then starts from the same state every epoch and repeats its order, as in
    webdataset, where each worker gets a fresh copy of the stages.  ``.batched(n)`` batches as webdataset's does
    (see :class:`CompatWebDataset`)."""

    sets_epoch = False
    knows_batches = False  # a DataLoader's batch_size=1 over batches, as webdataset's does


# what PyTorch changes in webdataset's modules, by name
_TORCH: dict[str, Any] = {
    **{name: getattr(datasets, name) for name in datasets.__all__},
    **{name: getattr(codecs, name) for name in codecs.__all__},
    **{name: getattr(indexed, name) for name in indexed.__all__},
    "ResampledShardList": datasets.ResampledShards,
    "WebDataset": CompatWebDataset,  # webdataset's: .batched(n) reads one item ahead
    "FluidWrapper": CompatFluidWrapper,
    "WebLoader": CompatWebLoader,  # webdataset's: it leaves the dataset's epoch as the code sets it
    "IterableDataset": torch.utils.data.IterableDataset,
    "DataLoader": torch.utils.data.DataLoader,
    "TorchTensor": torch.Tensor,
}


def _with_torch(name: str, core: types.ModuleType) -> types.ModuleType:
    # the same kind (utils has a live enforce_security), whose assignments of webdataset's hooks reach wds's module
    module = hooks.write_through(type(core))(f"{__package__}.{name}", core.__doc__)
    module.__dict__.update({k: v for k, v in vars(core).items() if k not in ("__name__", "__doc__", "__spec__")})
    module.__dict__.update({k: v for k, v in _TORCH.items() if k in module.__dict__})
    sys.modules[module.__name__] = module
    return hooks.track(module)


class WidsShardListDataset(wids.ShardListDataset, torch.utils.data.Dataset):
    """wids's ``ShardListDataset`` (:mod:`wds_core.dropin.wids`) as a PyTorch ``Dataset``, as wids's is."""


class WidsChunkedSampler(wids.ChunkedSampler, torch.utils.data.Sampler):
    """wids's ``ChunkedSampler`` as a PyTorch ``Sampler``."""


class WidsShardListSampler(wids.ShardListSampler, torch.utils.data.Sampler):
    """wids's ``ShardListSampler`` (``ShardedSampler``) as a PyTorch ``Sampler``."""


WIDS: dict[str, types.ModuleType] = wids.wids_modules(
    "wds_torch",
    {
        "ShardListDataset": WidsShardListDataset,
        "ChunkedSampler": WidsChunkedSampler,
        "ShardListSampler": WidsShardListSampler,
        "ShardedSampler": WidsShardListSampler,
        "DistributedChunkedSampler": distributed_chunked_sampler(WidsChunkedSampler),
    },
)

MODULES: dict[str, types.ModuleType] = {name: _with_torch(name, core) for name, core in dropin.MODULES.items()}
# a module's names for its sibling modules (webdataset's ``filters.utils``, ``compat.shardlists``...) are the
# siblings with the PyTorch classes too
_SIBLINGS = {id(core): MODULES[name] for name, core in dropin.MODULES.items()}
for _module in MODULES.values():
    _module.__dict__.update(
        {
            k: _SIBLINGS[id(v)]
            for k, v in vars(_module).items()
            if isinstance(v, types.ModuleType) and id(v) in _SIBLINGS
        }
    )
NAMESPACE: dict[str, Any] = dropin.top_level(MODULES)  # webdataset's top-level names, from these modules


def install(facade: dict[str, Any], verbose: bool = True) -> types.ModuleType:
    """:func:`wds_torch.install_as_webdataset` with ``facade``, the names of ``wds_torch`` (given by the package,
    which this module does not import: it lies below it)."""
    namespace = dict(facade)
    namespace.update(NAMESPACE)
    return dropin.install(namespace, MODULES, "wds_torch", verbose, wids=WIDS)
