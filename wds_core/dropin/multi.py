"""``webdataset.multi``: webdataset's ZeroMQ ``MultiLoader`` is not provided; ``wds_core.Loader`` does its job."""

from ._refuse import refuse_missing, refused_class

__all__ = ["MultiLoader"]

__getattr__ = refuse_missing(
    __name__,
    {
        name: "an inner piece of MultiLoader, which is not provided"
        for name in ("EOF", "all_pids", "reader", "the_protocol")
    },
)

MultiLoader = refused_class(
    "multi.MultiLoader",
    "it runs a dataset in processes over ZeroMQ; wds_core.Loader(dataset, num_workers=N) does that "
    "(and checkpoints), or use a DataLoader",
)
