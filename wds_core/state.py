"""The checkpoint protocol shared by every built-in iterator.

A *recipe* (a stage object, picklable, no run-time state) builds an *iterator*
with ``recipe.build(upstream, ctx)``.  Iterators derive from
:class:`StageIterator`:

* ``iter(it)`` returns a plain generator doing the work, so a pipeline of them
  costs one generator resumption per stage and item;
* ``it.state_dict()`` returns JSON-serialisable state that nests the upstream
  iterator's state under ``"parent"``; it is valid between two items;
* ``it.load_state_dict(state)`` must be called before iteration starts and makes
  the iterator continue exactly where the state was taken.

Plain generators (user stages) have no state: asking for the state of a
pipeline that contains one raises :class:`CheckpointError` naming it.

Elastic resume (:mod:`wds_core.elastic`) needs to know which samples of a
balanced epoch a pipeline has delivered.  Three declared contracts answer it,
walking the iterators' ``src`` links from the output up to the tar reader:

* every iterator class declares :attr:`StageIterator.passes_order`: ``True``
  when it holds nothing back and delivers (a subset of) its input in order, so
  its upstream's delivered positions are its own; ``False`` when it cannot say
  (elastic resume through it is refused, naming it).  ``None`` (undeclared) is
  treated as ``False``, and a test refuses any class that leaves it undeclared;
* a stage that holds samples back and keeps count itself (a shuffle buffer, a
  window decoded ahead, the tar reader) implements :class:`ReportsDelivered`;
* the iterator that splits a balanced epoch implements :class:`BalancedPart`.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from .errors import CheckpointError

__all__ = [
    "EPOCH_TRACKERS",
    "RUN_HOOKS",
    "SOURCE_CLOSERS",
    "BalancedPart",
    "EpochTracker",
    "plug_in",
    "Recipe",
    "ReportsDelivered",
    "RunContext",
    "StageIterator",
    "Stateless",
    "close_chain",
    "count_items",
    "describe",
    "implements",
    "load_state",
    "replayed",
    "stage_names",
    "state_of",
    "state_or_error",
    "upstream_of",
]


@dataclass(frozen=True)
class RunContext:
    """What one iteration of a pipeline knows about itself.

    ``seed`` is the pipeline seed in force (always an int while iterating),
    ``seed_given`` whether the user chose it (a drawn seed differs between
    ranks), ``epoch`` the epoch number, ``stage`` the index of the stage being
    built, and ``per_reader`` whether an earlier stage gave this reader (rank
    and worker) its own share of the stream (a splitter, resampling): before
    that point every reader must make the same random choices, after it they
    may differ.  Rank and worker are learnt where they are used (see
    :mod:`wds_core.dist`).
    """

    seed: int = 0
    epoch: int = 0
    stage: int = 0
    seed_given: bool = True
    per_reader: bool = False

    def for_stage(self, index: int, per_reader: bool = False) -> RunContext:
        return RunContext(self.seed, self.epoch, index, self.seed_given, self.per_reader or per_reader)


#: What wraps the items of each pipeline run: ``hook(pipeline, items) -> items``, in order, when a run starts
#: (``wds_core`` plugs in the one that profiles runs when ``WDS_PROFILE`` is set: :func:`plug_in`).
RUN_HOOKS: list[Callable[[Any, Iterator[Any]], Iterator[Any]]] = []

#: What ends the source of a run when the run is closed (finished, dropped or ``close()``d): ``closer(source)``
#: for the object its first stage gave, in order; each leaves alone what it does not know.  A run's iterators
#: hold themselves in cycles, so what only they hold is freed by the cycle collector, at a time nobody chooses:
#: :mod:`wds_torch` plugs in the closer that stops the workers of a DataLoader iterator the run was reading, which
#: would otherwise be collected in whatever process collects first (a worker forked for the next epoch, whose
#: copy then tries to stop workers that are not its own).
SOURCE_CLOSERS: list[Callable[[Any], None]] = []


class EpochTracker(Protocol):
    """The capability that knows where a run is in a balanced epoch, for a pipeline that does not know it by name
    (``wds_core`` plugs in :class:`wds_core.elastic.BalancedEpochs`: :func:`plug_in`).

    ``position(chain)``: the ``"position"`` entry of a state for the chain of iterators ``chain`` (``None`` when
    it splits no balanced epoch); ``resume(chain, elastic)``: before the run starts, have the chain take up what
    a merged elastic state left (raising :class:`~wds_core.errors.CheckpointError` when it cannot)."""

    def position(self, chain: Any) -> dict[str, Any] | None: ...

    def resume(self, chain: Any, elastic: dict[str, Any]) -> None: ...


EPOCH_TRACKERS: list[EpochTracker] = []


def plug_in(
    run_hook: Callable[[Any, Iterator[Any]], Iterator[Any]] | None = None,
    source_closer: Callable[[Any], None] | None = None,
    epoch_tracker: EpochTracker | None = None,
) -> None:
    """Plug a feature into the pipeline, which knows none by name: called by the package that wires them (``wds_core``
    for profiling and balanced epochs, ``wds_torch`` for its DataLoader sources), never by a module as it is
    imported.  Each is added once."""
    registries: list[tuple[list[Any], Any]] = [(RUN_HOOKS, run_hook), (SOURCE_CLOSERS, source_closer),
                                               (EPOCH_TRACKERS, epoch_tracker)]  # fmt: skip
    for hooks, hook in registries:
        if hook is not None and hook not in hooks:
            hooks.append(hook)


_COUNTING = [0]  # how many count_items() are on


@contextlib.contextmanager
def count_items() -> Iterator[None]:
    """While on, stage iterators started count the items they hand downstream (:meth:`StageIterator.report`)."""
    _COUNTING[0] += 1
    try:
        yield
    finally:
        _COUNTING[0] -= 1


def describe(obj: Any) -> str:
    """A short name for a stage or iterator, for messages."""
    code = getattr(obj, "gi_code", None)
    if code is not None:
        return f"generator {code.co_name}()"
    custom = getattr(obj, "recipe_name", None)
    if callable(custom):
        return str(custom())
    name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    return name


def stage_names(stages: list[Any]) -> list[str]:
    """Each stage's :meth:`~wds_core.state.Recipe.stage_name` (a callable's own name for a user stage), numbered
    when one occurs twice."""
    names = [stage.stage_name() if isinstance(stage, Recipe) else describe(stage) for stage in stages]
    total, seen = collections.Counter(names), collections.Counter[str]()
    out = []
    for name in names:
        seen[name] += 1
        out.append(name if total[name] == 1 else f"{name}#{seen[name]}")
    return out


def state_of(it: Any) -> Any:
    """The state of an upstream iterator, or a clear error when it has none."""
    getter = getattr(it, "state_dict", None)
    if getter is None and type(it).__name__.endswith("DataLoaderIter"):
        raise CheckpointError(
            f"a PyTorch DataLoader ({describe(it)}) keeps no position to checkpoint: iterate the dataset through "
            "wds_torch.WebLoader (stages after it included), which checkpoints its workers with torchdata's "
            "StatefulDataLoader (pip install torchdata; the torch extra has it), or use StatefulDataLoader itself"
        )
    if getter is None:
        raise CheckpointError(
            f"the stage producing {describe(it)} cannot be checkpointed: it is a plain iterator "
            "without state_dict(); use the built-in stages (map, select, ...) around your function"
        )
    return getter()


def state_or_error(it: Any) -> Any:
    """:func:`state_of` ``it``, or the :class:`CheckpointError` saying why it has none: what a stage snapshots
    while it runs, to raise only if someone asks it for a checkpoint."""
    try:
        return state_of(it)
    except CheckpointError as exn:
        return exn


def _shard_of(item: Any) -> Any:
    """The shard an item came from, as far as it says (a sample's ``__url__``, a batch's last), else ``None``."""
    if isinstance(item, dict):
        url = item.get("__url__")
        return url[-1] if isinstance(url, (list, tuple)) and url else url if isinstance(url, str) else None
    if isinstance(item, (list, tuple)) and item:
        return _shard_of(item[-1]) or _shard_of(item[0])
    return None


def replayed(src: Iterator[Any], count: int, stage: str) -> Iterator[Any]:
    """The ``count`` items a restored stage takes again from ``src`` (its upstream, back where the stage's window
    started).  The stream ending before them means the data changed since the checkpoint (its shards rewritten with
    fewer samples): a :class:`CheckpointError` naming the shard the last of them came from, never a shorter
    epoch nor a ``StopIteration`` raised out of a generator."""
    last = None
    for taken in range(count):
        item = next(src, _ENDED)
        if item is _ENDED:
            raise CheckpointError(
                f"{stage}: the checkpoint takes {count} items again from where its window started, but the stream "
                f"ended after {taken}: the data changed since the checkpoint (shards rewritten with fewer "
                "samples?); restore a checkpoint taken since, or start the epoch again",
                url=_shard_of(last),
            )
        last = item
        yield item


_ENDED = object()


def load_state(it: Any, state: Any) -> None:
    loader = getattr(it, "load_state_dict", None)
    if loader is None:
        raise CheckpointError(f"the stage producing {describe(it)} cannot be restored from a checkpoint")
    loader(state)


def close_chain(it: Any) -> None:
    """Close a chain of iterators from its end up to its source: generators run their ``finally`` blocks, and
    the :data:`SOURCE_CLOSERS` end the source."""
    while it is not None:
        gen = it._gen if isinstance(it, StageIterator) else it
        closer = getattr(gen, "close", None)
        if callable(closer) and hasattr(gen, "gi_frame"):
            closer()
        if not isinstance(it, StageIterator):
            for end in SOURCE_CLOSERS:
                end(it)
            return
        it = it.src


class StageIterator:
    """Base of the built-in iterators: a generator inside, state outside."""

    #: Whether the items it delivered are (a subset of) a prefix of its input, in order, with nothing
    #: held back, so that its upstream's delivered positions are its own (see the module doc).
    #: Every subclass declares it; ``None`` means undeclared.
    passes_order: ClassVar[bool | None] = None
    #: Whether it counts its items while :func:`count_items` is on (a whole run does not: its last stage's count
    #: is its own, and each count costs about 60 ns an item).
    counts_items: ClassVar[bool] = True

    _counted: Iterator[Any] | None = None  # while items are counted (count_items): what __iter__ hands out
    _counter: Any = None

    def __init__(self, src: Any = None) -> None:
        self.src = src
        self._gen: Iterator[Any] | None = None

    def __iter__(self) -> Iterator[Any]:
        if self._gen is None:
            self._gen = self._run()
            if _COUNTING[0] and self.counts_items:  # each item selected by the next number of a counter: in C
                self._counter = itertools.count(1)
                self._counted = itertools.compress(self._gen, self._counter)
        return self._counted or self._gen

    def report(self) -> dict[str, Any]:
        """What this stage did so far, for :mod:`wds_core.observe.profiling`: ``items`` it handed downstream (``None``
        unless it was started while :func:`count_items` was on); stages add their own (``bytes``)."""
        counter = self._counter
        return {"items": int(repr(counter)[6:-1]) - 1 if counter is not None else None}

    def running_frame(self) -> Any:
        """The frame of the generator doing this stage's work (``None`` before it starts, after it ends, or
        when it is no generator): the profiler finds the stage on a thread's stack by it."""
        return getattr(self._gen, "gi_frame", None)

    def __next__(self) -> Any:
        return next(iter(self))

    def _run(self) -> Iterator[Any]:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def _own_state(self) -> dict[str, Any]:
        return {}

    def _load_own_state(self, state: dict[str, Any]) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        state = self._own_state()
        if self.src is not None:
            state["parent"] = state_of(self.src)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self._gen is not None:
            raise CheckpointError(f"{describe(self)}: load_state_dict() must come before iteration starts")
        if not isinstance(state, dict):
            raise CheckpointError(f"{describe(self)}: expected a dict state, got {type(state).__name__}")
        if self.src is not None:
            if "parent" not in state:
                raise CheckpointError(f"{describe(self)}: the state has no 'parent' entry")
            load_state(self.src, state["parent"])
        self._load_own_state(state)


