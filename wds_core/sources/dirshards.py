"""Shard sources beyond a fixed list: a watched folder, and webdataset's multi-source YAML sample.

* :class:`DirectoryShardList` (webdataset's): shards are claimed from a local
  folder as they appear, by renaming ``x.tar`` to ``x.tar._PID_`` (so that
  several processes never read one shard at once); after reading, the shard
  is put back (``mode="resample"``), renamed ``x.tar._done_`` (``"keep"``) or
  deleted (``"unlink"``).  Claims of processes that died are put back too.
* :class:`MultiShardSample` (webdataset's, for its ``datasets:`` YAML): each
  epoch, every source contributes its shards (all of them, ``choose`` of them
  without or ``resample`` with replacement), and the union is shuffled; a
  function of the seed and the epoch.  Mixing *samples* in proportions is
  ``WebDataset("spec.yaml")`` (:mod:`wds_core.sources.specfile`).

Both yield webdataset's ``{"url": ...}`` items, like the other shard lists.
"""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Iterator
from typing import Any

from ..dist import agreed_seed, process_running
from ..errors import CheckpointError, SpecError
from ..io import files
from ..rng import Rng, derive_seed, fresh_seed
from ..state import Recipe, RunContext, StageIterator

__all__ = ["DirectoryShardList", "MultiShardSample"]

_CLAIM = re.compile(r"^(.*)\._(\d+)_$")


class DirectoryShardList(Recipe):
    """Shards claimed one at a time from the folder ``path`` (its files matching ``pattern``), until ``timeout``.

    ``poll`` is the pause in seconds when no shard is available (``None``:
    stop instead); ``select`` takes the ``"random"`` or the ``"oldest"``
    available shard; ``mode`` says what happens to a shard once read.
    The stream depends on other processes, so it has no checkpoint.
    """

    per_reader = True

    def __init__(
        self,
        path: str,
        pattern: str = "*.{tar,tgz,tar.tgz}",
        poll: float | None = 1,
        timeout: float = 1e12,
        mode: str = "resample",
        select: str = "random",
        fate: Any = None,
    ) -> None:
        if not files.isdir(path):
            raise SpecError(f"DirectoryShardList needs an existing folder, got {path!r}")
        if mode not in ("resample", "keep", "unlink"):
            raise SpecError(f"mode must be 'resample', 'keep' or 'unlink', got {mode!r}")
        if select not in ("random", "oldest"):
            raise SpecError(f"select must be 'random' or 'oldest', got {select!r}")
        if fate is not None and not callable(fate):
            raise TypeError(f"fate must be a function of the claimed path, got {type(fate).__name__}")
        self.path, self.pattern, self.poll, self.timeout = path, pattern, poll, timeout
        self.mode, self.select, self.fate = mode, select, fate

    def build(self, src: Any, ctx: RunContext) -> _DirectoryIterator:
        return _DirectoryIterator(self)

    def __iter__(self) -> Iterator[dict[str, str]]:
        return iter(self.build(None, RunContext()))

    def candidates(self) -> list[str]:
        import braceexpand

        found: set[str] = set()
        for pattern in braceexpand.braceexpand(self.pattern):
            found.update(files.glob(pattern, self.path))
        return sorted(found)

    def recycle(self, claimed: str) -> None:
        """Give back a claimed shard according to ``mode`` (or to ``fate(claimed)`` when given)."""
        if self.fate is not None:
            self.fate(claimed)
            return
        original = _CLAIM.match(claimed).group(1)  # type: ignore[union-attr]
        if self.mode == "unlink":
            files.remove(claimed, missing_ok=False)
        elif self.mode == "keep":
            files.rename(claimed, original + "._done_")
        else:
            files.rename(claimed, original)

    def cleanup_files_without_processes(self) -> None:
        """webdataset's name of :meth:`release_dead_claims`."""
        self.release_dead_claims()

    def release_dead_claims(self) -> None:
        for claimed in files.glob("*._*_", self.path):
            match = _CLAIM.match(claimed)
            if match and not process_running(int(match.group(2))):
                try:
                    self.recycle(claimed)
                except FileNotFoundError:
                    pass  # another process released it first


