"""``WebDataset``: samples from shards, with the fluid methods of :class:`~wds_core.pipeline.fluid.FluidInterface`."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from .dist import node_info, worker_info
from .errors import SpecError
from .handlers import Handler, reraise_exception
from .io import files
from .io.cache import ShardCache
from .io.local import local_path
from .io.readahead import ReadAhead
from .io.remote import RetryPolicy
from .io.storage import Storage
from .pipeline.datapipeline import DataPipeline
from .pipeline.fluid import FluidInterface
from .pipeline.mixing import Mix
from .rng import derive_seed
from .sources.balanced import BalancedSplit, SampleCounts
from .sources.dirshards import DirectoryShardList
from .sources.interleave import InterleaveShards
from .sources.reading import ShardReadOptions
from .sources.shardlists import ResampledShards, SimpleShardList, split_by_node, split_by_worker
from .sources.specfile import Extensions, SourceShards, is_spec, load_spec
from .sources.tarsamples import TarfileToSamples
from .state import Recipe

__all__ = ["FluidInterface", "FluidWrapper", "WebDataset"]


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
    (:mod:`wds_core.sources.balanced`: sample counts from each shard's offset index, or
    from ``sample_counts=``, a wids descriptor or a dict ``{url: count}``, so
    that each reader indexes only the shards it reads).  ``sample_counts`` also
    gives ``len(dataset)``: the samples of all the shards.

    ``storage_options`` (flat, or keyed by URL prefix) are merged over the
    options registered with :func:`register_storage` and the ``WDS_CONFIG``
    file.  ``cache_dir`` keeps a copy of each remote shard (local ones too with
    ``cache_local=True``), filled while it is streamed, at most ``cache_size``
    bytes (negative: unlimited), named by ``url_to_name(url)`` when given.
    ``retry`` (a :class:`RetryPolicy`) says how often a failing remote read is
    repeated before it is an error, and ``read_ahead`` (a
    :class:`~wds_core.io.readahead.ReadAhead`) how many byte ranges of a
    remote shard, and how many shards ahead, are requested at once.
    ``zero_copy=True`` gives the members of local uncompressed shards as
    memoryviews of the mapped file, not copies
    (:class:`~wds_core.sources.reading.ShardReadOptions` says more).
    ``interleave=K`` reads ``K`` of each reader's shards at once and takes
    each next sample from one of them at random
    (:mod:`~wds_core.sources.interleave`): with ``.shuffle(B)`` after it, a
    batch mixes about as many shards as a global shuffle of ``K`` shards
    would, holding ``B + K`` samples.

    ``urls`` may also name a dataset-spec file (``.yaml``/``.yml``/``.json``,
    or its parsed dict): several sources mixed in proportions
    (:mod:`wds_core.sources.specfile`); ``allow_pipe=True`` lets it use ``pipe:`` URLs.
    A local folder ending in ``/`` is a :class:`~wds_core.sources.dirshards.DirectoryShardList`
    (shards claimed as they appear; ``mode`` says what happens to them after).  A dataset of shards (a
    ``SimpleShardList``, a ``DataPipeline`` or any PyTorch ``IterableDataset`` yielding ``{"url": ...}`` or URLs)
    is the shard source as it is, as in webdataset 0.2: no shard shuffle, no node or worker split, which it does
    itself if it should (webdataset 1.x refuses one with an ``AssertionError``).

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
        storage_options: Storage | dict | None = None,
        cache_local: bool = False,
        retry: RetryPolicy | None = None,
        balanced: str | None = None,
        allow_pipe: bool = False,
        sample_counts: Any = None,
        read_ahead: ReadAhead | None = None,
        zero_copy: bool = False,
        interleave: int | None = None,
    ) -> None:
        if seed is None and os.environ.get("WDS_SEED", "") != "":
            seed = int(os.environ["WDS_SEED"])
        super().__init__(seed=seed)
        cache = None
        if cache_dir is not None:
            cache = ShardCache(cache_dir, cache_size, cache_local=cache_local, url_to_name=url_to_name, verbose=verbose)
        storage = Storage.of(storage_options, cache=cache, retry=retry, read_ahead=read_ahead)
        reading = ShardReadOptions(handler, select_files, rename_files, storage, zero_copy=zero_copy, local_path=True)
        self.empty_check = empty_check
        if interleave is not None and (is_spec(urls) or isinstance(urls, str) and urls.endswith("/")):
            raise SpecError("interleave= reads a list of shards; a dataset-spec file or a folder has no such list")
        if is_spec(urls):
            if balanced is not None or resampled or mode == "resampled":
                raise SpecError("a dataset-spec file sets each source's sampling; balanced/resampled do not apply")
            mix = spec_mix(urls, seed, bool(shardshuffle), reading, (nodesplitter, workersplitter), allow_pipe)
            self.append(mix)
            self.nshards = sum(len(d.stage(0).urls) for d in mix.datasets)
        elif _is_shard_source(urls):
            if resampled or balanced is not None or interleave is not None or mode is not None:
                raise SpecError(
                    "a dataset of shards given as the source yields its own shards: resampled, balanced, interleave "
                    "and mode do not apply to it"
                )
            self.append(urls)
            self._append_reader(reading)
            self.nshards = len(urls.urls) if isinstance(getattr(urls, "urls", None), (list, tuple)) else 0
        elif isinstance(urls, str) and urls.endswith("/") and local_path(urls) is not None and files.isdir(urls):
            self.append(DirectoryShardList(urls, mode=mode or "resample"))
            self._append_reader(reading)
            self.nshards, self.empty_check = 0, False
            return
        else:
            resampled = resampled or mode == "resampled"
            shards = self._shard_list(urls, mode, resampled, balanced, sample_counts, shardshuffle, seed, reading)
            if not resampled and balanced is None:
                for splitter in (nodesplitter, workersplitter):
                    if splitter is not None:
                        self.append(self.splitter_stage(splitter))
            if isinstance(shards, SimpleShardList) and handler is reraise_exception:
                shards.check_local, shards.check_local_storage = True, storage
            self.nshards = len(shards.urls)
            if interleave is None:
                self._append_reader(reading)
            else:
                self.append(InterleaveShards(interleave, reading))
        if repeat:
            self.repeat()

    def _append_reader(self, reading: ShardReadOptions) -> None:
        for stage in self.reader_stages(reading):
            self.append(stage)

    def reader_stages(self, reading: ShardReadOptions) -> list[Any]:
        """The stages that turn shards into samples: wds's reader (the drop-in's ``WebDataset`` chains webdataset's
        pieces instead when code replaced one of them)."""
        return [TarfileToSamples.from_options(reading)]

    def splitter_stage(self, splitter: Callable) -> Any:
        """The stage a node or worker splitter argument becomes (itself; the drop-in's has webdataset's hooks)."""
        return splitter

    def _shard_list(
        self,
        urls: Any,
        mode: str | None,
        resampled: bool,
        balanced: str | None,
        sample_counts: Any,
        shardshuffle: Any,
        seed: int | None,
        reading: ShardReadOptions,
    ) -> SimpleShardList | ResampledShards:
        """The shard list stage (and a balanced split after it), appended; the splitters are the caller's."""
        if mode not in (None, "resampled"):
            raise SpecError(f"mode must be None or 'resampled' (or a folder mode for a folder of shards), got {mode!r}")
        if balanced is not None and resampled:
            raise SpecError("balanced epochs split a finite epoch; they do not combine with resampled=True")
        if sample_counts is not None and resampled:
            raise SpecError("sample_counts counts the shards of a finite epoch; a resampled stream has no length")
        shards: SimpleShardList | ResampledShards
        if resampled:
            shards = ResampledShards(urls, seed=seed)
            self.append(shards)
            return shards
        shards = SimpleShardList(urls, seed=seed, shuffle=bool(shardshuffle))
        self.append(shards)
        if sample_counts is not None:  # len(): the samples of these shards
            self.counted = (shards.urls, SampleCounts(sample_counts, reading.storage))
        if balanced is not None:
            self.append(BalancedSplit(balanced, reading, sample_counts))
        return shards

    def __len__(self) -> int:
        """``with_length(n)``'s ``n``, else the samples of all the shards when ``sample_counts`` gives them (a
        descriptor from :func:`make_shards`, ``ShardWriter(descriptor=)`` or ``wds index create``, a counts file, a
        dict): every rank's and worker's together."""
        counted = getattr(self, "counted", None)
        if self.size is None and counted is not None:
            return counted[1].total(counted[0])
        if self.size is None:
            raise TypeError(
                "WebDataset has no length: give sample_counts= (the descriptor make_shards, ShardWriter(descriptor=) "
                "or `wds index create` writes) or set one with .with_length(n)"
            )
        return self.size

    def empty_message(self) -> str:
        rank, world = node_info()
        worker, workers = worker_info()
        message = f"no samples in this epoch (rank {rank}/{world}, worker {worker}/{workers}, {self.nshards} shards)"
        if self.nshards < world * workers:
            message += "; there are fewer shards than ranks x workers: use more shards or resampled=True"
        return message + "; pass empty_check=False to allow empty epochs"


