import json

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import wds_tf  # noqa: E402
from tests.conftest import array_shards  # noqa: E402
from wds_core.errors import SampleError  # noqa: E402


@pytest.fixture
def spec(tmp_path):
    return array_shards(tmp_path, "t", 4, 12, (3,), classes=2)


def make(spec):
    return wds_tf.WebDataset(spec, shardshuffle=True, seed=1).shuffle(5).decode().to_tuple("npy", "cls")


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
