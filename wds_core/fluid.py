"""``WebDataset`` and the fluid methods (``.shuffle().to_tuple().batched()``...).

Each fluid method returns a new pipeline with one more stage; the pipeline it
was called on is left as it was.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from .balanced import BalancedSplit
from .buffers import Batch, Shuffle, Slice, Unbatch
from .cache import ShardCache
from .collate import default_collation_fn
from .decode import decode
from .dist import node_info, worker_info
from .errors import SpecError
from .handlers import reraise_exception
from .pipeline import DataPipeline
from .remote import RetryPolicy
from .samples import TarfileToSamples
from .shards import ResampledShards, SimpleShardList, split_by_node, split_by_worker
from .shardsources import DirectoryShardList
from .stages import Map, MapDict, MapTuple, Rename, Select, ToTuple

__all__ = ["FluidInterface", "FluidWrapper", "WebDataset"]

Handler = Callable[[BaseException], bool]


class FluidInterface:
    """The chainable methods shared by ``WebDataset`` and ``DataPipeline`` subclasses."""

    def compose(self, *stages: Any) -> Any:  # pragma: no cover - provided by DataPipeline
        raise NotImplementedError

    def batched(
        self, batchsize: int, collation_fn: Callable | None = default_collation_fn, partial: bool = True
    ) -> Any:
        """Group items into batches of ``batchsize``, collated by ``collation_fn`` (numpy arrays by default).

        ``partial=False`` drops a last batch that is not full; ``collation_fn=None`` gives lists.
        """
        return self.compose(Batch(batchsize, collation_fn, partial))

    def unbatched(self) -> Any:
        """Split batches (tuples of arrays, dicts of arrays, lists) back into single items."""
        return self.compose(Unbatch())

    def listed(self, batchsize: int, partial: bool = True) -> Any:
        """Group items into plain lists of ``batchsize`` (no collation)."""
        return self.compose(Batch(batchsize, None, partial))

    def unlisted(self) -> Any:
        """Split lists back into their items (the inverse of :meth:`listed`)."""
        return self.compose(Unbatch(lists="items"))

    def shuffle(self, size: int, **kw: Any) -> Any:
        """Shuffle through a buffer of ``size`` items (see :class:`~wds_core.buffers.Shuffle`); ``size < 1``: none."""
        stage = Shuffle(max(size, 1), **kw)  # arguments are checked even when there is nothing to shuffle
        return self if size < 1 else self.compose(stage)

    def map(self, f: Callable, handler: Handler = reraise_exception) -> Any:
        """Replace each item by ``f(item)``; an exception goes to ``handler`` (raise by default)."""
        return self.compose(Map(f, handler=handler))

    def map_dict(self, handler: Handler = reraise_exception, **kw: Callable) -> Any:
        """Apply functions to fields by name: ``map_dict(jpg=resize, cls=int)``."""
        return self.compose(MapDict(handler=handler, **kw))

    def select(self, predicate: Callable, handler: Handler = reraise_exception) -> Any:
        """Keep the items for which ``predicate(item)`` is true."""
        return self.compose(Select(predicate, handler=handler))

    def to_tuple(self, *fields: str, **kw: Any) -> Any:
        """Tuples of fields: ``to_tuple("jpg;png", "cls")``; ``;`` takes the first present, a missing field is an error.

        A single string with spaces names several fields: ``to_tuple("jpg cls")``.
        """
        return self.compose(ToTuple(*fields, **kw))

    def map_tuple(self, *fns: Callable | None, handler: Handler = reraise_exception) -> Any:
        """Apply one function per tuple position: ``map_tuple(preprocess, None)`` (``None`` passes through)."""
        return self.compose(MapTuple(*fns, handler=handler))

    def rename(self, handler: Handler = reraise_exception, keep: bool = True, **kw: str) -> Any:
        """Rename fields: ``rename(image="jpg;png", label="cls")``; ``keep=False`` drops the other fields."""
        return self.compose(Rename(handler=handler, keep=keep, **kw))

    def slice(self, *args: int | None) -> Any:
        """Items ``[start:stop:step]`` of the stream, as :func:`itertools.islice` takes them."""
        return self.compose(Slice(*args))

    def rsample(self, p: float = 0.5, seed: int | None = None) -> Any:
        """Keep each item with probability ``p`` (a seeded, checkpointable draw)."""
        from .sampling import RandomSample

        return self.compose(RandomSample(p, seed))

    def extract_keys(self, *patterns: str, **kw: Any) -> Any:
        """Tuples of the fields matching glob patterns; see :class:`~wds_core.fieldstages.ExtractKeys`."""
        from .fieldstages import ExtractKeys

        return self.compose(ExtractKeys(*patterns, **kw))

    def rename_keys(self, *renamings: tuple[str, str], **kw: Any) -> Any:
        """Fields renamed by glob patterns; see :class:`~wds_core.fieldstages.RenameKeys`."""
        from .fieldstages import RenameKeys

        return self.compose(RenameKeys(*renamings, **kw))

    def xdecode(self, *decoders: tuple[str, Any], **kw: Any) -> Any:
        """Decode fields by glob patterns with stream decoders; see :class:`~wds_core.decode.XDecode`."""
        from .decode import XDecode

        return self.compose(XDecode(*decoders, **kw))

    def log_keys(self, logfile: str | None = None) -> Any:
        """Append each sample's key (with worker and rank) to ``logfile``."""
        from .tracing import LogKeys

        return self.compose(LogKeys(logfile))

    def mcached(self) -> Any:
        """Keep the first complete epoch in memory and replay it after (not checkpointable)."""
        from .memo import MemoryCache

        return self.compose(MemoryCache())

    def lmdb_cached(self, *args: Any, **kw: Any) -> Any:
        raise NotImplementedError(
            "webdataset's lmdb_cached() is not provided by wds: it pickles every sample into an LMDB database; "
            "cache shards with WebDataset(..., cache_dir=...) or samples in memory with mcached()"
        )

    def image_text_pairs(self, **kw: Any) -> Any:
        """``(image, caption)`` from img2dataset/LAION-style samples; see :class:`ImageTextPairs`."""
        from .pairs import ImageTextPairs

        return self.compose(ImageTextPairs(**kw))

    def interleaved(self, **kw: Any) -> Any:
        """``sample["interleaved"]`` from MMC4/OBELICS documents; see :class:`Interleaved`."""
        from .interleaved import Interleaved

        return self.compose(Interleaved(**kw))

    def decode(
        self,
        *handlers: Any,
        pre: list[Callable] | None = None,
        post: list[Callable] | None = None,
        only: Any = None,
        partial: bool = False,
        handler: Handler = reraise_exception,
        allow_pickle: bool = False,
        num_threads: int = 0,
    ) -> Any:
        """Decode fields by extension; strings are image specs (``"rgb8"``, ``"pil"``...); see :class:`Decoder`."""
        return self.compose(
            decode(
                *handlers,
                pre=pre,
                post=post,
                only=only,
                partial=partial,
                handler=handler,
                allow_pickle=allow_pickle,
                num_threads=num_threads,
            )
        )


