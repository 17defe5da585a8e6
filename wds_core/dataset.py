"""``WebDataset``: samples from shards, with the fluid methods of :class:`~wds_core.pipeline.fluid.FluidInterface`."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any, ClassVar

from .datasetplan import Plan, Split, reading_of, splitters_of, warn_webdataset_keywords, webdataset_plan
from .dist import node_info, worker_info
from .errors import SpecError
from .handlers import reraise_exception
from .io import files
from .io.localfiles import local_path
from .io.storage import Storage
from .pipeline.datapipeline import DataPipeline
from .pipeline.fluid import FluidInterface
from .pipeline.mixing import Mix
from .rng import derive_seed
from .sources.balanced import BalancedSplit, SampleCounts
from .sources.dirshards import DirectoryShardList
from .sources.interleave import InterleaveShards
from .sources.readoptions import ShardReadOptions
from .sources.shardlists import ResampledShards, SimpleShardList
from .sources.specfile import Extensions, SourceShards, is_spec, load_spec
from .sources.tarsamples import TarfileToSamples
from .state import Recipe

__all__ = ["FluidInterface", "FluidWrapper", "WebDataset"]


class WebDataset(DataPipeline, FluidInterface):
    """Samples from WebDataset shards: ``WebDataset("train-{000000..000099}.tar")``.

    The stages are the shard list (permuted each epoch with ``shuffle=True``, a function of ``seed`` and the
    epoch), the node and worker splitters (``split``: on by default, so several ranks and DataLoader workers each
    read their own shards; ``False``, or a pair of splitters) and the tar reader.  ``storage`` (storage options,
    flat or keyed by URL prefix, or a :class:`~wds_core.io.storage.Storage` with its cache, retry policy and
    read-ahead) says how shards are reached, over :func:`register_storage` and the ``WDS_CONFIG`` file;
    ``reading`` (:class:`~wds_core.sources.readoptions.ShardReadOptions`: error handler, member selection, zero-copy)
    how they are read.  ``empty_check`` makes an epoch that yields nothing an error; ``sample_counts`` (a
    descriptor, a counts file, a dict ``{url: count}``) gives ``len(dataset)``; ``interleave=K`` reads ``K`` of each
    reader's shards at once, each next sample from one of them (:mod:`~wds_core.sources.interleave`).

    ``urls`` may also name a dataset-spec file, a local folder ending in ``/``, or be a dataset of shards (a
    ``SimpleShardList``, a ``DataPipeline``, a PyTorch ``IterableDataset`` yielding URLs), which is the shard
    source as it is (as in webdataset 0.2).  The classmethods say which: :meth:`from_spec`, :meth:`from_folder`,
    :meth:`resampled` (shards drawn with replacement forever) and :meth:`balanced` (every reader the same number of
    samples).  Without ``seed``, ``WDS_SEED`` is the seed when set, as in webdataset.

    webdataset's keywords (``shardshuffle=``, ``storage_options=``, ``cache_dir=``...) still work here with a
    ``DeprecationWarning`` naming the new spelling; the drop-in's ``WebDataset`` and ``wds_torch``'s take them as
    webdataset does.
    """

    #: whether webdataset's keywords are taken without a ``DeprecationWarning``: ``wds_torch.WebDataset``'s are
    #: (``import wds_torch as wds`` is the design's drop-in for ``import webdataset as wds``)
    takes_webdataset_keywords: ClassVar[bool] = False

    def __init__(
        self,
        urls: Any,
        *,
        storage: Storage | dict | None = None,
        reading: ShardReadOptions | None = None,
        shuffle: bool = False,
        seed: int | None = None,
        split: Split = True,
        sample_counts: Any = None,
        empty_check: bool = True,
        interleave: int | None = None,
        **webdataset_keywords: Any,
    ) -> None:
        native = {"storage": storage, "reading": reading, "shuffle": shuffle, "seed": seed, "split": split,
                  "sample_counts": sample_counts, "empty_check": empty_check, "interleave": interleave}  # fmt: skip
        if webdataset_keywords and not self.takes_webdataset_keywords:
            warn_webdataset_keywords(webdataset_keywords, stacklevel=3)
        self._build(webdataset_plan(urls, native, webdataset_keywords))

    @classmethod
    def from_spec(
        cls,
        spec: Any,
        *,
        storage: Storage | dict | None = None,
        reading: ShardReadOptions | None = None,
        shuffle: bool = False,
        seed: int | None = None,
        split: Split = True,
        empty_check: bool = True,
        allow_pipe: bool = False,
    ) -> Any:
        """Sources mixed in proportions from a dataset-spec file (``.yaml``/``.yml``/``.json``, or its parsed dict;
        :mod:`wds_core.sources.specfile`); ``allow_pipe=True`` lets it use ``pipe:`` URLs."""
        reading = reading_of(storage, reading)
        splitters = splitters_of(split)
        return cls._planned(Plan(spec, "spec", reading, bool(shuffle), seed, splitters, None, empty_check,
                                 allow_pipe=allow_pipe))  # fmt: skip

    @classmethod
    def from_folder(
        cls, folder: str, *, mode: str = "resample", storage: Storage | dict | None = None,
        reading: ShardReadOptions | None = None, seed: int | None = None,
    ) -> Any:  # fmt: skip
        """Shards claimed as they appear in a local folder (:class:`~wds_core.sources.dirshards.DirectoryShardList`;
        ``mode`` says what becomes of them once read)."""
        folder = folder if folder.endswith("/") else folder + "/"
        return cls._planned(Plan(folder, "folder", reading_of(storage, reading), seed=seed, folder_mode=mode))

    @classmethod
    def resampled(
        cls, urls: Any, *, storage: Storage | dict | None = None, reading: ShardReadOptions | None = None,
        seed: int | None = None, interleave: int | None = None,
    ) -> Any:  # fmt: skip
        """Shards drawn with replacement forever: each rank and worker its own stream, no splitting."""
        plan = Plan(urls, "resampled", reading_of(storage, reading), seed=seed, interleave=interleave)
        return cls._planned(plan)

    @classmethod
    def balanced(
        cls, urls: Any, how: str = "pad", *, sample_counts: Any = None, storage: Storage | dict | None = None,
        reading: ShardReadOptions | None = None, shuffle: bool = False, seed: int | None = None,
        empty_check: bool = True, interleave: int | None = None,
    ) -> Any:  # fmt: skip
        """An epoch whose *samples* are split, so that every rank and worker yields exactly as many (``how``:
        ``"pad"`` repeats some, ``"drop"`` leaves some out; :mod:`wds_core.sources.balanced`: the counts from each
        shard's offset index, or from ``sample_counts``, so that each reader indexes only the shards it reads)."""
        plan = Plan(urls, "balanced", reading_of(storage, reading), bool(shuffle), seed, sample_counts=sample_counts,
                    empty_check=empty_check, interleave=interleave, balance=how)  # fmt: skip
        return cls._planned(plan)

    @classmethod
    def _planned(cls, plan: Plan) -> Any:
        dataset = cls.__new__(cls)
        dataset._build(plan)
        return dataset

    def _build(self, plan: Plan) -> None:
        seed = plan.seed
        if seed is None and os.environ.get("WDS_SEED", "") != "":
            seed = int(os.environ["WDS_SEED"])
        super().__init__(seed=seed)
        plan = replace(plan, seed=seed)
        self.empty_check = plan.empty_check
        kind = _kind_of(plan.urls)  # a spec or a dataset of shards refuses the constructions that do not apply
        kind = kind if kind in ("spec", "source") or plan.kind == "list" else plan.kind
        if plan.interleave is not None and kind in ("spec", "folder"):
            raise SpecError("interleave= reads a list of shards; a dataset-spec file or a folder has no such list")
        {"spec": self._read_spec, "source": self._read_source, "folder": self._read_folder}.get(kind, self._read_list)(
            plan
        )
        if plan.repeat:
            self.repeat()

    def _read_spec(self, plan: Plan) -> None:
        if plan.balance is not None or plan.kind == "resampled":
            raise SpecError("a dataset-spec file sets each source's sampling; balanced/resampled do not apply")
        mix = spec_mix(plan.urls, plan.seed, plan.shuffle, plan.reading, plan.splitters, plan.allow_pipe)
        self.append(mix)
        self.nshards = sum(len(d.stage(0).urls) for d in mix.datasets)

    def _read_source(self, plan: Plan) -> None:
        if plan.kind != "list" or plan.interleave is not None or plan.folder_mode is not None:
            raise SpecError(
                "a dataset of shards given as the source yields its own shards: resampled, balanced, interleave "
                "and mode do not apply to it"
            )
        self.append(plan.urls)
        self._append_reader(plan.reading)
        urls = getattr(plan.urls, "urls", None)
        self.nshards = len(urls) if isinstance(urls, (list, tuple)) else 0

    def _read_folder(self, plan: Plan) -> None:
        self.append(DirectoryShardList(plan.urls, mode=plan.folder_mode or "resample"))
        self._append_reader(plan.reading)
        self.nshards, self.empty_check = 0, False

    def _read_list(self, plan: Plan) -> None:
        shards = self._shard_list(plan)
        if plan.kind == "list":
            for splitter in plan.splitters:
                if splitter is not None:
                    self.append(self.splitter_stage(splitter))
        if isinstance(shards, SimpleShardList) and plan.reading.handler is reraise_exception:
            shards.check_local, shards.check_local_storage = True, plan.reading.storage
        self.nshards = len(shards.urls)
        if plan.interleave is None:
            self._append_reader(plan.reading)
        else:
            self.append(InterleaveShards(plan.interleave, plan.reading))

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

    def _shard_list(self, plan: Plan) -> SimpleShardList | ResampledShards:
        """The shard list stage (and a balanced split after it), appended; the splitters are the caller's."""
        if plan.folder_mode is not None:
            raise SpecError(
                f"mode must be None or 'resampled' (or a folder mode for a folder of shards), got {plan.folder_mode!r}"
            )
        if plan.kind == "resampled":
            if plan.balance is not None:
                raise SpecError("balanced epochs split a finite epoch; they do not combine with resampled=True")
            if plan.sample_counts is not None:
                raise SpecError("sample_counts counts the shards of a finite epoch; a resampled stream has no length")
            resampled = ResampledShards(plan.urls, seed=plan.seed)
            self.append(resampled)
            return resampled
        shards = SimpleShardList(plan.urls, seed=plan.seed, shuffle=plan.shuffle)
        self.append(shards)
        if plan.sample_counts is not None:  # len(): the samples of these shards
            self.counted = (shards.urls, SampleCounts(plan.sample_counts, plan.reading.storage))
        if plan.kind == "balanced":
            self.append(BalancedSplit(plan.balance or "pad", plan.reading, plan.sample_counts))
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


def _kind_of(urls: Any) -> str:
    """What ``WebDataset(urls)`` reads: ``"spec"``, ``"source"`` (a dataset of shards), ``"folder"`` or ``"list"``."""
    if is_spec(urls):
        return "spec"
    if _is_shard_source(urls):
        return "source"
    if isinstance(urls, str) and urls.endswith("/") and local_path(urls) is not None and files.isdir(urls):
        return "folder"
    return "list"


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