class _DirectoryIterator(StageIterator):
    passes_order = False  # a shard source

    def __init__(self, recipe: DirectoryShardList) -> None:
        super().__init__(None)
        self.recipe = recipe

    def _run(self) -> Iterator[dict[str, str]]:
        recipe = self.recipe
        rng = random.Random(fresh_seed())
        start = time.time()
        while time.time() - start < recipe.timeout:
            available = recipe.candidates()
            if not available:
                if recipe.poll is None:
                    return
                time.sleep(recipe.poll)
                continue
            if recipe.select == "oldest":
                chosen = min(available, key=lambda name: files.stat(name).st_mtime)
            else:
                chosen = rng.choice(available)
            claimed = f"{chosen}._{os.getpid()}_"
            try:
                files.rename(chosen, claimed)
            except FileNotFoundError:  # another process claimed it first
                continue
            # given back when the consumer asks for the next shard (as in webdataset): a consumer that
            # stops early leaves its claim, which release_dead_claims() returns once this process ends
            yield {"url": claimed}
            recipe.recycle(claimed)
            recipe.release_dead_claims()

    def state_dict(self) -> dict[str, Any]:
        raise CheckpointError("DirectoryShardList claims shards as other processes leave them: it has no checkpoint")


class MultiShardSample(Recipe):
    """webdataset's ``MultiShardSample(spec)``: a YAML file (or its dict) with ``datasets:``, shards per epoch.

    ``seed`` (or the pipeline's) and the epoch decide which shards each source
    contributes and their order; ``set_epoch(n)`` is accepted as webdataset's
    spelling of starting at epoch ``n`` when iterated on its own.
    """

    def __init__(self, spec: Any, seed: int | None = None, allow_pipe: bool = False) -> None:
        from .specfile import SourceShards, load_spec

        sources, _ = load_spec(spec, allow_pipe)
        for source in sources:
            if source.scale is not None or source.extensions or source.storage_options:
                raise SpecError(
                    f"source {source.name!r}: scale/extensions/storage_options mix samples; "
                    "use WebDataset(spec) for them (MultiShardSample only lists shards)"
                )
        self.sources = [SourceShards(source, seed, shuffle=False) for source in sources]
        self.seed = seed
        self.epoch = 0
        self._drawn_seed = fresh_seed()

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def get_shards_for_epoch(self) -> list[str]:
        """The shard URLs of the epoch set last (webdataset's method; ``sample()`` in older releases)."""
        return self.order(self.epoch, self.seed if self.seed is not None else self._drawn_seed)

    sample = get_shards_for_epoch

    def order(self, epoch: int, seed: int) -> list[str]:
        urls = [url for source in self.sources for url in source.order(epoch)]
        perm = Rng(derive_seed(seed, "multishards", epoch)).permutation(len(urls))
        return [urls[i] for i in perm]

    def build(self, src: Any, ctx: RunContext) -> _MultiIterator:
        seed = self.seed if self.seed is not None else agreed_seed(ctx.seed, ctx.seed_given)
        return _MultiIterator(self.order(ctx.epoch, seed), ctx.epoch)

    def __iter__(self) -> Iterator[dict[str, str]]:
        return iter(self.build(None, RunContext(seed=self._drawn_seed, epoch=self.epoch)))


class _MultiIterator(StageIterator):
    passes_order = False  # a shard source

    def __init__(self, urls: list[str], epoch: int) -> None:
        super().__init__(None)
        self.urls, self.epoch, self.index = urls, epoch, 0

    def _run(self) -> Iterator[dict[str, str]]:
        while self.index < len(self.urls):
            self.index += 1
            yield {"url": self.urls[self.index - 1]}

    def _own_state(self) -> dict[str, Any]:
        return {"index": self.index, "nshards": len(self.urls)}

    def _load_own_state(self, state: dict[str, Any]) -> None:
        if state.get("nshards") != len(self.urls):
            expected = state.get("nshards")
            raise CheckpointError(f"the checkpoint is for {expected} shards, this epoch has {len(self.urls)}")
        self.index = int(state["index"])
