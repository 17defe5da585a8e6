"""The chainable methods (``.shuffle().decode().to_tuple().batched()``...) of every pipeline class.

:class:`FluidInterface` is mixed into ``WebDataset``, ``FluidWrapper``, the
mixes (``RandomMix``, ``RoundRobin``) and the adapters' datasets.  Each method
returns a new pipeline with one more stage; the pipeline it was called on is
left as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from ..handlers import Handler, reraise_exception
from ..stages.batching import Batch, Slice, Unbatch
from ..stages.collate import default_collation_fn
from ..stages.decode import crop_images, decode
from ..stages.mapping import Map, MapDict, MapTuple, Rename, Select, ToTuple
from ..stages.shuffle import Shuffle

__all__ = ["FluidInterface"]


class FluidInterface:
    """The chainable methods shared by ``WebDataset`` and ``DataPipeline`` subclasses."""

    #: The stage :meth:`batched` and :meth:`listed` add: the trees that stand in for webdataset batch with
    #: :class:`~wds_core.stages.batching.ReadAheadBatch`, as webdataset does.
    batch_stage: ClassVar[type[Batch]] = Batch

    def compose(self, *stages: Any) -> Any:  # pragma: no cover - provided by DataPipeline
        raise NotImplementedError

    def batched(
        self, batchsize: int, collation_fn: Callable | None = default_collation_fn, partial: bool = True
    ) -> Any:
        """Group items into batches of ``batchsize``, collated by ``collation_fn`` (numpy arrays by default).

        ``partial=False`` drops a last batch that is not full; ``collation_fn=None`` gives lists.
        """
        return self.compose(self.batch_stage(batchsize, collation_fn, partial))

    def unbatched(self) -> Any:
        """Split batches (tuples of arrays, dicts of arrays, lists) back into single items."""
        return self.compose(Unbatch())

    def listed(self, batchsize: int, partial: bool = True) -> Any:
        """Group items into plain lists of ``batchsize`` (no collation)."""
        return self.compose(self.batch_stage(batchsize, None, partial))

    def unlisted(self) -> Any:
        """Split lists back into their items (the inverse of :meth:`listed`)."""
        return self.compose(Unbatch(lists="items"))

    def shuffle(self, size: int, **kw: Any) -> Any:
        """Shuffle through a buffer of ``size`` items (see :class:`~wds_core.stages.shuffle.Shuffle`);
        ``size < 1``: none."""
        stage = Shuffle(max(size, 1), **kw)  # arguments are checked even when there is nothing to shuffle
        return self if size < 1 else self.compose(stage)

    def crop_images(
        self,
        size: int | tuple[int, int],
        policy: str = "random-resized",
        *,
        handler: Handler = reraise_exception,
        num_threads: int = 0,
        **options: Any,
    ) -> Any:
        """Cut each sample's image to ``size`` while decoding it: ``crop_images(224, flip=0.5)``.

        ``policy`` ``"random-resized"`` (torchvision's RandomResizedCrop; ``scale``,
        ``ratio``), ``"center"`` (``resize`` the shorter side, then the centre) or
        ``"shorter"``; ``flip`` a probability; ``layout="chw"``; ``mean``/``std``
        for normalised float32; ``fields`` (``"jpg;jpeg;png;webp"``).  JPEGs are
        decoded at the smallest DCT scale that still covers the crop.
        ``device="cuda"`` plans the crops here and leaves decoding and cutting to
        ``wds_torch.to_device`` on the GPU.  See :mod:`wds_core.stages.crop`.
        """
        return self.compose(crop_images(size, policy, handler=handler, num_threads=num_threads, **options))

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
        from ..stages.sampling import RandomSample

        return self.compose(RandomSample(p, seed))

    def extract_keys(self, *patterns: str, **kw: Any) -> Any:
        """Tuples of the fields matching glob patterns; see :class:`~wds_core.stages.fieldkeys.ExtractKeys`."""
        from ..stages.fieldkeys import ExtractKeys

        return self.compose(ExtractKeys(*patterns, **kw))

    def rename_keys(self, *renamings: tuple[str, str], **kw: Any) -> Any:
        """Fields renamed by glob patterns; see :class:`~wds_core.stages.fieldkeys.RenameKeys`."""
        from ..stages.fieldkeys import RenameKeys

        return self.compose(RenameKeys(*renamings, **kw))

    def xdecode(self, *decoders: tuple[str, Any], **kw: Any) -> Any:
        """Decode fields by glob patterns with stream decoders; see :class:`~wds_core.stages.xdecode.XDecode`."""
        from ..stages.xdecode import XDecode

        return self.compose(XDecode(*decoders, **kw))

    def log_keys(self, logfile: str | None = None) -> Any:
        """Append each sample's key (with worker and rank) to ``logfile``."""
        from ..stages.tracing import LogKeys

        return self.compose(LogKeys(logfile))

    def mcached(self) -> Any:
        """Keep the first complete epoch in memory and replay it after (not checkpointable)."""
        from ..stages.memorycache import MemoryCache

        return self.compose(MemoryCache())

    def lmdb_cached(self, *args: Any, **kw: Any) -> Any:
        raise NotImplementedError(
            "webdataset's lmdb_cached() is not provided by wds: it pickles every sample into an LMDB database; "
            "cache shards with WebDataset(..., storage=Storage(cache=ShardCache(folder))) or samples in memory with "
            "mcached()"
        )

    def image_text_pairs(self, **kw: Any) -> Any:
        """``(image, caption)`` from img2dataset/LAION-style samples; see :class:`ImageTextPairs`."""
        from ..stages.imagetext import ImageTextPairs

        return self.compose(ImageTextPairs(**kw))

    def interleaved(self, **kw: Any) -> Any:
        """``sample["interleaved"]`` from MMC4/OBELICS documents; see :class:`Interleaved`."""
        from ..stages.documents import Interleaved

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
        limits: Any = None,
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
                limits=limits,
            )
        )
