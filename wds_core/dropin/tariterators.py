"""``webdataset.tariterators``: shards opened, expanded into files and grouped into samples, step by step.

Training code rebuilds webdataset's reader from these pieces (for instance a
``tarfile_to_samples_nothrow`` that groups with its own function), so they
yield webdataset's shapes: ``url_opener`` adds ``"stream"`` to each
``{"url": ...}``; ``tar_file_expander`` yields ``{"fname", "data", "__url__"}``
per file (and ``"__local_path__"`` when the opener gave ``"local_path"``: ``StreamingOpen`` for local shards,
``FileCache`` for its copies; ``url_opener`` does not, as in webdataset); ``group_by_keys`` turns
those into samples.

Files come from wds's own tar reader and streams from its storage layer
(local, ``pipe:``, fsspec URLs, storage options, retries).  Between shards
``tar_file_expander`` yields nothing by default, as webdataset 0.2.x did:
code written for 0.2.x reads ``item["fname"]`` from every item, which
webdataset 1.x's ``{}`` end-of-shard marker breaks; ``eof_value={}`` gives
1.x's marker.  Our ``group_by_keys`` starts a new sample at a marker *and*
wherever ``__url__`` changes, so samples never span shards either way.

``tarfile_samples``/``tarfile_to_samples`` are wds's reader stage itself
(fast, and checkpointable), until code replaces one of the pieces they are made of (``url_opener``,
``tar_file_expander``, ``tar_file_iterator``, ``group_by_keys``, ``valid_sample``, or ``gopen.gopen``): then they
chain the pieces by their names when they run, as webdataset 1.0.2 does (:mod:`.hooks`).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import braceexpand

from ..errors import SampleError
from ..handlers import Handler, reraise_exception
from ..io.storage import Storage
from ..sources.tarsamples import TarfileToSamples
from ..tar.grouping import is_meta, split_key
from ..tar.tario import iter_members, open_decompressed
from . import filters, hooks  # noqa: F401 - filters: webdataset's module imports it, and code reaches it here
from .gopen import as_module as gopen  # noqa: F401 - webdataset's ``tariterators.gopen``

__all__ = [
    "base_plus_ext",
    "group_by_keys",
    "meta_prefix",
    "meta_suffix",
    "shardlist",
    "tar_file_expander",
    "tar_file_iterator",
    "tarfile_samples",
    "tarfile_to_samples",
    "url_opener",
    "valid_sample",
]

trace = False
meta_prefix = "__"
meta_suffix = "__"


def base_plus_ext(path: str) -> tuple[str, str] | tuple[None, None]:
    """``("dir/abc", "seg.jpg")`` for ``"dir/abc.seg.jpg"``; ``(None, None)`` when the base name has no dot."""
    return split_key(path)


def valid_sample(sample: Any) -> bool:
    """A non-empty dict not marked ``__bad__``."""
    return isinstance(sample, dict) and len(sample) > 0 and not sample.get("__bad__", False)


def shardlist(urls: str | list[str], *, shuffle: bool = False) -> Iterator[dict[str, str]]:
    """``{"url": ...}`` for each URL of a brace spec or list (shuffled with the global ``random`` if asked)."""
    expanded = list(braceexpand.braceexpand(urls)) if isinstance(urls, str) else list(urls)
    if shuffle:
        random.shuffle(expanded)
    for url in expanded:
        yield {"url": url}


def url_opener(
    data: Iterable[Any], handler: Handler = reraise_exception, storage_options: Storage | dict | None = None, **kw: Any
) -> Iterator[dict[str, Any]]:
    """Add ``"stream"`` (an open binary stream) to each ``{"url": ...}`` item; failures go to ``handler``.

    ``kw`` are webdataset's ``gopen`` options (``bufsize``...): accepted and ignored, as wds opens shards
    unbuffered with its own read-ahead.
    """
    storage = Storage.of(storage_options)
    replaced = hooks.replacement("gopen", "gopen")  # webdataset opens with gopen.gopen(url, **kw)
    for item in data:
        sample = dict(item) if isinstance(item, dict) else {"url": item}
        try:
            sample["stream"] = replaced(sample["url"], **kw) if replaced is not None else storage.open(sample["url"])
        except Exception as exn:
            if handler(exn):
                continue
            break
        yield sample


def _files(
    fileobj: Any,
    skip_meta: str | None,
    select_files: Callable[[str], bool] | None,
    rename_files: Callable[[str], str] | None,
) -> Iterator[dict[str, Any]]:
    skip = re.compile(skip_meta) if skip_meta is not None else None

    def wanted(name: str) -> bool:
        if is_meta(name) or (skip is not None and skip.match(name)):
            return False
        if rename_files is not None:
            name = rename_files(name)
        return select_files is None or bool(select_files(name))

    tar, _ = open_decompressed(fileobj)
    for name, data, _offset in iter_members(tar, getattr(fileobj, "name", None) or repr(fileobj), want=wanted):
        yield {"fname": rename_files(name) if rename_files is not None else name, "data": data}


def tar_file_iterator(
    fileobj: Any,
    skip_meta: str | None = r"__[^/]*__($|/)",
    handler: Handler = reraise_exception,
    select_files: Callable[[str], bool] | None = None,
    rename_files: Callable[[str], str] | None = None,
) -> Iterator[dict[str, Any]]:
    """``{"fname", "data"}`` for each regular file of a (possibly compressed) tar stream.

    Metadata members (``__name__`` at the top, and what ``skip_meta`` matches)
    are skipped; ``rename_files`` renames before ``select_files`` chooses.  A
    corrupt or truncated tar is an error for ``handler``, after the files
    before the problem; a tar stream cannot be read past such a problem, so
    the iterator ends there whatever the handler returns.
    """
    try:
        yield from _files(fileobj, skip_meta, select_files, rename_files)
    except Exception as exn:
        handler(exn)


def tar_file_expander(
    data: Iterable[dict[str, Any]],
    handler: Handler = reraise_exception,
    select_files: Callable[[str], bool] | None = None,
    rename_files: Callable[[str], str] | None = None,
    eof_value: Any = None,
) -> Iterator[dict[str, Any]]:
    """The files of each opened shard (``{"url", "stream"}`` items), as ``{"fname", "data", "__url__"}``.

    ``eof_value`` (``None``: nothing) is yielded after each shard; each stream
    is closed once read.  Errors go to ``handler``: ``True`` moves on to the
    next shard, ``False`` ends the stream.
    """
    for source in data:
        url = source.get("url")
        path = source.get("local_path")  # only where the opener said it (StreamingOpen, FileCache), as in webdataset
        stream = source.get("stream")
        iterate = hooks.replacement("tariterators", "tar_file_iterator")
        try:
            try:
                files = (
                    _files(stream, r"__[^/]*__($|/)", select_files, rename_files)
                    if iterate is None
                    else iterate(stream, handler=handler, select_files=select_files, rename_files=rename_files)
                )
                for sample in files:
                    sample["__url__"] = url
                    if path is not None:
                        sample["__local_path__"] = path
                    yield sample
            finally:
                closer = getattr(stream, "close", None)
                if closer is not None:
                    closer()
        except Exception as exn:
            if handler(exn):
                continue
            return
        if eof_value is not None:
            yield eof_value


def group_by_keys(
    data: Iterable[dict[str, Any]],
    keys: Callable[[str], tuple[Any, Any]] = base_plus_ext,
    lcase: bool = True,
    suffixes: set[str] | None = None,
    handler: Handler = reraise_exception,
) -> Iterator[dict[str, Any]]:
    """Consecutive files with the same key (``keys(fname)[0]``) as one sample ``{"__key__", "__url__", ext: data}``.

    A new sample starts at a new key, at an end-of-shard marker (an item
    without ``"fname"``, such as ``{}``) and where ``__url__`` changes; a file
    whose extension the current sample already has is a
    :class:`~wds_core.errors.SampleError` for ``handler``.  ``suffixes`` keeps
    only those extensions.
    """
    current: dict[str, Any] | None = None
    for item in data:
        if not isinstance(item, dict) or "fname" not in item:
            if valid_sample(current):
                yield current  # type: ignore[misc]
            current = None
            continue
        try:
            prefix, suffix = keys(item["fname"])
            if prefix is None:
                continue
            if lcase:
                suffix = suffix.lower()
            url = item.get("__url__")
            if current is None or prefix != current["__key__"] or url != current["__url__"]:
                if valid_sample(current):
                    yield current  # type: ignore[misc]
                current = {"__key__": prefix, "__url__": url}
                if "__local_path__" in item:
                    current["__local_path__"] = item["__local_path__"]
            if suffix in current:
                raise SampleError(f"field {suffix!r} occurs twice in sample {prefix!r}", url=url, member=item["fname"])
            if suffixes is None or suffix in suffixes:
                current[suffix] = item["data"]
        except Exception as exn:
            if handler(exn):
                continue
            break
    if valid_sample(current):
        yield current  # type: ignore[misc]


def tarfile_samples(
    src: Iterable[Any],
    handler: Handler = reraise_exception,
    select_files: Callable[[str], bool] | None = None,
    rename_files: Callable[[str], str] | None = None,
) -> Iterator[dict[str, Any]]:
    """Samples from an iterator of shard URLs or ``{"url": ...}``: wds's reader stage run on it, or the pieces
    chained by their names when code replaced one."""
    if hooks.replaced_any(_PIECES):
        return _chained(src, handler, select_files, rename_files)
    return iter(TarfileToSamples(handler, select_files, rename_files)(iter(src)))


# what tarfile_samples is made of in webdataset 1.0.2, looked up when it runs
_PIECES = (*(("tariterators", name) for name in hooks.HOOKS["tariterators"]), ("gopen", "gopen"))


def _chained(
    src: Iterable[Any],
    handler: Handler,
    select_files: Callable[[str], bool] | None,
    rename_files: Callable[[str], str] | None,
) -> Iterator[dict[str, Any]]:
    """webdataset's ``tarfile_samples``: the pieces of this module, whatever they are now."""
    streams = url_opener(src, handler=handler)
    files = tar_file_expander(streams, handler=handler, select_files=select_files, rename_files=rename_files)
    return iter(group_by_keys(files, handler=handler))


class HookedTarfileToSamples(TarfileToSamples):
    """``tarfile_to_samples()``'s stage: wds's reader, or :func:`tarfile_samples`'s chain of pieces when code
    replaced one before the stage runs (webdataset's looks the pieces up then)."""

    def build(self, src: Any, ctx: Any) -> Any:
        if hooks.replaced_any(_PIECES):
            options = self.options
            return _chained(src, options.handler, options.select_files, options.rename_files)
        return super().build(src, ctx)


def tarfile_to_samples(
    handler: Handler = reraise_exception,
    select_files: Callable[[str], bool] | None = None,
    rename_files: Callable[[str], str] | None = None,
    storage_options: dict | None = None,
    cache: Any = None,
    retry: Any = None,
    limits: Any = None,
    zero_copy: bool = False,
) -> TarfileToSamples:
    """webdataset's ``tarfile_to_samples()`` stage, with wds's options (:func:`wds_core.tarfile_to_samples`)."""
    return HookedTarfileToSamples(
        handler, select_files, rename_files, storage_options, cache, retry, limits, zero_copy=zero_copy
    )
