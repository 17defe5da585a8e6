"""How a failing remote request is repeated: the policy, what counts as transient, the counts and the messages.

:func:`with_retries` runs one request (a range, a size, a connection, an
upload part) under a :class:`RetryPolicy`: a transient failure (connection
reset or cut, timeout, HTTP 408/429/5xx, a short response) is repeated after
a backoff, within the policy's attempts and time budget; the last failure is
a :class:`~wds_core.errors.ShardOpenError` naming the URL and offset, never a
credential.  Retries are counted per process (:func:`retry_stats`) and per
reading stage, and logged at most every few seconds.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ...errors import ShardChangedError, ShardNotFoundError, ShardOpenError, WdsError, redact, redact_url
from ..forklocks import ForkSafeLock
from .throttle import THROTTLE, throttled

__all__ = ["DEFAULT_RETRY", "IDLE_TIMEOUT", "Attempts", "Pace", "RetryPolicy", "ShortRead", "count", "cut_off",
           "describe_error", "is_transient", "retry_stats", "with_retries"]  # fmt: skip

_TRANSIENT_STATUS = {408, 425, 429, 500, 502, 503, 504}
_BOTOCORE_TRANSIENT = {
    "ConnectionError",
    "HTTPClientError",
    "ReadTimeoutError",
    "ConnectTimeoutError",
    "ResponseStreamingError",
    "IncompleteReadError",
}


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a failing request is repeated.

    ``attempts`` counts every try of one request (the first included); the
    delay before retry ``n`` is ``initial_delay * 2**n``, at most ``max_delay``.
    These are the only retries: the S3 backend's own (botocore's and s3fs')
    are turned off for the shards wds reads, unless the storage options set
    ``config_kwargs={"retries": ...}`` themselves.

    ``budget`` (seconds, optional) bounds a request end to end: each attempt is
    given the time left (it is cut off when that runs out, whatever the backend
    does inside it: gcsfs retries within an attempt and cannot be told not to;
    a server that sends one byte at a time: the whole response, headers and
    body, must be in by then), and no retry starts once the budget would be
    passed.

    ``min_rate`` (bytes a second) is the least a response must keep up over
    ``rate_window`` seconds once its first bytes are in: a server trickling
    its answer (a byte every fraction of a second keeps every socket read
    within its timeout) is cut off there, and the request retried like a
    timeout.  Requests whose reads wds cannot watch (fsspec's, botocore's
    uploads) are given a minute for the answer to start plus the time their
    bytes take at ``min_rate``.
    The default, 1 KiB/s over 30 s, is far below any working link (64
    connections over a 1 Mbit/s line get 2 KiB/s each); ``min_rate=0`` turns it
    off.

    A rate limit (429, 503 with ``Retry-After`` or ``SlowDown``) spends no
    attempt and no budget: ``throttle_patience`` bounds it (:mod:`.throttle`).
    """

    attempts: int = 6
    initial_delay: float = 0.2
    max_delay: float = 10.0
    budget: float | None = None
    min_rate: float = 1024.0
    rate_window: float = 30.0
    throttle_patience: float = 3600.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {self.attempts}")
        if self.initial_delay < 0 or self.max_delay < 0:
            raise ValueError("retry delays must be >= 0")
        if self.budget is not None and self.budget < 0:
            raise ValueError("the retry budget must be >= 0 seconds")
        if not self.throttle_patience > 0:
            raise ValueError(f"throttle_patience must be > 0 seconds, got {self.throttle_patience}")
        if self.min_rate < 0 or self.rate_window <= 0:
            raise ValueError(f"min_rate must be >= 0 and rate_window > 0, got {self.min_rate} and {self.rate_window}")

    def delay(self, retry: int) -> float:
        return min(self.max_delay, self.initial_delay * (2**retry))

    def attempt_time(self, nbytes: int, left: float | None) -> float | None:
        """The most one attempt moving ``nbytes`` may take where its reads cannot be watched: a wait as long as a
        socket's (:data:`IDLE_TIMEOUT`) plus those bytes at ``min_rate``, within ``left`` (the time left of the
        budget)."""
        if not self.min_rate:
            return left
        paced = IDLE_TIMEOUT + nbytes / self.min_rate
        return paced if left is None else min(left, paced)

    def pace(self, left: float | None) -> Pace:
        """The clock of one attempt given ``left`` seconds (``None``: no budget)."""
        return Pace(left, self.min_rate, self.rate_window)


