"""A tiny TensorFlow/Keras training loop on the demo dataset: ``python examples/train_tf.py``."""

import numpy as np
from common import CLASSES, arguments, demo_spec, mean_colour

import wds_tf


def float_features(image):
    return mean_colour(image).astype(np.float32)


def main() -> None:
    import keras

    args = arguments(__doc__)
    pipeline = (
        wds_tf.WebDataset(demo_spec(args), seed=0, shuffle=True)
        .shuffle(500)
        .decode("rgb8")
        .to_tuple("jpg", "cls")
        .map_tuple(float_features, int)  # module-level functions: the workers get the pipeline pickled
        .with_epoch(args.shards * args.samples_per_shard)  # an epoch's length, which Keras wants (n in all)
    )
    source = wds_tf.TFSource(pipeline, batch_size=args.batch_size, num_workers=args.workers)
    dataset = source.dataset()  # batches, made in the workers
    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(CLASSES)]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(0.02),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    history = model.fit(dataset, epochs=args.epochs, verbose=0, shuffle=False)  # wds shuffles (Keras cannot, here)
    for epoch, (loss, accuracy) in enumerate(zip(history.history["loss"], history.history["accuracy"])):
        print(f"epoch {epoch}: loss {loss:.3f}, accuracy {accuracy:.2f}")


if __name__ == "__main__":
    main()
