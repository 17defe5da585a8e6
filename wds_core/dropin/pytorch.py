"""``webdataset.pytorch``: the PyTorch classes webdataset builds on; without PyTorch, stand-ins.

``wds_torch`` replaces them with ``torch.utils.data.IterableDataset``,
``DataLoader`` and ``torch.Tensor``.
"""

from ._refuse import refused_class

__all__ = ["DataLoader", "IterableDataset", "TorchTensor"]


class IterableDataset:
    """Stand-in base class when PyTorch is not used (webdataset defines the same)."""


class TorchTensor:
    """Stand-in tensor type when PyTorch is not used: nothing is an instance of it."""


DataLoader = refused_class("pytorch.DataLoader", "it is PyTorch's: import wds_torch, or use wds_core.Loader")