class Recipe:
    """Base of the built-in stages: immutable, picklable, builds an iterator per run.

    ``per_reader`` declares that what the stage yields depends on the reader
    (rank and worker): splitters, per-reader resampling.  Stages after it are
    built with ``ctx.per_reader`` set.
    """

    per_reader = False
    #: Whether the stage gives each reader its part of a balanced epoch (a run then resumes through
    #: :data:`EPOCH_TRACKERS`, and an empty part is no error).
    splits_epoch = False

    def build(self, src: Any, ctx: RunContext) -> StageIterator:  # pragma: no cover - subclasses define it
        raise NotImplementedError

    def __call__(self, src: Any) -> StageIterator:
        """Use the stage on its own, as webdataset allows: ``shuffle(10)(iterable)``."""
        return self.build(src, RunContext())

    def stage_name(self) -> str:
        """A short name for reports (a profile's rows): webdataset's lowercase name of the stage (``to_tuple``)."""
        return re.sub(r"(?<!^)(?=[A-Z])", "_", type(self).__name__).lower()

    def __repr__(self) -> str:
        """``shuffle(bufsize=1000, initial=100, ...)``: webdataset's lowercase name of the stage and its settings
        (training code finds a stage by its name in ``str(stage)``)."""
        name = Recipe.stage_name(self)
        settings = []
        for key, value in vars(self).items():
            if key.startswith("_"):
                continue
            shown = repr(value)
            settings.append(f"{key}={shown if len(shown) <= 60 else shown[:57] + '...'}")
        return f"{name}({', '.join(settings)})"


