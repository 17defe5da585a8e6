"""Module-level functions for the scale-out tests (worker processes import them by name)."""

import os


def shout(sample):
    sample["txt"] = sample["txt"].upper()
    return sample


def split_in_two(sample):
    """One sample in, two out; samples whose key ends in 4 are dropped."""
    if sample["__key__"].endswith("4"):
        return None
    first = {"__key__": sample["__key__"] + "-a", "txt": sample["txt"]}
    second = {"__key__": sample["__key__"] + "-b", "txt": sample["txt"][::-1]}
    return [first, second]


def every_other(samples):
    for i, sample in enumerate(samples):
        if i % 2 == 0:
            yield shout(sample)


def dies_once(sample):
    """Kills its worker process the first time it sees sample 3 of shard 1 (a marker file remembers)."""
    marker = os.environ["WDS_TEST_MARKER"]
    if sample["__key__"] == "s1-00003" and not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(7)
    return shout(sample)


def fails_on_shard_2(sample):
    if sample["__key__"].startswith("s2-") and not os.path.exists(os.environ["WDS_TEST_MARKER"]):
        raise ValueError("shard 2 is not ready")
    return shout(sample)


def hungry_on_shard_1(sample):
    """Asks for 2 GB on shard 1 (a memory limit turns it into that shard's failure)."""
    if sample["__key__"].startswith("s1-"):
        sample["blob"] = bytearray(2_000_000_000)
    return shout(sample)


def row_to_sample(number):
    """make_shards: one input, one sample (some bytes, a class); multiples of 10 give two, multiples of 7 none."""
    if number % 7 == 3:
        return None
    sample = {"txt": f"row {number}", "cls": number % 5, "bin": bytes(200)}
    return [sample, {**sample, "txt": f"row {number} again"}] if number % 10 == 0 else sample


def row_not_ready(number):
    """make_shards: fails on input 57 until the marker file exists."""
    if number == 57 and not os.path.exists(os.environ["WDS_TEST_MARKER"]):
        raise ValueError("row 57 is not ready")
    return row_to_sample(number)


def row_as_text(number):
    return f"row {number}"  # not a sample
