import json
import time

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import wds_core  # noqa: E402
import wds_tf  # noqa: E402
from tests.conftest import array_shards  # noqa: E402
from wds_core.errors import SampleError  # noqa: E402


@pytest.fixture(autouse=True)
def sources_closed(monkeypatch):
    """Each source a test makes ends its workers with the test (they stay between epochs, and tf.data keeps a
    source alive): the next test in this process starts with no child process of these."""
    made = []
    original = wds_tf.TFSource.__init__

    def recorded(self, *args, **kw):
        made.append(self)
        original(self, *args, **kw)

    monkeypatch.setattr(wds_tf.TFSource, "__init__", recorded)
    yield
    for source in made:
        source.close()


@pytest.fixture
def spec(tmp_path):
    return array_shards(tmp_path, "t", 4, 12, (3,), classes=2)


def make(spec):
    return wds_tf.WebDataset(spec, seed=1, shuffle=True).shuffle(5).decode().to_tuple("npy", "cls")


def values(dataset):
    return [int(x[0]) for x, _ in dataset.as_numpy_iterator()]


EXPECTED = sorted(s * 100 + i for s in range(4) for i in range(12))


def test_signature_inferred_and_elements_match_the_pipeline(spec):
    source = wds_tf.TFSource(make(spec))
    x_spec, y_spec = source.signature
    assert x_spec == tf.TensorSpec((3,), tf.float32) and y_spec == tf.TensorSpec((), tf.int64)
    got = values(source.dataset())
    assert got == [int(x[0]) for x, _ in make(spec)]
    dicts = wds_tf.TFSource(wds_tf.WebDataset(spec).decode().rename(x="npy", y="cls").map_dict(y=int))
    assert set(dicts.signature) == {"__key__", "__url__", "x", "y", "__local_path__"}
    assert dicts.signature["__key__"] == tf.TensorSpec((), tf.string)


def test_each_pass_is_a_new_epoch(spec):
    dataset = wds_tf.to_tf_dataset(make(spec))
    first, second = values(dataset), values(dataset)
    assert sorted(first) == sorted(second) == EXPECTED and first != second


@pytest.mark.slow
def test_worker_processes_and_interleaved_threads(spec):
    assert sorted(values(wds_tf.to_tf_dataset(make(spec), num_workers=2))) == EXPECTED
    interleaved = wds_tf.to_tf_dataset(make(spec), num_parallel_calls=2)
    first = values(interleaved)
    assert sorted(first) == EXPECTED and values(wds_tf.to_tf_dataset(make(spec), num_parallel_calls=2)) == first


def ragged(sample):
    x, y = sample
    return list(range(int(x[0]) % 3)), y


def growing(sample):
    x, y = sample
    return np.zeros(1 + int(x[0]) % 2, np.float32), y


def test_ragged_and_changing_fields_are_clear_errors(spec):
    with pytest.raises(SampleError, match="#0 is a list"):
        wds_tf.TFSource(make(spec).map(ragged))
    with pytest.raises(Exception, match="field #0 has shape"):
        values(wds_tf.to_tf_dataset(make(spec).map(growing)))
    signature = (tf.TensorSpec((None,), tf.float32), tf.TensorSpec((), tf.int64))
    assert len(values(wds_tf.to_tf_dataset(make(spec).map(growing), signature))) == 48


@pytest.mark.filterwarnings("ignore::UserWarning")  # Keras on datasets of unknown length
def test_keras_fit(spec):
    keras = pytest.importorskip("keras")
    dataset = wds_tf.to_tf_dataset(make(spec)).batch(8)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    batches = []
    counter = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: batches.append(batch))
    history = model.fit(dataset, epochs=2, verbose=0, callbacks=[counter])
    assert len(history.history["loss"]) == 2
    assert len(batches) == 2 * 6  # 48 samples in batches of 8, in each of the two epochs


