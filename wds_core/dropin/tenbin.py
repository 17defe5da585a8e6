"""``webdataset.tenbin``: the tenbin format, read and written by wds's codec (:mod:`wds_core.fieldcodecs.tenbin`);
the format's inner helpers of webdataset's module are not provided (reading one says so)."""

from ..fieldcodecs.tenbin import decode_buffer, encode_buffer, load, read, save, write
from ._refuse import refuse_missing

__all__ = ["decode_buffer", "encode_buffer", "load", "read", "save", "write"]

_INNER = (
    "bytedata bytelen check_acceptable_input_type check_infos decode_chunks decode_header decode_list encode_chunks "
    "encode_header encode_list long_to_short magic magic_bytes magic_str read_chunk roundup short_to_long str64 "
    "unstr64 write_chunk"
).split()

__getattr__ = refuse_missing(
    __name__,
    {
        name: "an inner piece of webdataset's tenbin code; encode_buffer/decode_buffer and save/load/read/write "
        "read and write the format (and the .ten field codec)"
        for name in _INNER
    },
)
