"""Members to samples: webdataset's key rules and the grouping of a shard's members.

A member ``dir/abc.seg.JPG`` belongs to the sample with key ``dir/abc`` (the path
up to the first dot of the basename) under the field ``seg.jpg`` (the rest,
lower-cased).  Consecutive members with the same key form one sample; samples
never span shards; top-level ``__*__`` members are metadata and skipped, and so
are members whose basename has no dot.  A field given twice in one sample is an
error.

The common case, plain members with ASCII names, is grouped in C when the optional
helper ``wds_core.groupfast`` (groupfast.c) was built; it leaves the first member
that is not such a member, and everything after it, to the Python loop here, with
the same results (tests/core/test_grouping.py compares them).  ``WDS_GROUPFAST=python``
leaves it unused.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterator
from typing import Any

from .._native import load
from ..errors import OverLimitError, SampleError, ShardOpenError, TarFormatError
from ..limits import DecodeLimits
from .cursor import Cursor
from .keys import is_meta, split_key
from .members import Item, Refused

__all__ = ["group_members", "is_meta", "split_key"]


def _grouper() -> Any:
    """The C grouping of plain members (groupfast.c), unless it was not built or ``WDS_GROUPFAST=python``."""
    module = load("groupfast")
    return None if module is None else module.Grouper


GROUPER = _grouper()  # read at each grouping: tests set it to None for the Python loop alone


def _starts_another(member: str | None, key: str | None, rename: Callable[[str], str] | None) -> bool:
    if member is None:
        return False
    return split_key(rename(member) if rename is not None else member)[0] not in (None, key)


def _refused_key(name: str | None, rename: Callable[[str], str] | None) -> str | None:
    """The sample key of a refused member (``None``: global records, metadata or no key)."""
    if name is None or (name[:1] == "_" and is_meta(name)):
        return None
    return split_key(rename(name) if rename is not None else name)[0]


def group_members(
    members: Iterator[Item],
    url: str,
    *,
    path: str | None = None,
    cursor: Cursor | None = None,
    rename: Callable[[str], str] | None = None,
    limits: DecodeLimits | None = None,
    refused: Callable[[OverLimitError], bool] | None = None,
) -> Iterator[dict[str, Any]]:
    """Group the members of one shard into samples: ``{"__key__", "__url__"}`` and the fields, and
    ``"__local_path__": path`` when ``path`` is given (where webdataset says it: a local shard read by
    ``WebDataset``, or the cached copy of a shard).

    When ``cursor`` is given, it is set just before each sample is yielded to
    where the following sample starts: the offset of its first member's first
    header and that member's name (``-1`` and ``None`` after the last one).  A
    sample whose members add up to more than
    ``limits.sample_bytes`` is refused (an :class:`OverLimitError` naming the
    member that passed the limit) before the next member is read.

    Without ``refused``, a refusal is raised (the sample before it is delivered
    first when it is complete).  With it, the refused sample is dropped with all
    its members, ``refused(error)`` is called, and grouping goes on while it
    returns true.  Members the reader refused arrive as a :class:`~.members.Refused`
    (:func:`~wds_core.tar.tario.iter_members` with ``over_limit="skip"``); one that
    grouping would skip anyway (metadata, no key) costs nothing and is not reported.

    When the shard turns out cut or damaged (a :class:`TarFormatError`) or its
    stream fails, the members of the sample in progress that were read whole
    are left in ``cursor.partial`` before the error is raised: a reader whose
    handler goes on delivers them, as webdataset does.

    Its loop runs once a member wherever the compiled grouper cannot take them
    (renamed members, refusals, ``WDS_PURE_PYTHON=1``): a hot loop kept in one
    function, its state in locals (``WDS_PURE_PYTHON=1 python benchmarks/bench_local.py --rows read`` measures it).
    """
    key = None
    sample: dict[str, Any] | None = None
    budget = sys.maxsize if limits is None else limits.sample_bytes
    left = budget  # bytes the sample being built may still take
    grouper = GROUPER(members, url, path, budget, cursor) if GROUPER is not None and rename is None else None
    try:
        if grouper is not None:  # the plain members in C, up to the first it leaves to the loop below
            yield from grouper
            handed = grouper.handed()
            if handed is None:  # the members ended, and the last sample is delivered
                return
            key, sample, left = grouper.state()
            members = itertools.chain((handed,), members)
            grouper = None
        for item in members:
            if isinstance(item, Refused):  # refused by the reader and streamed past
                name, error, offset = item
                k = _refused_key(name, rename)
                if k is None and name is not None:  # a member grouping skips anyway: nothing is lost
                    continue
                if sample is not None and (k != key if k is not None else error.member is None):
                    # the sample before it is complete (an unnamed refusal, of extension headers reported before
                    # the member they describe is known, or of global records, is taken to start another)
                    if cursor is not None:
                        cursor.at(offset, name)
                    yield sample
                    sample = None
                if refused is None:
                    raise error
                if k is not None:
                    key, sample = k, None  # dropped, and the rest of its members after it
                if not error.repeats and not refused(error):
                    return
                continue
            name, data, offset = item
            if name[:1] == "_" and is_meta(name):
                continue
            raw = name  # as its header says it: what a restore finds at the offset
            if rename is not None:
                name = rename(name)
            k, named = split_key(name)
            if k is None or named is None:
                continue
            field = named.lower()
            if k != key:
                if sample is not None:
                    if cursor is not None:
                        cursor.at(offset, raw)
                    yield sample
                key = k
                left = budget
                sample = {"__key__": k, "__url__": url}
                if path is not None:
                    sample["__local_path__"] = path
            elif sample is None:  # the rest of a refused sample
                continue
            elif field in sample:
                raise SampleError(f"field {field!r} occurs twice in sample {k!r}", url=url, member=name, offset=offset)
            left -= len(data)
            if left < 0 and limits is not None:  # (no limits: the budget is unbounded)
                what = f"the members of sample {k!r} add up to"
                where = {"url": url, "member": name, "offset": offset}
                over = limits.over(what, budget - left, "sample_bytes", "tarfile_to_samples", **where)
                if refused is None:
                    raise over
                sample = None
                if not refused(over):
                    return
                continue
            sample[field] = data
    except OverLimitError as exn:  # a reader's refusal of the next member: the sample before it is complete
        if grouper is not None:
            key, sample, left = grouper.state()
        if sample is not None and _starts_another(exn.member, key, rename):
            if cursor is not None and exn.offset is not None:
                cursor.at(exn.offset, exn.member)
            yield sample
        raise
    except (TarFormatError, ShardOpenError):  # the shard is cut or damaged, or its stream failed
        if grouper is not None:
            key, sample, left = grouper.state()
        if cursor is not None and sample is not None and len(sample) > 2 + (path is not None):
            cursor.partial = sample  # its members read whole, for a reader whose handler goes on
        raise
    if sample is not None:
        if cursor is not None:
            cursor.at(-1)
        yield sample