def test_state_after_the_last_element_handed_over(spec):
    reference = values(wds_tf.to_tf_dataset(make(spec)))
    source = wds_tf.TFSource(make(spec))
    stream = source.dataset().as_numpy_iterator()
    head = [int(next(stream)[0][0]) for _ in range(13)]
    state = json.loads(json.dumps(source.state_dict()))
    resumed = wds_tf.TFSource(make(spec))
    resumed.load_state_dict(state)
    rest = values(resumed.dataset())
    assert head == reference[:13]
    # the state is after the last element TensorFlow pulled, which may be a few ahead of the consumer
    ahead = len(reference) - 13 - len(rest)
    assert 0 <= ahead <= 16 and rest == reference[13 + ahead :]


def dict_pipeline(spec):
    return wds_tf.WebDataset(spec).decode().rename(x="npy", y="cls")


def rows(elements):
    """Batches as the samples in them, in order (bytes keys, float lists, ints)."""
    out = []
    for batch in elements:
        for i in range(len(batch["y"])):
            out.append((batch["__key__"][i], batch["x"][i].tolist(), int(batch["y"][i])))
    return out


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_batch_size_stacks_samples_where_they_are_made(spec, workers):
    one_by_one = [
        (e["__key__"], e["x"].tolist(), int(e["y"]))
        for e in wds_tf.TFSource(dict_pipeline(spec)).dataset().as_numpy_iterator()
    ]
    source = wds_tf.TFSource(dict_pipeline(spec), batch_size=5, num_workers=workers)
    assert source.element_signature["x"] == tf.TensorSpec((None, 3), tf.float32)
    assert source.element_signature["__key__"] == tf.TensorSpec((None,), tf.string)
    batches = list(source.dataset().as_numpy_iterator())
    if workers == 0:
        assert [len(b["y"]) for b in batches] == [5] * 9 + [3] and rows(batches) == one_by_one
    else:  # each worker's last batch is short; the samples are the same
        assert sorted(rows(batches)) == sorted(one_by_one)
    full = wds_tf.TFSource(dict_pipeline(spec), batch_size=5, drop_remainder=True, num_workers=workers)
    assert full.element_signature["x"] == tf.TensorSpec((5, 3), tf.float32)
    kept = list(full.dataset().as_numpy_iterator())
    assert all(len(b["y"]) == 5 for b in kept) and len(kept) == (9 if workers == 0 else 8)
    tuples = wds_tf.TFSource(make(spec), batch_size=4).dataset()
    assert tuples.element_spec == (tf.TensorSpec((None, 3), tf.float32), tf.TensorSpec((None,), tf.int64))
    assert sorted(int(v) for x, _ in tuples.as_numpy_iterator() for v in x[:, 0]) == EXPECTED
    if workers == 0:  # interleaved copies in threads batch their own shares
        threads = wds_tf.TFSource(make(spec), batch_size=4, num_parallel_calls=2).dataset()
        assert sorted(int(v) for x, _ in threads.as_numpy_iterator() for v in x[:, 0]) == EXPECTED


def test_batch_size_refusals_and_errors(spec):
    with pytest.raises(ValueError, match="batch_size"):
        wds_tf.TFSource(make(spec), batch_size=0)
    varying = (tf.TensorSpec((None,), tf.float32), tf.TensorSpec((), tf.int64))
    with pytest.raises(wds_tf.SpecError, match="padded_batch"):
        wds_tf.TFSource(make(spec), varying, batch_size=4)
    with pytest.raises(wds_tf.SpecError, match="wds pipeline"):
        wds_tf.TFSource([(np.zeros(3, np.float32), 1)] * 4, batch_size=2)
    grows = wds_tf.TFSource(
        make(spec).map(growing), (tf.TensorSpec((3,), tf.float32), tf.TensorSpec((), tf.int64)), batch_size=4
    )
    with pytest.raises(Exception, match="field #0 has shape"):
        list(grows.dataset())


def test_batch_size_state_resumes_after_the_last_batch(spec):
    def firsts(dataset):
        return [int(v) for x, _ in dataset for v in x[:, 0]]

    reference = firsts(wds_tf.TFSource(make(spec), batch_size=4).dataset().as_numpy_iterator())
    source = wds_tf.TFSource(make(spec), batch_size=4)
    stream = source.dataset().as_numpy_iterator()
    head = firsts([next(stream) for _ in range(3)])
    state = json.loads(json.dumps(source.state_dict()))
    resumed = wds_tf.TFSource(make(spec), batch_size=4)
    resumed.load_state_dict(state)
    rest = firsts(resumed.dataset().as_numpy_iterator())
    taken = len(reference) - len(rest)
    assert head == reference[:12] and rest == reference[taken:] and 12 <= taken <= 12 + 4 * 4


