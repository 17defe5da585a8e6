"""``webdataset.multi``: webdataset's ZeroMQ ``MultiLoader`` is not provided; ``wds_core.Loader`` does its job."""

from ._refuse import refused_class

__all__ = ["MultiLoader"]

MultiLoader = refused_class(
    "multi.MultiLoader",
    "it runs a dataset in processes over ZeroMQ; wds_core.Loader(dataset, num_workers=N) does that "
    "(and checkpoints), or use a DataLoader",
)
