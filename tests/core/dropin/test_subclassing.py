"""Training code that subclasses webdataset's classes (issue 29), written the way public code writes it, run on
webdataset 1.0.2 and on wds's drop-in: the same samples, batches and per-epoch coverage."""

from __future__ import annotations

import random
from collections import Counter
from itertools import islice

import pytest

import wds_core.dropin as ours

real = pytest.importorskip("webdataset")


def finite_pipeline_class(wds):
    """open_lm's FiniteDataPipeline: ``__iter__`` slices ``self.iterator()`` with ``self.nsamples`` always."""

    class FiniteDataPipeline(wds.DataPipeline):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)

        def __iter__(self):
            if self.nsamples > 0:
                return islice(self.iterator(), self.nsamples)
            return self.iterator()

    return FiniteDataPipeline


def open_lm_style(wds, spec_a, spec_b, nbatches):
    """Two sources as FiniteDataPipelines, ``.repeat(nepochs=1, nbatches=n)``, mixed by ``RandomMix(datasets,
    probs, longest=True)``; the list is filled in after the mix is made (webdataset keeps the list it was given)."""
    finite = finite_pipeline_class(wds)
    datasets, probs = [], []
    mix = wds.RandomMix(datasets, probs, longest=True)
    for spec, weight in ((spec_a, 0.7), (spec_b, 0.3)):
        pipeline = finite(
            wds.SimpleShardList(spec),
            wds.split_by_worker,
            wds.tarfile_to_samples(handler=wds.warn_and_continue),
            wds.shuffle(bufsize=0, initial=0),  # "no shuffle" in real configurations
            wds.to_tuple("__key__", "cls"),
            wds.batched(4, partial=False),
        )
        datasets.append(pipeline.repeat(nepochs=1, nbatches=nbatches))
        probs.append(weight)
    return mix


def batches_of(dataset):
    return [tuple(batch[0]) for batch in dataset]


def test_a_finite_pipeline_subclass_repeated_and_mixed_gives_webdataset_batches(shards):
    spec, paths, keys = shards
    spec_a, spec_b = paths[:2], paths[2:]
    for nbatches in (3, 50):  # fewer than an epoch's batches, and more (the epoch ends the pass)
        theirs = batches_of(open_lm_style(real, spec_a, spec_b, nbatches))
        mine = batches_of(open_lm_style(ours, spec_a, spec_b, nbatches))
        assert Counter(mine) == Counter(theirs), nbatches  # which batches: the mix draws its own order
        assert len(mine) == len(theirs) == min(2 * nbatches, 24)
        assert all(len(batch) == 4 for batch in mine)


def test_without_shuffle_the_order_within_each_source_is_webdataset_s(shards):
    spec, paths, keys = shards
    finite = finite_pipeline_class(ours)
    theirs_cls = finite_pipeline_class(real)
    mine = list(
        finite(ours.SimpleShardList(paths), ours.tarfile_to_samples(), ours.shuffle(0), ours.to_tuple("__key__"))
    )
    theirs = list(
        theirs_cls(real.SimpleShardList(paths), real.tarfile_to_samples(), real.shuffle(0), real.to_tuple("__key__"))
    )
    assert mine == theirs and [k for (k,) in mine] == keys


def test_repeat_one_epoch_with_nbatches_does_not_cut_a_plain_pipeline(shards):
    """webdataset's own ``__iter__`` slices only when the stages repeat (what open_lm's subclass works around)."""
    spec, paths, keys = shards
    for wds in (real, ours):
        pipeline = wds.DataPipeline(wds.SimpleShardList(paths), wds.tarfile_to_samples()).repeat(nepochs=1, nbatches=7)
        assert len(list(pipeline)) == len(keys), wds.__name__
        pipeline = wds.DataPipeline(wds.SimpleShardList(paths), wds.tarfile_to_samples()).repeat(nepochs=2, nbatches=7)
        assert len(list(pipeline)) == 7, wds.__name__


class _Weighted:
    """A WebDataset subclass overriding ``iterator()`` to repeat some samples (seen in diffusion fine-tuning code):
    it loops over ``self.repetitions`` and calls ``self.iterator1()``."""

    @staticmethod
    def make(wds, urls, seed):
        class MyWebDataset(wds.WebDataset):
            def __init__(self, *args, weight_pc=0.3, dup_weight=2, seed=0, **kwargs):
                self.weight_pc, self.dup_weight = weight_pc, dup_weight
                super().__init__(*args, **kwargs)
                self.my_seed = seed

            def iterator(self):
                for _ in range(self.repetitions):
                    rng = random.Random(self.my_seed)
                    for sample in self.iterator1():
                        copies = self.dup_weight if rng.random() < self.weight_pc else 1
                        for _ in range(copies):
                            yield sample

            def __iter__(self):
                if self.repetitions != 1 and self.nsamples > 0:
                    return islice(self.iterator(), self.nsamples)
                return self.iterator()

        return MyWebDataset(urls, shardshuffle=False, seed=seed).to_tuple("__key__")


def test_a_webdataset_subclass_overriding_iterator_repeats_what_webdataset_repeats(shards):
    spec, paths, keys = shards
    theirs = [k for (k,) in _Weighted.make(real, paths, 5)]
    mine = [k for (k,) in _Weighted.make(ours, paths, 5)]
    assert mine == theirs and set(mine) == set(keys) and len(mine) > len(keys)


def test_shuffle_takes_webdataset_s_whole_signature():
    items = list(range(50))
    assert list(ours.DataPipeline(items, ours.shuffle(bufsize=0, initial=0))) == items  # 0: no shuffle
    assert list(ours.DataPipeline(items, ours.shuffle(1))) == items
    handled = list(ours.DataPipeline(items, ours.shuffle(1000, handler=ours.warn_and_continue)))
    assert sorted(handled) == items and handled != items
    rng_a, rng_b = random.Random(3), random.Random(3)
    assert list(ours.shuffle(10, 5, rng_a)(iter(items))) == list(real.filters._shuffle(iter(items), 10, 5, rng_b))
    with pytest.raises(TypeError):
        ours.shuffle(10, nonsense=1)  # a name webdataset does not have either


def test_stages_say_what_they_are():
    dataset = ours.WebDataset("a-{0..3}.tar", shardshuffle=True).shuffle(100).decode("rgb8").to_tuple("jpg")
    found = [str(stage) for stage in dataset.pipeline if "shuffle" in str(stage)]
    assert any("bufsize=100" in text for text in found), found  # (the shard list says shuffle=True too)


def test_a_mix_reads_its_list_when_it_runs():
    first, second = [1, 2, 3], [10, 20]
    datasets = [first]
    mix = ours.RandomMix(datasets, longest=True)
    datasets.append(second)
    assert sorted(mix) == [1, 2, 3, 10, 20]
    datasets.append([100])
    assert sorted(mix) == [1, 2, 3, 10, 20, 100]