@pytest.mark.slow
def test_batches_from_shared_memory_stay_valid_while_held(tmp_path):
    """Batches from the Loader's shared-memory slots reach TensorFlow without a copy (tf.data wraps an aligned
    array); a tensor held past the epoch must keep its slot from being reused."""
    spec = array_shards(tmp_path, "big", 2, 16, (64, 128), classes=3)
    pipeline = wds_tf.WebDataset(spec).decode().to_tuple("npy", "cls")
    source = wds_tf.TFSource(pipeline, batch_size=4, num_workers=2)
    held = list(source.dataset())  # every batch of the epoch at once: more than the workers have slots
    firsts = sorted(int(v) for x, _ in held for v in x.numpy()[:, 0, 0])
    assert firsts == sorted(s * 100 + i for s in range(2) for i in range(16))
    for x, _ in held:
        assert all(np.all(row == row[0, 0]) for row in x.numpy())  # no slot was reused under a held tensor


@pytest.mark.parametrize("batch_size", [None, 4])
def test_zero_copy_fields_are_handed_over_as_strings(spec, batch_size):
    def pipeline(zero_copy):
        return wds_tf.WebDataset(spec, reading=wds_core.ShardReadOptions(zero_copy=zero_copy)).to_tuple("npy", "cls")

    source = wds_tf.TFSource(pipeline(True), batch_size=batch_size)
    assert source.signature == (tf.TensorSpec((), tf.string), tf.TensorSpec((), tf.string))
    rows = source.dataset().unbatch() if batch_size else source.dataset()
    got = [tuple(x) for x in rows.as_numpy_iterator()]
    assert got == [(bytes(a), bytes(b)) for a, b in pipeline(False)]


def test_autotuning_is_off_unless_asked_for_and_the_state_is_then_exact(spec):
    """tf.data's autotuning model makes dropping an iterator wait out its thread's sleep (every epoch) and
    injects a prefetch: TFSource turns it off unless autotune=True; options set later still win."""
    source = wds_tf.TFSource(make(spec))
    assert source.dataset().options().autotune.enabled is False
    assert wds_tf.TFSource(make(spec), autotune=True).dataset().options().autotune.enabled is not False
    again = tf.data.Options()
    again.autotune.enabled = True
    assert source.dataset().map(lambda x, y: (x, y)).with_options(again).options().autotune.enabled is True
    reference = values(wds_tf.to_tf_dataset(make(spec)))
    stream = source.dataset().as_numpy_iterator()
    head = [int(next(stream)[0][0]) for _ in range(13)]
    state = json.loads(json.dumps(source.state_dict()))
    resumed = wds_tf.TFSource(make(spec))
    resumed.load_state_dict(state)
    assert head + values(resumed.dataset()) == reference  # nothing was pulled ahead of the consumer


def test_starvation_of_a_tf_dataset(spec):
    def slow(sample):
        time.sleep(0.002)
        return sample

    watched = wds_tf.Starvation(wds_tf.TFSource(make(spec).map(slow)).dataset())
    assert sum(1 for _ in watched) == 48 and watched.report()["share"] > 0.8


def _fit(dataset, **kw):
    keras = pytest.importorskip("keras")
    import warnings

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    steps = []
    counter = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: steps.append(batch))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(dataset, epochs=3, verbose=0, callbacks=[counter], **kw)
    return len(steps), [str(w.message) for w in caught if "ran out of data" in str(w.message)]