class WebDataset(DataPipeline, FluidInterface):
    """Samples from WebDataset shards: ``WebDataset("train-{000000..000099}.tar")``.

    The stages are: the shard list (shuffled per epoch when ``shardshuffle`` is
    true or a number, which is accepted for compatibility: the whole list is
    permuted), the node splitter, the worker splitter (both on by default, so
    several ranks and DataLoader workers each read their own shards), and the
    tar reader.  ``resampled=True`` draws shards with replacement forever
    instead (each rank and worker its own stream; no splitting).
    ``empty_check`` makes an epoch that yields nothing an error.
    ``balanced="pad"`` or ``"drop"`` splits the epoch's *samples* instead of
    its shards, so every rank and worker yields exactly as many samples
    (:mod:`wds_core.balanced`: sample counts from each shard's offset index).

    ``storage_options`` (flat, or keyed by URL prefix) are merged over the
    options registered with :func:`register_storage` and the ``WDS_CONFIG``
    file.  ``cache_dir`` keeps a copy of each remote shard (local ones too with
    ``cache_local=True``), filled while it is streamed, at most ``cache_size``
    bytes (negative: unlimited), named by ``url_to_name(url)`` when given.
    ``retry`` (a :class:`RetryPolicy`) says how often a failing remote read is
    repeated before it is an error.

    ``urls`` may also name a dataset-spec file (``.yaml``/``.yml``/``.json``,
    or its parsed dict): several sources mixed in proportions
    (:mod:`wds_core.specfile`); ``allow_pipe=True`` lets it use ``pipe:`` URLs.
    A local folder ending in ``/`` is a :class:`~wds_core.shardsources.DirectoryShardList`
    (shards claimed as they appear; ``mode`` says what happens to them after).

    Without ``seed``, the ``WDS_SEED`` environment variable is the seed when
    set, as in webdataset.  ``detshuffle`` is accepted for webdataset: the shard
    order is always deterministic, a function of the seed and the epoch.
    """

    def __init__(
        self,
        urls: Any,
        handler: Handler = reraise_exception,
        mode: str | None = None,
        resampled: bool = False,
        repeat: bool = False,
        shardshuffle: bool | int | None = None,
        cache_size: int = -1,
        cache_dir: str | None = None,
        url_to_name: Callable | None = None,
        detshuffle: bool = False,
        nodesplitter: Callable | None = split_by_node,
        workersplitter: Callable | None = split_by_worker,
        select_files: Callable[[str], bool] | None = None,
        rename_files: Callable[[str], str] | None = None,
        empty_check: bool = True,
        verbose: bool = False,
        seed: int | None = None,
        storage_options: dict | None = None,
        cache_local: bool = False,
        retry: RetryPolicy | None = None,
        balanced: str | None = None,
        allow_pipe: bool = False,
    ) -> None:
        if seed is None and os.environ.get("WDS_SEED", "") != "":
            seed = int(os.environ["WDS_SEED"])
        super().__init__(seed=seed)
        cache = None
        if cache_dir is not None:
            cache = ShardCache(cache_dir, cache_size, cache_local=cache_local, url_to_name=url_to_name, verbose=verbose)
        from .specfile import is_spec, spec_mix

        if is_spec(urls):
            if balanced is not None or resampled or mode == "resampled":
                raise SpecError("a dataset-spec file sets each source's sampling; balanced/resampled do not apply")
            reading = (handler, select_files, rename_files, storage_options, cache, retry)
            mix = spec_mix(urls, seed, bool(shardshuffle), reading, (nodesplitter, workersplitter), allow_pipe)
            self.append(mix)
            self.nshards = sum(len(d.stage(0).urls) for d in mix.datasets)
            self.empty_check = empty_check
            if repeat:
                self.repeat()
            return
        if isinstance(urls, str) and urls.endswith("/") and os.path.isdir(urls):
            self.append(DirectoryShardList(urls, mode=mode or "resample"))
            self.append(TarfileToSamples(handler, select_files, rename_files, storage_options, cache, retry))
            self.nshards, self.empty_check = 0, False
            return
        if mode not in (None, "resampled"):
            raise SpecError(f"mode must be None or 'resampled' (or a folder mode for a folder of shards), got {mode!r}")
        resampled = resampled or mode == "resampled"
        if balanced is not None and resampled:
            raise SpecError("balanced epochs split a finite epoch; they do not combine with resampled=True")
        shards: SimpleShardList | ResampledShards
        if balanced is not None:
            shards = SimpleShardList(urls, seed=seed, shuffle=bool(shardshuffle))
            self.append(shards)
            self.append(BalancedSplit(balanced, storage_options))
        elif resampled:
            shards = ResampledShards(urls, seed=seed)
            self.append(shards)
        else:
            shards = SimpleShardList(urls, seed=seed, shuffle=bool(shardshuffle))
            self.append(shards)
            if nodesplitter is not None:
                self.append(nodesplitter)
            if workersplitter is not None:
                self.append(workersplitter)
        self.nshards = len(shards.urls)
        self.append(TarfileToSamples(handler, select_files, rename_files, storage_options, cache, retry))
        self.empty_check = empty_check
        if repeat:
            self.repeat()

    def empty_message(self) -> str:
        rank, world = node_info()
        worker, workers = worker_info()
        message = f"no samples in this epoch (rank {rank}/{world}, worker {worker}/{workers}, {self.nshards} shards)"
        if self.nshards < world * workers:
            message += "; there are fewer shards than ranks x workers: use more shards or resampled=True"
        return message + "; pass empty_check=False to allow empty epochs"


class FluidWrapper(DataPipeline, FluidInterface):
    """Any source (an iterable, a pipeline, a DataLoader...) with the fluid methods: ``FluidWrapper(src).map(f)``."""

    def __init__(self, initial: Any, seed: int | None = None) -> None:
        super().__init__(initial, seed=seed)