IDLE_TIMEOUT = 60.0  # seconds a socket may wait for its next bytes when no budget says less


class Pace:
    """One attempt's clock, for the backends that read the response themselves: how long the next wait for bytes
    may take (the time left of the budget, at most :data:`IDLE_TIMEOUT`), and whether the bytes that arrive keep
    up the least rate over each window (see :class:`RetryPolicy`).  Both raise ``TimeoutError``, which is retried."""

    __slots__ = ("deadline", "min_rate", "window", "mark", "since", "sockets", "stopped")

    def __init__(self, left: float | None, min_rate: float, window: float) -> None:
        self.deadline = None if left is None else time.monotonic() + left
        self.min_rate, self.window = min_rate, window
        self.mark = -1.0  # when the current window started (at the first bytes)
        self.since = 0  # bytes arrived in the current window
        self.sockets: list[Any] = []  # what the attempt reads from, shut down by stop()
        self.stopped = False

    def watch(self, sock: Any) -> None:
        """``sock`` is what the attempt reads from: :meth:`stop` ends a read waiting on it."""
        self.sockets.append(sock)
        if self.stopped:
            self.stop()

    def stop(self) -> None:
        """Nobody waits for the answer any more (its reader closed the shard): the attempt's sockets are shut down,
        so that a read waiting on one ends now instead of taking the rest of the response (and its connection's
        time, and its bytes' memory) for nothing; any later wait raises."""
        self.stopped = True
        for sock in self.sockets:
            try:
                socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the plain socket's (an SSL one's drops its state)
            except (OSError, TypeError):
                pass

    def wait(self) -> float:
        """Seconds the next wait for bytes may take."""
        if self.stopped:
            raise ConnectionAbortedError("the reader closed the shard")
        if self.deadline is None:
            return IDLE_TIMEOUT
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request took the time left of the retry budget")
        return min(left, IDLE_TIMEOUT)

    def arrived(self, count: int) -> None:
        """``count`` more bytes are in: an error when the window that ends now had fewer than ``min_rate`` a second."""
        now = time.monotonic()
        if self.mark < 0:
            self.mark = now
            return
        self.since += count
        spent = now - self.mark
        if spent >= self.window:
            if self.since < self.min_rate * spent:
                raise TimeoutError(
                    f"the server sent {self.since} bytes in {spent:.0f} s, slower than the {self.min_rate:g} "
                    "bytes/s a response must keep up (RetryPolicy.min_rate)"
                )
            self.mark, self.since = now, 0


