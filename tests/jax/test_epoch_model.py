"""``BatchIterator`` against the model of an epoch (issue 67; tests/epochmodel.py): the samples a process's batches
hold in an epoch, for each configuration hypothesis draws (in the process or in worker processes, each
``remainder``), sample by sample."""

from __future__ import annotations

import collections
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

jax = pytest.importorskip("jax")

import wds_core as wds  # noqa: E402
import wds_jax  # noqa: E402
from tests.conftest import FUZZ_EXAMPLES, counted_shards  # noqa: E402
from tests.epochmodel import SEED, Config, configs, expected  # noqa: E402

BATCH = 3


def key_id(sample):
    """``s{shard}-{i:05d}`` as one integer (JAX arrays hold no strings)."""
    shard, index = sample["__key__"][1:].split("-")
    return np.int64(int(shard) * 1000 + int(index))


def ids(keys):
    return [int(k[1:].split("-")[0]) * 1000 + int(k.split("-")[1]) for k in keys]


def pipeline_of(cfg: Config, spec: str):
    if cfg.mode in ("pad", "drop"):
        dataset = wds.WebDataset.balanced(spec, cfg.mode, shuffle=cfg.shuffle, seed=SEED, empty_check=False)
    else:
        dataset = wds.WebDataset(spec, shuffle=cfg.shuffle, seed=SEED, empty_check=False)
    dataset = dataset.map(key_id)
    return dataset.with_epoch(cfg.n) if cfg.n is not None else dataset


def check(cfg: Config, workers: int, remainder: str) -> None:
    readers = replace(cfg, workers=max(workers, 1))  # the model's readers: the workers, or the process itself
    with tempfile.TemporaryDirectory() as tmp:
        spec, _ = counted_shards(Path(tmp), cfg.sizes)
        for rank in range(cfg.ranks):
            parts = [expected(readers, rank, w).keys or [] for w in range(readers.workers)]
            if remainder == "drop":  # each worker's batches are its own; in the process, one stream
                parts = [part[: len(part) // BATCH * BATCH] for part in parts]
            want = [i for part in parts for i in ids(part)]
            iterator = wds_jax.BatchIterator(
                pipeline_of(cfg, spec),
                BATCH,
                remainder=remainder,
                num_workers=workers,
                process_index=rank,
                process_count=cfg.ranks,
            )
            with iterator:
                got = []
                for batch in iterator:
                    values = np.asarray(batch[0] if isinstance(batch, tuple) else batch)
                    if remainder == "pad":
                        values = values[np.asarray(batch[1])]
                    got += values.tolist()
            assert collections.Counter(got) == collections.Counter(want), (cfg, workers, remainder, rank, got)


REMAINDERS = st.sampled_from(["drop", "partial", "pad"])


@settings(max_examples=max(FUZZ_EXAMPLES // 2, 30))
@given(configs(modes=("plain", "each", "pad", "drop"), max_ranks=3, max_workers=1, batches=False), REMAINDERS)
def test_batches_in_the_process_hold_what_the_model_says(cfg, remainder):
    check(cfg, 0, remainder)


@pytest.mark.slow
@settings(max_examples=max(FUZZ_EXAMPLES // 4, 15))
@given(configs(modes=("plain", "each", "pad", "drop"), max_ranks=2, max_workers=3, batches=False), REMAINDERS)
@example(Config(sizes=(4, 4, 4), ranks=1, workers=2, mode="each", n=7), "partial")
def test_batches_of_workers_hold_what_the_model_says(cfg, remainder):
    check(cfg, cfg.workers, remainder)
