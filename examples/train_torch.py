"""A tiny PyTorch training loop on the demo dataset: ``python examples/train_torch.py``."""

import torch
from common import CLASSES, arguments, demo_spec, mean_colour

import wds_torch as wds


def main() -> None:
    args = arguments(__doc__)
    dataset = (
        wds.WebDataset(demo_spec(args), seed=0, shuffle=True)
        .shuffle(500)
        .decode("rgb8")
        .to_tuple("jpg", "cls")
        .map_tuple(mean_colour, int)
        .batched(args.batch_size)  # batch in the workers, rebatch after the loader
    )
    loader = wds.WebLoader(dataset, num_workers=args.workers, batch_size=None).unbatched().shuffle(500)
    loader = loader.batched(args.batch_size)
    model = torch.nn.Sequential(torch.nn.Linear(3, 32), torch.nn.ReLU(), torch.nn.Linear(32, CLASSES))
    optimiser = torch.optim.Adam(model.parameters(), lr=0.02)
    for epoch in range(args.epochs):
        correct = total = 0
        for features, labels in loader:
            features, labels = torch.as_tensor(features, dtype=torch.float32), torch.as_tensor(labels)
            logits = model(features)
            loss = torch.nn.functional.cross_entropy(logits, labels)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            correct += int((logits.argmax(1) == labels).sum())
            total += len(labels)
        print(f"epoch {epoch}: {total} samples, loss {loss.item():.3f}, accuracy {correct / total:.2f}")


if __name__ == "__main__":
    main()
