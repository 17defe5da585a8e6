"""The core's indexed access as PyTorch types: a map-style ``Dataset`` and ``Sampler``s.

``ShardListDataset`` is :class:`wds_core.ShardListDataset` as a
``torch.utils.data.Dataset`` (use it with any sampler and ``DataLoader``
batching); ``ChunkedSampler`` and ``DistributedChunkedSampler`` are the core
samplers as ``torch.utils.data.Sampler``s.  Explicit ``rank``/``num_replicas``
are always respected; otherwise they come from ``torch.distributed``.
"""

from __future__ import annotations

import torch.utils.data

import wds_core

__all__ = ["ChunkedSampler", "DistributedChunkedSampler", "ShardListDataset"]


class ShardListDataset(wds_core.ShardListDataset, torch.utils.data.Dataset):
    """:class:`wds_core.ShardListDataset` as a map-style PyTorch ``Dataset``."""


class ChunkedSampler(wds_core.ChunkedSampler, torch.utils.data.Sampler):
    """:class:`wds_core.ChunkedSampler` as a PyTorch ``Sampler``."""


class DistributedChunkedSampler(wds_core.DistributedChunkedSampler, torch.utils.data.Sampler):
    """:class:`wds_core.DistributedChunkedSampler` as a PyTorch ``Sampler`` (call ``set_epoch`` each epoch)."""
