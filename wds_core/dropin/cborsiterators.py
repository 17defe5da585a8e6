"""``webdataset.cborsiterators`` (webdataset 0.2): samples from concatenated CBOR records."""

from ..sources.recordstreams import cbors_to_samples

__all__ = ["cbors2_to_samples", "cbors_to_samples"]

cbors2_to_samples = cbors_to_samples
