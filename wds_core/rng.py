"""A small deterministic random number generator whose whole state is one integer.

Shuffles must be a pure function of (seed, epoch, rank, worker), independent of
hash randomisation and of the process start method, and their state must fit in
a JSON checkpoint.  SplitMix64 gives both: the state is a single 64-bit counter.
"""

from __future__ import annotations

import hashlib
import os

__all__ = ["Rng", "derive_seed", "fresh_seed"]

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def derive_seed(*parts: object) -> int:
    """Mix any number of labels (seed, epoch, names, ...) into a 64-bit seed."""
    text = "\x1f".join(repr(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")


def fresh_seed() -> int:
    """A seed from the operating system, for runs that were not given one."""
    return int.from_bytes(os.urandom(8), "little")


class Rng:
    """SplitMix64.  ``state`` is a plain int that can be saved and set back."""

    __slots__ = ("state",)

    def __init__(self, seed: int) -> None:
        self.state = seed & _MASK

    def next64(self) -> int:
        self.state = z = (self.state + _GOLDEN) & _MASK
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)

    def below(self, n: int) -> int:
        """A uniform integer in ``[0, n)`` (bias below 2**-40 for any realistic n)."""
        return self.next64() % n

    def permutation(self, n: int) -> list[int]:
        """A uniform random permutation of ``range(n)`` (Fisher-Yates)."""
        order = list(range(n))
        for i in range(n - 1, 0, -1):
            j = self.below(i + 1)
            order[i], order[j] = order[j], order[i]
        return order