class Attempts:
    """The attempts of one source's requests under way: :meth:`stop` (its reader closed the shard) stops them all,
    and any begun after it (see :meth:`Pace.stop`)."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.running: set[Pace] = set()
        self.stopped = False
        self.lock = ForkSafeLock()

    def begin(self, left: float | None) -> Pace:
        """The clock of a new attempt given ``left`` seconds; :meth:`end` it."""
        pace = self.policy.pace(left)
        with self.lock:
            if self.stopped:
                raise ConnectionAbortedError("the reader closed the shard")
            self.running.add(pace)
        return pace

    def end(self, pace: Pace) -> None:
        with self.lock:
            self.running.discard(pace)

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            running = list(self.running)
        for pace in running:
            pace.stop()


def cut_off(call: Any, left: float | None, what: str) -> Any:
    """``call()``, given up after ``left`` seconds (``None``: waited for): for a backend that cannot be told a
    deadline, it runs in a thread of its own, which is left to the backend's own timeouts when it is given up
    (a ``TimeoutError``, retried)."""
    if left is None:
        return call()
    done: dict[str, Any] = {}

    def run() -> None:
        try:
            done["result"] = call()
        except BaseException as exn:  # noqa: BLE001 - handed to the caller's thread
            done["error"] = exn

    worker = threading.Thread(target=run, daemon=True, name="wds-cut-off")
    worker.start()
    worker.join(left)
    if worker.is_alive():
        raise TimeoutError(f"{what} took more than the {left:.1f} s it was given")
    if "error" in done:
        raise done["error"]
    return done["result"]


DEFAULT_RETRY = RetryPolicy()


def is_transient(exn: BaseException) -> bool:
    """Whether repeating the request that raised ``exn`` may succeed."""
    if isinstance(exn, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, WdsError)):
        return False
    status = getattr(exn, "status", None) or getattr(exn, "code", None)
    if isinstance(status, int) and 100 <= status < 600:
        return status in _TRANSIENT_STATUS
    if isinstance(exn, (OSError, TimeoutError, ShortRead)):
        return True
    names = {cls.__name__ for cls in type(exn).__mro__}
    package = type(exn).__module__.split(".")[0]
    if package == "botocore":  # connection trouble is transient; missing credentials or bad parameters are not
        return bool(names & _BOTOCORE_TRANSIENT)
    if package in ("aiohttp", "urllib3", "requests"):
        return not names & {"InvalidURL", "InvalidUrlClientError", "LocationParseError", "MissingSchema"}
    return False


class ShortRead(Exception):
    """A response with fewer bytes than it should have had (retried)."""


_DENIED = re.compile(
    r"credential|accessdenied|access denied|invalidaccesskeyid|signaturedoesnotmatch|expiredtoken|"
    r"forbidden|unauthori[sz]ed",
    re.IGNORECASE,
)
CREDENTIALS_HINT = (
    "to give credentials or an endpoint: storage={'s3://bucket/': {'key': ..., 'secret': ..., "
    "'endpoint_url': ...}} by URL prefix (webdataset's storage_options=), a WDS_CONFIG file, or AWS_ACCESS_KEY_ID, "
    "AWS_SECRET_ACCESS_KEY, "
    "AWS_PROFILE and AWS_ENDPOINT_URL (GCS: GOOGLE_APPLICATION_CREDENTIALS); wds commands take --storage-options "
    "JSON and --endpoint-url"
)


def describe_error(exn: BaseException) -> str:
    """``exn``'s type and message, with credentials hidden; a refused or missing credential says how to give one."""
    text = redact(f"{type(exn).__name__}: {exn}")
    return f"{text} ({CREDENTIALS_HINT})" if _DENIED.search(text) else text


class NotInStore(FileNotFoundError):
    """What an object store says is missing (a bucket, a key), in its words."""


RETRIES: Counter[str] = Counter()  # in this process: "retries" made, requests "recovered", "gave_up"
_log = logging.getLogger("wds_core.io")
_LOG_EVERY = 5.0  # seconds between retry messages; the ones in between are counted in the next
_said = {"at": -_LOG_EVERY, "quiet": 0}
_said_lock = ForkSafeLock()


_count_lock = ForkSafeLock()


def retry_stats() -> dict[str, float]:
    """Retries made in this process, requests that succeeded after retrying, requests given up, ranges asked
    for twice because the first request straggled (``hedged``), answers that said the store's rate limit was
    passed (``throttled``) and the seconds requests waited for it (``throttled_s``, summed over requests)."""
    counts: dict[str, float] = {key: RETRIES[key] for key in ("retries", "recovered", "gave_up", "hedged")}
    counts["throttled"] = RETRIES["throttled"]
    counts["throttled_s"] = round(THROTTLE.waited, 3)
    return counts


def count(key: str, stats: Counter[str] | None) -> None:
    """One more ``key`` in this process's counts and in ``stats`` (a reading stage's), from any thread."""
    with _count_lock:
        RETRIES[key] += 1
        if stats is not None:
            stats[key] += 1