def _is_shard_source(urls: Any) -> bool:
    """Whether ``urls`` is a dataset of shards rather than a spec: a wds recipe or pipeline (a shard list), or a
    PyTorch ``IterableDataset`` (named by its class, so that the core imports no framework)."""
    if isinstance(urls, (str, bytes, os.PathLike, dict, list, tuple)):
        return False
    if isinstance(urls, (Recipe, DataPipeline)):
        return True
    return any(cls.__name__ == "IterableDataset" for cls in type(urls).__mro__)


class FluidWrapper(DataPipeline, FluidInterface):
    """Any source (an iterable, a pipeline, a DataLoader...) with the fluid methods: ``FluidWrapper(src).map(f)``."""

    def __init__(self, initial: Any, seed: int | None = None) -> None:
        super().__init__(initial, seed=seed)


def spec_mix(
    spec: Any,
    seed: int | None,
    shuffle: bool,
    reading: ShardReadOptions,
    splitters: tuple[Any, ...],
    allow_pipe: bool = False,
) -> Any:
    """The :class:`~wds_core.pipeline.mixing.Mix` stage reading a spec's sources (``WebDataset(spec)`` uses it).

    ``reading`` says how every source's shards are read (each source's own
    ``storage_options`` over its ``storage_options``); ``splitters`` split each
    source's shards by node and worker.
    """
    sources, options = load_spec(spec, allow_pipe, reading.storage)
    datasets = []
    for i, source in enumerate(sources):
        sub_seed = None if seed is None else derive_seed(seed, "source", i)
        stages: list[Any] = [SourceShards(source, sub_seed, shuffle)]
        stages += [s for s in splitters if s is not None]
        here = reading.with_storage(reading.storage.with_options(source.storage_options, source.urls))
        stages.append(TarfileToSamples.from_options(here))
        if source.extensions:
            stages.append(Extensions(source.extensions, reading.handler))
        datasets.append(DataPipeline(*stages, seed=sub_seed if sub_seed is not None else 0))
    return Mix(datasets, [s.weight for s in sources], options["longest"], "random", seed)
