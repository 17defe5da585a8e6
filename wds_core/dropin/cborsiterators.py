"""``webdataset.cborsiterators``: records in CBOR files as samples (wds's reader, with its decode limits)."""

from ..handlers import reraise_exception  # noqa: F401 - webdataset's module imports it, and code reaches it here
from ..sources.recordstreams import cbors_to_samples
from . import filters  # noqa: F401
from ._refuse import refuse_missing
from .gopen import as_module as gopen  # noqa: F401 - 0.2's ``cborsiterators.gopen``, the module
from .tariterators import url_opener  # noqa: F401

__all__ = ["cbors2_to_samples", "cbors_to_samples"]

cbors2_to_samples = cbors_to_samples

__getattr__ = refuse_missing(
    __name__,
    {
        name: "a piece of webdataset 0.2's CBOR reader; cbors_to_samples reads the same records, within wds's limits"
        for name in ("cbor_iterator", "cbor2_iterator", "cbors_samples", "cbors2_samples")
    },
)