def _say_retry(what: str, url: str, attempt: int, policy: RetryPolicy, exn: BaseException, delay: float) -> None:
    with _said_lock:
        now = time.monotonic()
        if now - _said["at"] < _LOG_EVERY:
            _said["quiet"] += 1
            return
        quiet, _said["quiet"], _said["at"] = _said["quiet"], 0, now
    more = f" ({quiet} more retries since the last message)" if quiet else ""
    _log.warning(
        "retrying %s of %s in %.1f s (attempt %d of %d): %s%s",
        what, redact_url(url), delay, attempt + 2, policy.attempts, describe_error(exn), more,
    )  # fmt: skip


def with_retries(
    what: str,
    call: Any,
    url: str,
    offset: int | None,
    policy: RetryPolicy,
    stats: Counter[str] | None = None,
    stopped: Any = None,
) -> Any:
    """``call(timeout)``, repeated after transient failures; the last failure becomes a ShardOpenError.

    ``timeout`` is the time left of ``policy.budget`` (``None`` without one): the attempt must end by then.
    Each retry is counted (:func:`retry_stats` and ``stats``) and logged (``wds_core.io``, at most one
    message every few seconds).  Once ``stopped()`` (its reader closed the stream: nobody waits for the
    answer), a failure ends the request without a retry, a count or a message.
    """
    started = time.monotonic()
    attempt = 0  # attempts spent: a throttled answer spends none
    paused = 0.0  # seconds waited for the store's rate limit: no part of the budget
    calm_since = started  # when this request was last answered by anything but a rate limit
    while True:
        paused += THROTTLE.enter(stopped)
        tried = time.monotonic()
        left = None if policy.budget is None else max(policy.budget - (tried - started - paused), 0.001)
        try:
            result = call(left)
        except NotInStore as exn:  # the store said what is missing: the bucket, the key
            THROTTLE.leave("failed")
            raise ShardNotFoundError(f"cannot {what}: {redact(str(exn))}", url=url) from None
        except FileNotFoundError:
            THROTTLE.leave("failed")
            raise ShardNotFoundError("shard not found", url=url) from None
        except Exception as exn:
            limited, wait = throttled(exn)
            THROTTLE.leave("throttled" if limited else "failed", wait)
            if limited and not (stopped is not None and stopped()):
                count("throttled", stats)
                since = max(calm_since, THROTTLE.last_ok)
                if time.monotonic() - since < policy.throttle_patience:
                    continue  # the throttle holds the next try back: no attempt spent, no budget
                raise ShardOpenError(
                    f"cannot {what}: the store kept answering that its rate limit was passed for "
                    f"{time.monotonic() - since:.0f} s (RetryPolicy.throttle_patience); last answer "
                    f"{describe_error(exn)}",
                    url=url, offset=offset,
                ) from None  # fmt: skip
            calm_since = time.monotonic()
            if not is_transient(exn) or (stopped is not None and stopped()):
                kind = ShardChangedError if isinstance(exn, ShardChangedError) else ShardOpenError
                raise kind(f"cannot {what}: {describe_error(exn)}", url=url, offset=offset) from None
            delay = policy.delay(attempt)
            spent = time.monotonic() - started - paused
            over = policy.budget is not None and spent + delay > policy.budget
            if attempt + 1 == policy.attempts or over:
                count("gave_up", stats)
                tries = f"{attempt + 1} attempt{'s' if attempt else ''} in {spent:.1f} s" + (
                    f" (the retry budget is {policy.budget:g} s)" if over else ""
                )
                last = describe_error(exn)
                if left is not None and isinstance(exn, TimeoutError) and time.monotonic() - tried >= left:
                    last = f"the attempt was cut off after the {left:.1f} s left of the budget ({type(exn).__name__})"
                message = f"cannot {what} after {tries}; last error {last}"
                raise ShardOpenError(message, url=url, offset=offset) from None
            count("retries", stats)
            _say_retry(what, url, attempt, policy, exn, delay)
            time.sleep(delay)
            attempt += 1
        else:
            THROTTLE.leave("ok")
            if attempt:
                count("recovered", stats)
            return result
