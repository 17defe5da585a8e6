"""Decoding samples: the :class:`Decoder` and the ``decode`` stage.

``Decoder(handlers...)`` decodes every field of a sample by trying, in order,
the *pre* handlers (gunzip), the user's handlers (a string such as ``"rgb8"``
is an image spec) and the *post* handlers (the built-in extensions).  The
first handler returning something other than ``None`` wins; a field no handler
claims stays ``bytes``.  A failure becomes a :class:`DecodingError` naming the
shard, the sample key and the field.

``decode(..., num_threads=N)`` decodes up to ``N`` samples at once in a thread
pool (Pillow releases the GIL while it decodes) and delivers them in their
original order; its checkpoint is the upstream state at the start of the
read-ahead window plus how many samples of the window were delivered.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ..elastic import WindowProgress
from ..errors import CheckpointError, DecodingError, SampleShapeError
from ..fieldcodecs import NULL, Continue, ImageHandler, PickleNotAllowed, basic_decoders, gzfilter
from ..fieldcodecs.bounded import (
    DecodeLimitError,
    DecodeLimits,
    charge,
    charged,
    decoded_size,
    reset_limits,
    use_limits,
)
from ..handlers import Handler, reraise_exception
from ..io.secure import refuse_pickle
from ..state import RunContext, StageIterator, replayed, state_of, state_or_error
from .crop import ImageCrop, image_crop
from .mapping import PerSample

__all__ = ["Decode", "Decoder", "decode"]

_BYTES = (bytes, bytearray, memoryview)
_END = object()
# Samples handed to a decoding thread at a time: a hand-over per sample holds the GIL about as long as a small
# JPEG's decode releases it (docs/benchmarks-history.md has the measurements).
CHUNK = 4


class Decoder:
    """Decode whole samples: ``Decoder("rgb8")(sample)``; on an iterable of samples it returns a stream.

    ``handlers`` are callables ``f(".ext", data)`` or image spec strings (or
    one list of them, then webdataset's positional ``pre, post, only, partial``);
    ``only`` (field names, a list or a space-separated string) limits decoding
    to those fields; ``partial=True`` leaves fields that are not bytes alone
    instead of failing on them; ``allow_pickle=True`` lets the built-in
    decoders load ``.pyd``/``.pickle``/``.pkl`` fields (never do it for data you
    do not trust: loading a pickle runs code of the writer's choosing).
    ``limits`` bounds what a field and a sample may decode to
    (:class:`~wds_core.fieldcodecs.bounded.DecodeLimits` or a dict of some of
    them, over the configuration file's ``decode_limits``, over the defaults:
    1 GiB a field, 4 GiB a sample).
    """

    def default_pre(self) -> list[Callable]:
        """The handlers before the user's when ``pre`` is not given: gunzip."""
        return [gzfilter]

    def default_post(self, allow_pickle: bool) -> list[Callable]:
        """The handlers after the user's when ``post`` is not given: the built-in extensions."""
        return [basic_decoders(allow_pickle)]

    def __init__(
        self,
        *handlers: Any,
        pre: list[Callable] | None = None,
        post: list[Callable] | None = None,
        only: str | Iterable[str] | None = None,
        partial: bool = False,
        allow_pickle: bool = False,
        limits: Any = None,
    ) -> None:
        if handlers and isinstance(handlers[0], (list, tuple)):
            # webdataset's Decoder(handlers, pre=None, post=None, only=None, partial=False), positional too
            handlers, extra = tuple(handlers[0]), handlers[1:]
            if len(extra) > 4:
                raise TypeError(
                    f"Decoder(handlers, pre, post, only, partial) takes 5 positional arguments, got {1 + len(extra)}"
                )
            keywords: dict[str, Any] = {"pre": pre, "post": post, "only": only, "partial": partial}
            for name, value in zip(keywords, extra):
                if keywords[name] not in (None, False):
                    raise TypeError(f"Decoder() got multiple values for argument {name!r}")
                keywords[name] = value
            pre, post, only, partial = keywords["pre"], keywords["post"], keywords["only"], bool(keywords["partial"])
        main = [ImageHandler(h) if isinstance(h, str) else h for h in handlers]
        pre = self.default_pre() if pre is None else list(pre)
        post = self.default_post(allow_pickle) if post is None else list(post)
        for h in pre + main + post:
            if not callable(h):
                raise TypeError(f"decoder handlers must be callables f(key, data) or image specs, got {h!r}")
        self.handlers = pre + main + post
        self.only = None if only is None else frozenset(only.split() if isinstance(only, str) else only)
        self.partial = partial
        if allow_pickle:
            refuse_pickle()
        self.allow_pickle = allow_pickle
        self.limits = DecodeLimits.of(limits)

    def decode1(self, field: str, data: Any) -> Any:
        """The decoded value of one field (``field`` without a leading dot)."""
        key = "." + field
        for handler in self.handlers:
            result = handler(key, data)
            if result is None:
                continue
            if result is NULL:
                return None
            if isinstance(result, Continue):
                key, data = result.key, result.data
                continue
            return result
        return data

    def decode(self, sample: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(sample, dict):
            kind = type(sample).__name__
            raise SampleShapeError(f"decode expects samples as dicts, got {kind}; decode before to_tuple")
        token = use_limits(self.limits)
        try:
            return self._decode(sample)
        finally:
            reset_limits(token)

    def _decode(self, sample: dict[str, Any]) -> dict[str, Any]:
        """Decode each field; what the fields take is charged to the sample (:func:`~.fieldcodecs.limits.charge`)
        by the built-in decoders as they allocate, and measured afterwards for other handlers' results."""
        result: dict[str, Any] = {}
        only, partial, limits = self.only, self.partial, self.limits
        for field, value in sample.items():
            if field[:2] == "__":
                result[field] = bytes(value).decode("utf-8", "replace") if isinstance(value, _BYTES) else value
                continue
            if only is not None and field not in only:
                result[field] = value
                continue
            if not isinstance(value, _BYTES):
                if partial:
                    result[field] = value
                    continue
                message = f"the field holds a {type(value).__name__}, not bytes (pass partial=True)"
                raise DecodingError.in_sample(message, sample, field)
            if value.__class__ is memoryview:  # zero_copy reading: handlers get bytes, as they always do
                value = value.tobytes()
            before = charged()
            try:
                result[field] = decoded = self.decode1(field, value)
                if charged() == before and decoded is not value:  # a handler's own result: measured
                    charge(decoded_size(decoded, limits.sample_bytes), f"field {field!r}")
            except DecodingError:
                raise
            except (PickleNotAllowed, DecodeLimitError) as exn:
                raise DecodingError.in_sample(str(exn), sample, field) from None
            except Exception as exn:
                raise DecodingError.in_sample(f"cannot decode: {type(exn).__name__}: {exn}", sample, field) from exn
        return result

    def __call__(self, sample_or_samples: Any) -> Any:
        if isinstance(sample_or_samples, dict):
            return self.decode(sample_or_samples)
        if hasattr(sample_or_samples, "compose"):  # a pipeline stays a pipeline (and a torch dataset)
            return sample_or_samples.compose(Decode(self))
        return Decode(self)(sample_or_samples)


class Decode(PerSample):
    """Stage: decode each sample with ``decoder``; ``handler`` decides about failures."""

    def __init__(self, decoder: Decoder, handler: Handler = reraise_exception, num_threads: int = 0) -> None:
        if not isinstance(num_threads, int) or num_threads < 0:
            raise ValueError(f"num_threads must be an int >= 0, got {num_threads!r}")
        self.decoder, self.handler, self.num_threads = decoder, handler, num_threads

    def build(self, src: Any, ctx: RunContext) -> StageIterator:
        if self.num_threads <= 1:
            return super().build(src, ctx)
        return _ThreadedDecode(src, self)

    def process(self, sample: dict[str, Any]) -> dict[str, Any]:
        return self.decoder.decode(sample)


class _ThreadedDecode(StageIterator):
    """Decodes a window of samples ahead in a thread pool and yields them in order."""

    passes_order = False
    in_order = True  # a ReportsDelivered: what it has delivered is a prefix of what it read

    def __init__(self, src: Any, recipe: Decode) -> None:
        super().__init__(src)
        self.recipe = recipe
        self.window = 2 * CHUNK * recipe.num_threads
        self._skip = 0  # samples of the restored window that were delivered before the checkpoint
        # (samples pulled, upstream state before them, reader progress then)
        self._snapshots: deque[tuple[int, Any, Any]] = deque()
        self._delivered = self._pulled = 0
        self._progress = WindowProgress("threaded decode")

    def state_dict(self) -> dict[str, Any]:
        if self._gen is None or not self._snapshots:  # not started: nothing pulled beyond the skip
            return {"skip": self._skip, "parent": state_of(self.src)}
        pulled, parent, _ = self._snapshots[0]
        if isinstance(parent, CheckpointError):
            raise parent
        return {"skip": self._delivered - pulled, "parent": parent}

    def delivered_positions(self) -> tuple[int, Any]:
        if self._gen is None or not self._snapshots:
            at = self._progress.at_snapshot(self.src)
            return self._progress.since(self.src, at, self._skip, (), check=False)
        pulled, _, at = self._snapshots[0]
        count = self._pulled - pulled
        return self._progress.since(self.src, at, count, range(self._delivered - pulled, count))

    def _load_own_state(self, state: dict[str, Any]) -> None:
        self._skip = int(state.get("skip", 0))

    def _run(self) -> Iterator[dict[str, Any]]:
        src = iter(self.src)
        for _ in replayed(src, self._skip, "decode"):
            pass
        decode, handler, window = self.recipe.decoder.decode, self.recipe.handler, self.window
        snapshots = self._snapshots
        pending: deque[Any] = deque()  # futures of chunks of samples, in order
        ahead = 0  # samples pulled and not yet delivered
        pulled = 0
        exhausted = False
        # num_threads - 1 pool threads, and this thread decodes every num_threads-th chunk itself: one
        # thread fewer contending for the GIL than a pool of num_threads beside an idle consumer
        threads = self.recipe.num_threads
        pool = ThreadPoolExecutor(threads - 1, thread_name_prefix="wds-decode")
        chunks = 0
        try:
            while True:
                while not exhausted and ahead < window:
                    chunk: list[Any] = []
                    while len(chunk) < CHUNK:
                        if pulled % window == 0:
                            snapshots.append((pulled, state_or_error(self.src), self._progress.at_snapshot(self.src)))
                        try:
                            chunk.append(next(src))
                        except StopIteration:
                            exhausted = True
                            break
                        pulled += 1
                        self._pulled = pulled
                    if chunk:
                        if chunks % threads == threads - 1:
                            done: Future = Future()
                            done.set_result(_decode_chunk(decode, chunk))
                            pending.append(done)
                        else:
                            pending.append(pool.submit(_decode_chunk, decode, chunk))
                        chunks += 1
                        ahead += len(chunk)
                if not pending:
                    return
                for ok, result in pending.popleft().result():
                    ahead -= 1
                    self._delivered += 1
                    while len(snapshots) > 1 and snapshots[1][0] <= self._delivered:
                        snapshots.popleft()
                    if ok:
                        yield result
                    elif not handler(result):
                        return
        finally:
            # Never wait here: an abandoned iterator is finalised by the garbage collector in whatever
            # thread happens to run it, even one starting up inside threading's own locks, where joining
            # threads deadlocks.  Cancelled futures never run; running ones finish and their workers exit.
            pool.shutdown(wait=False, cancel_futures=True)


def _decode_chunk(decode: Callable[[Any], Any], samples: list[Any]) -> list[tuple[bool, Any]]:
    """``(True, decoded)`` or ``(False, exception)`` for each sample, in order."""
    results: list[tuple[bool, Any]] = []
    for sample in samples:
        try:
            results.append((True, decode(sample)))
        except Exception as exn:
            results.append((False, exn))
    return results


def decode(
    *handlers: Any,
    handler: Handler = reraise_exception,
    pre: list[Callable] | None = None,
    post: list[Callable] | None = None,
    only: str | Iterable[str] | None = None,
    partial: bool = False,
    allow_pickle: bool = False,
    num_threads: int = 0,
    limits: Any = None,
) -> Decode:
    """webdataset's ``decode(...)`` stage: ``decode("rgb8")``, ``decode(my_handler, "pil")``.

    ``num_threads`` > 1 decodes that many samples at once and keeps their order; ``limits``: see
    :class:`Decoder`.
    """
    decoder = Decoder(
        *handlers, pre=pre, post=post, only=only, partial=partial, allow_pickle=allow_pickle, limits=limits
    )
    return Decode(decoder, handler=handler, num_threads=num_threads)


class CropImages(Decode):
    """Stage: cut each sample's image to training size (:mod:`wds_core.stages.crop`); threads as ``decode``."""

    def __init__(self, crop: ImageCrop, handler: Handler = reraise_exception, num_threads: int = 0) -> None:
        super().__init__(crop, handler, num_threads)  # type: ignore[arg-type]

    @property
    def host_share(self) -> Any:
        """The share of each batch cut on the host when the crops are planned for a device (``device=``), else
        ``None``: what a profile of the pipeline reports (:class:`~wds_core.stages.devicecrop.HostShare`)."""
        return self.decoder.host_share  # type: ignore[attr-defined]

    def build(self, src: Any, ctx: RunContext) -> StageIterator:
        bound = Decode(self.decoder.bind(ctx), self.handler, self.num_threads)  # type: ignore[attr-defined, arg-type]
        return bound.build(src, ctx)


def crop_images(
    size: int | tuple[int, int],
    policy: str = "random-resized",
    *,
    handler: Handler = reraise_exception,
    num_threads: int = 0,
    **options: Any,
) -> CropImages:
    """The stage behind ``.crop_images(...)``: ``crop_images(224, flip=0.5)``.

    Options as :func:`~wds_core.stages.crop.image_crop`.

    Each sample's first field among ``fields`` (``jpg;jpeg;png;webp``) becomes
    a uint8 array of ``size`` (an int or ``(h, w)``); random choices follow the
    pipeline seed, the epoch and the sample's key, so resuming repeats them.
    """
    return CropImages(image_crop(size, policy, **options), handler=handler, num_threads=num_threads)
