"""A tiny JAX training loop on the demo dataset: ``python examples/train_jax.py``."""

import jax
import jax.numpy as jnp
import numpy as np
from common import CLASSES, arguments, demo_spec, mean_colour

import wds_jax


def loss_fn(params, features, labels):
    hidden = jax.nn.relu(features @ params["w1"] + params["b1"])
    logits = hidden @ params["w2"] + params["b2"]
    one_hot = jax.nn.one_hot(labels, CLASSES)
    return -jnp.mean(jnp.sum(one_hot * jax.nn.log_softmax(logits), axis=1)), logits


@jax.jit
def train_step(params, features, labels):
    (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, features, labels)
    params = jax.tree_util.tree_map(lambda p, g: p - 0.5 * g, params, grads)
    return params, loss, jnp.sum(jnp.argmax(logits, 1) == labels)


def float_features(image):
    return mean_colour(image).astype(np.float32)


def main() -> None:
    args = arguments(__doc__)
    dataset = (
        wds_jax.WebDataset(demo_spec(args), seed=0, shuffle=True)
        .shuffle(500)
        .decode("rgb8")
        .to_tuple("jpg", "cls")
        .map_tuple(float_features, int)  # module-level functions: the workers get the pipeline pickled
    )
    batches = wds_jax.BatchIterator(dataset, args.batch_size, num_workers=args.workers)
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    params = {
        "w1": jax.random.normal(keys[0], (3, 32)) * 0.5,
        "b1": jnp.zeros(32),
        "w2": jax.random.normal(keys[1], (32, CLASSES)) * 0.5,
        "b2": jnp.zeros(CLASSES),
    }
    for epoch in range(args.epochs):
        correct = total = 0
        for features, labels in batches:
            params, loss, hits = train_step(params, features, labels)
            correct += int(hits)
            total += len(labels)
        print(f"epoch {epoch}: {total} samples, loss {float(loss):.3f}, accuracy {correct / total:.2f}")
        state = batches.get_state()  # JSON: save it with the model (e.g. with Orbax) to resume mid-epoch
    assert state["format"] == "wds-jax-1"


if __name__ == "__main__":
    main()
