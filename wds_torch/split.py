"""How much of each batch the workers cut on the host, beside the device: ``to_device(split=...)``.

``crop_images(224, device="cuda")`` leaves every image to the device; with a share (``split=0.4`` there, or on
:func:`~wds_torch.device.to_device`) the workers cut that share of each batch on the host as the CPU path does
(the same box and flip: :class:`~wds_core.stages.devicecrop.HostShare` picks the images by shard and key), and the
device decodes and cuts the rest and finishes them all together.  ``split="auto"`` lets :class:`SplitTuner` set
the share from the rate at which the training loop takes batches: it moves the share a step, waits for the batches
made at the new share to arrive, and keeps going while the rate rises, turning back when it falls.  A fixed share
cuts the same images in the same place in every run; the tuner's choices depend on the machine.
"""

from __future__ import annotations

import time
from typing import Any

from wds_core.errors import SpecError
from wds_core.stages.devicecrop import HostShare

__all__ = ["SplitTuner"]


class SplitTuner:
    """``split="auto"``: the share of each batch cut on the host, climbed on the rate batches are taken at.

    Every ``window`` batches after a change (and ``settle`` batches made before it have gone by), the rate of the
    window is compared with the last: a rise keeps the direction, a fall turns it; the share moves by ``step``
    within ``[low, high]``.  ``report()`` says the share in force and the last choices."""

    def __init__(
        self,
        share: HostShare,
        *,
        window: int = 16,
        settle: int = 16,
        step: float = 0.05,
        low: float = 0.0,
        high: float = 0.95,
        clock: Any = time.perf_counter,
    ) -> None:
        if window < 1 or settle < 0 or not 0 < step <= 1 or not 0 <= low <= high <= 1:
            raise SpecError(f"bad split tuning: window={window}, settle={settle}, step={step}, [{low}, {high}]")
        self.share, self.window, self.settle, self.step, self.low, self.high = share, window, settle, step, low, high
        self.clock = clock
        self.direction = 1.0 if share.get() < high else -1.0
        self.last_rate: float | None = None
        self.skip = settle  # batches still to go by before the window starts
        self.started: float | None = None
        self.counted = 0
        self.choices: list[tuple[float, float]] = []  # (share, the rate measured at it), the last 32
        share.tuned_by = self  # the share's report is this one's while it turns it

    def given(self) -> None:
        """One batch handed to the training loop."""
        now = self.clock()
        if self.skip > 0:
            self.skip -= 1
            self.started = now if self.skip == 0 else None
            return
        if self.started is None:
            self.started = now
            return
        self.counted += 1
        if self.counted < self.window:
            return
        rate = self.counted / max(now - self.started, 1e-9)
        self.choices = [*self.choices[-31:], (self.share.get(), rate)]
        if self.last_rate is not None and rate < self.last_rate:
            self.direction = -self.direction
        self.last_rate = rate
        moved = min(self.high, max(self.low, self.share.get() + self.direction * self.step))
        if moved in (self.low, self.high) and moved == self.share.get():
            self.direction = -self.direction  # at a bound: the next move goes back
        self.share.set(moved)
        self.counted, self.started, self.skip = 0, None, self.settle

    def report(self) -> dict[str, Any]:
        return {"mode": "auto", "share": self.share.get(), "choices": list(self.choices)}