class Stateless(StageIterator):
    """An iterator whose only state is its upstream's: ``fn(upstream)`` does the work."""

    passes_order = True  # per-sample stages: what they delivered is a prefix of what they read

    def __init__(self, src: Any, fn: Any) -> None:
        super().__init__(src)
        self.fn = fn

    def _run(self) -> Iterator[Any]:
        return self.fn(iter(self.src))


@runtime_checkable
class ReportsDelivered(Protocol):
    """A stage that holds samples back and knows which samples of its reader's balanced part it delivered.

    ``delivered_positions()`` returns ``(prefix, extra)``: the first ``prefix``
    positions of the reader's part, and the sorted positions ``extra`` past
    them (numpy integers), as seen by this stage's consumer.  It raises
    :class:`~wds_core.errors.NotElastic` saying why when it cannot tell.
    ``in_order`` is true when what it delivered is always a prefix of what it
    read (a window decoded ahead), false when it reorders (a shuffle buffer).
    """

    in_order: bool

    def delivered_positions(self) -> tuple[int, Any]: ...


@runtime_checkable
class BalancedPart(Protocol):
    """The iterator that gives one reader its part of a balanced epoch, as reading tasks.

    ``samples_handed()``: samples in the tasks handed downstream so far;
    ``summarize(prefix, extra)``: the ``"position"`` entry of a state, given the
    part's positions delivered downstream (as :class:`ReportsDelivered` counts
    them); ``resume_elastic(state)``: before the epoch starts, take this
    reader's share of what a merged elastic state left.
    """

    def samples_handed(self) -> int: ...

    def summarize(self, prefix: int, extra: Any) -> dict[str, Any]: ...

    def resume_elastic(self, elastic: dict[str, Any]) -> None: ...


_IMPLEMENTS: dict[tuple[type, type], bool] = {}


def implements(it: Any, protocol: type) -> bool:
    """``isinstance(it, protocol)`` for the protocols above, decided once per class.

    typing's runtime protocol check costs tens of microseconds a call, and
    every ``state_dict()`` asks it of each iterator; the answer depends on the
    class (the protocols' members are methods, and ``in_order`` is set by
    ``__init__``), so it is remembered per class.
    """
    key = (type(it), protocol)
    known = _IMPLEMENTS.get(key)
    if known is None:
        known = _IMPLEMENTS[key] = isinstance(it, protocol)
    return known


def upstream_of(it: Any) -> Any:
    """The iterator ``it`` reads from (its declared ``src``), or ``None`` for a source or a foreign iterator."""
    return it.src if isinstance(it, StageIterator) else None
