"""A store's rate limit slows the process's requests down together; it never fails them.

Object stores answer ``503 SlowDown`` past a few thousand requests a second per prefix, the Hugging Face Hub and GCS
answer ``429`` past their rates; either may say ``Retry-After`` (seconds or an HTTP date).  Such an answer is not a
broken connection: :func:`~.retries.with_retries` repeats the same request after the wait without spending one of
its attempts or its time budget, and every request of the process waits with it, through the process's
:data:`THROTTLE`:

* until the time the store named (``Retry-After``), else a backoff that grows half again while answers stay
  throttled (from 0.05 s, at most 10 s, with jitter so that the readers of many processes do not come back in
  step);
* with fewer requests at once: each throttled answer halves how many the process may have under way (at most once
  per backoff), and each admitted one adds ``1/limit`` back, so the count climbs again as answers return
  (additive increase, multiplicative decrease: what TCP does for the same problem).

A request that stays throttled for ``RetryPolicy.throttle_patience`` seconds (default one hour) in a row is given up
with an error that says so; an answer admitted anywhere in the process starts the count again.  The time spent
waiting is counted (``retry_stats()["throttled_s"]``, the answers as ``throttled``) and shown by ``wds profile``.
A plain ``503`` without ``Retry-After`` or a ``SlowDown`` code is an outage, retried as before within the attempts.
"""

from __future__ import annotations

import email.utils
import os
import random
import time
from typing import Any

from ..forklocks import ForkSafeLock, fork_safe_event

__all__ = ["THROTTLE", "Throttle", "retry_after", "throttled"]

_MOST = 64  # requests at once when nothing is throttled: the I/O pool's threads (engine.POOL_WORKERS)
_SLOW_CODES = ("slowdown", "slow down", "toomanyrequests", "throttl", "ratelimit", "rate limit", "requestlimitexceeded")


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait that a ``Retry-After`` header says (a number of seconds or an HTTP date); ``None`` when it
    says nothing usable.  At most an hour: a store does not ask for more, and a wrong clock must not stop a job."""
    if not value:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), 3600.0)


def throttled(exn: BaseException) -> tuple[bool, float | None]:
    """Whether ``exn`` is a store's rate limit (429; 503 with ``Retry-After`` or a slow-down code; botocore's
    ``SlowDown``, ``Throttling``...), and the wait it asked for."""
    status = getattr(exn, "status", None) or getattr(exn, "code", None)
    wait = getattr(exn, "retry_after", None)
    said = str(getattr(exn, "store_code", "") or "").lower()
    response = getattr(exn, "response", None)  # botocore's ClientError
    if isinstance(response, dict):
        error = response.get("Error") or {}
        said = said or str(error.get("Code", "")).lower()
        meta = response.get("ResponseMetadata") or {}
        status = status if isinstance(status, int) else meta.get("HTTPStatusCode")
        wait = wait if wait is not None else retry_after((meta.get("HTTPHeaders") or {}).get("retry-after"))
    elif response is not None and isinstance(getattr(response, "status_code", None), int):  # httpx, requests
        status = response.status_code
        headers = getattr(response, "headers", None) or {}
        wait = wait if wait is not None else retry_after(headers.get("Retry-After"))
    if status == 429:
        return True, wait
    slow = any(code in said for code in _SLOW_CODES)
    if status == 503 and (wait is not None or slow):
        return True, wait
    return slow and not isinstance(status, int), wait


class Throttle:
    """How many requests the process may have under way, and until when none may start (see the module doc)."""

    def __init__(self, most: int = _MOST) -> None:
        self.most = most
        self.limit = float(most)
        self.active = 0
        self.not_before = 0.0  # monotonic time before which no request starts
        self.backoff = 0.0  # the wait after a throttled answer that named none; doubles while answers stay throttled
        self.last_cut = -1e9  # when the limit was last halved
        self.last_ok = time.monotonic()  # when an answer was last admitted
        self.answers = 0  # throttled answers
        self.waited = 0.0  # seconds requests spent waiting for the throttle (summed over requests)
        self.lock = ForkSafeLock()
        self.changed = fork_safe_event()  # set when a request leaves: the waiting ones look again

    def calm(self) -> bool:
        """Whether nothing is throttled (no wait ahead, the full count allowed): hedging is then allowed."""
        return self.limit >= self.most and time.monotonic() >= self.not_before

    def enter(self, stopped: Any = None) -> float:
        """Wait for room to start a request; the seconds waited (``stopped()`` ends a wait: the reader left)."""
        with self.lock:
            if self.active < self.limit and time.monotonic() >= self.not_before:
                self.active += 1
                return 0.0
        began = time.monotonic()
        while True:
            with self.lock:
                now = time.monotonic()
                if now >= self.not_before and self.active < max(1.0, self.limit):
                    self.active += 1
                    waited = now - began
                    self.waited += waited
                    return waited
                pause = self.not_before - now
                self.changed.clear()
            if stopped is not None and stopped():
                raise ConnectionAbortedError("the reader closed the shard")
            if pause > 0:  # the store named a time: nothing starts before it
                time.sleep(min(pause, 0.25))
            else:  # room comes when a request leaves (and the wait is short in any case)
                self.changed.wait(0.02)

    def leave(self, outcome: str, wait: float | None = None) -> None:
        """A request ended: ``"ok"`` (admitted), ``"throttled"`` (with the ``wait`` the store asked for), or
        ``"failed"`` (anything else: the limit is left alone)."""
        with self.lock:
            self.active -= 1
            now = time.monotonic()
            if outcome == "ok":
                self.last_ok = now
                self.backoff = 0.0
                if self.limit < self.most:
                    self.limit = min(float(self.most), self.limit + 1.0 / self.limit)
            elif outcome == "throttled":
                self.answers += 1
                if now - self.last_cut >= max(self.backoff, 0.05):
                    self.limit = max(1.0, min(self.limit, self.active + 1) / 2)
                    self.last_cut = now
                    self.backoff = min(10.0, max(0.05, 1.5 * self.backoff))
                pause = wait if wait is not None else self.backoff * (0.5 + random.random())
                self.not_before = max(self.not_before, now + pause)
        self.changed.set()

    def stats(self) -> dict[str, float]:
        return {"throttled": self.answers, "throttled_s": round(self.waited, 3), "limit": self.limit}


THROTTLE = Throttle()


def _forked() -> None:  # a child starts with the parent's limits forgotten (its own requests will teach it)
    THROTTLE.__init__(THROTTLE.most)  # type: ignore[misc]


os.register_at_fork(after_in_child=_forked)