def test_keras_knows_the_epoch_where_the_pipeline_fixes_it(spec):
    """Issue 45.10: Keras warned ``Your input ran out of data; interrupting training`` on every TFSource (its
    cardinality unknown).  with_epoch(n) and with_length(n) now give the dataset its cardinality; without
    either, steps_per_epoch does (the documented way)."""
    resampled = wds_tf.WebDataset.resampled(spec, seed=1).decode().to_tuple("npy", "cls")
    by_epoch = wds_tf.TFSource(resampled.with_epoch(20), batch_size=8)
    assert int(by_epoch.dataset().cardinality()) == 3  # 20 samples: ceil(20 / 8) whole batches
    assert _fit(by_epoch.dataset()) == (9, [])
    by_length = wds_tf.TFSource(make(spec).with_length(48, silent=True), batch_size=8)
    assert int(by_length.dataset().cardinality()) == 6 and _fit(by_length.dataset()) == (18, [])
    unbatched = wds_tf.TFSource(make(spec).with_length(48, silent=True))
    assert int(unbatched.dataset().cardinality()) == 48
    unknown = wds_tf.TFSource(make(spec), batch_size=8)
    assert int(unknown.dataset().cardinality()) == tf.data.UNKNOWN_CARDINALITY
    steps, warned = _fit(unknown.dataset())
    assert steps == 18 and len(warned) == 3  # what the issue saw (each epoch), and what steps_per_epoch avoids:
    assert _fit(unknown.dataset().repeat(), steps_per_epoch=6) == (18, [])


def test_a_with_length_that_is_wrong_says_so(spec):
    source = wds_tf.TFSource(make(spec).with_length(50, silent=True), batch_size=8)
    with pytest.raises(Exception, match=r"with_length\(50\) says 7 batches an epoch.*gave 6.*steps_per_epoch"):
        list(source.dataset().as_numpy_iterator())


@pytest.mark.slow
def test_cardinality_with_copies_of_the_pipeline(spec):
    resampled = wds_tf.WebDataset.resampled(spec, seed=1).decode().to_tuple("npy", "cls").with_epoch(10)
    for kw, expected in [
        # an epoch is with_epoch's 10 samples in all, each copy its share (issue 58.5) ...
        ({"num_workers": 2}, 10), ({"num_parallel_calls": 2}, 10), ({"num_workers": 2, "batch_size": 4}, 4),
        ({"num_workers": 2, "batch_size": 4, "drop_remainder": True}, 2), ({"num_workers": 3}, 10),
        # ... or, with epoch="each", 10 from each copy, as webdataset counts
        ({"num_workers": 2, "epoch": "each"}, 20), ({"num_parallel_calls": 2, "epoch": "each"}, 20),
        ({"num_workers": 2, "batch_size": 4, "epoch": "each"}, 6),
        ({"num_workers": 2, "batch_size": 4, "drop_remainder": True, "epoch": "each"}, 4),
    ]:  # fmt: skip
        dataset = wds_tf.TFSource(resampled, **kw).dataset()
        assert int(dataset.cardinality()) == expected and len(list(dataset.as_numpy_iterator())) == expected, kw
    assert int(wds_tf.TFSource(make(spec).with_length(48, silent=True), batch_size=8, num_workers=2).dataset()
               .cardinality()) == tf.data.UNKNOWN_CARDINALITY  # fmt: skip


@pytest.mark.slow
def test_workers_stay_from_one_epoch_to_the_next_and_an_epoch_is_the_dataset_once(spec):
    pipeline = wds_tf.WebDataset.resampled(spec, seed=1).decode().to_tuple("npy", "cls").with_epoch(7)
    source = wds_tf.TFSource(pipeline, num_workers=2)
    dataset = source.dataset()
    first = list(dataset.as_numpy_iterator())
    workers = [process.pid for process in source.loader._workers.procs]
    second = list(dataset.as_numpy_iterator())
    assert len(first) == len(second) == 7  # 4 + 3, not 7 from each worker
    assert [process.pid for process in source.loader._workers.procs] == workers  # the same processes
    source.loader.close()


def test_a_resumed_first_pass_is_the_rest_of_the_epoch(spec):
    source = wds_tf.TFSource(make(spec).with_length(48, silent=True), batch_size=8)
    stream = source.dataset().as_numpy_iterator()
    next(stream), next(stream)
    state = source.state_dict()
    resumed = wds_tf.TFSource(make(spec).with_length(48, silent=True), batch_size=8)
    resumed.load_state_dict(state)
    dataset = resumed.dataset()
    assert int(dataset.cardinality()) == tf.data.UNKNOWN_CARDINALITY
    assert len(list(dataset.as_numpy_iterator())) == 4 and len(list(dataset.as_numpy_iterator())) == 6
