"""Shards written to S3 in parts uploaded in parallel on the I/O pool, each part retried like a read.

:class:`S3Upload` is the :class:`~wds_core.io.shardsink.ShardSink` of an ``s3://``
destination whose options botocore's client honours
(:func:`~wds_core.io.backends.s3client.s3_object`): the bytes written are cut into
parts of ``part_bytes`` (8 MiB), and each full part is uploaded
(``UploadPart``) on :func:`~wds_core.io.remote.engine.io_pool` while the writer
goes on, at most ``in_flight`` (8) at once -- the writer waits for the oldest
beyond that, so an upload holds at most ``(in_flight + 1) x part_bytes``.
Every request (create, each part, complete) is retried after a transient
failure with the writer's :class:`~wds_core.io.remote.rangestream.RetryPolicy`, so one
dropped connection no longer loses a shard.  ``commit`` completes the upload
(a shard smaller than one part is one ``PutObject``); ``abort``, or any
failure, aborts it: no object appears unless it is whole.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future
from typing import Any

from ...errors import ShardOpenError
from ..remote.engine import ENGINE, io_pool
from ..remote.retries import DEFAULT_RETRY, RetryPolicy, cut_off, with_retries
from ..shardsink import ShardSink
from .s3client import s3_client, s3_object, status_error

__all__ = ["S3Upload", "s3_upload"]

PART_BYTES = 8 << 20  # S3 takes parts of 5 MiB and more (the last one excepted)
IN_FLIGHT = 8


def s3_upload(url: str, options: dict[str, Any], retry: RetryPolicy = DEFAULT_RETRY) -> S3Upload | None:
    """An :class:`S3Upload` to ``url``, or ``None`` when an option is one only s3fs knows (s3fs then writes)."""
    found = s3_object(url, options)
    if found is None:
        return None
    known, bucket, key = found
    return S3Upload(url, s3_client(known), bucket, key, retry, PART_BYTES, IN_FLIGHT)


class S3Upload(ShardSink):
    """One object written by a multipart upload with its parts in flight on the I/O pool (see the module doc)."""

    def __init__(
        self,
        url: str,
        client: Any,
        bucket: str,
        key: str,
        retry: RetryPolicy = DEFAULT_RETRY,
        part_bytes: int = PART_BYTES,
        in_flight: int = IN_FLIGHT,
    ) -> None:
        if part_bytes < 5 << 20:
            raise ValueError(f"part_bytes must be at least 5 MiB (S3's smallest part), got {part_bytes}")
        self.url, self.client, self.bucket, self.key, self.retry = url, client, bucket, key, retry
        self.part_bytes, self.in_flight = part_bytes, in_flight
        self.buffer = bytearray()
        self.upload_id: str | None = None
        self.parts: deque[tuple[int, Future, int]] = deque()  # (part number, its upload, bytes) not known done
        self.done: list[dict[str, Any]] = []  # {"PartNumber", "ETag"} of the uploaded parts
        self.sent = 0  # bytes handed to part uploads
        self.finished = False

    def _call(self, what: str, method: str, offset: int | None = None, **arguments: Any) -> Any:
        """``client.method(**arguments)`` with the retry policy; botocore's errors read as wds reads them.  Each
        attempt is given up after the time left of the budget, or the time its bytes take at the policy's least
        rate (:meth:`RetryPolicy.attempt_time`): a store that takes a part a byte at a time does not hold the
        writer for ever."""
        send, nbytes = getattr(self.client, method), len(arguments.get("Body") or b"")

        def attempt(left: float | None) -> Any:
            try:
                call = lambda: send(Bucket=self.bucket, Key=self.key, **arguments)  # noqa: E731
                return cut_off(call, self.retry.attempt_time(nbytes, left), what)
            except Exception as exn:
                raise status_error(exn, self.bucket, self.key) from None

        return with_retries(what, attempt, self.url, offset, self.retry)

    def write(self, data: Any) -> None:
        if self.finished:
            raise ValueError(f"the upload of {self.url} is finished")
        self.buffer += data
        while len(self.buffer) >= self.part_bytes:
            part = bytes(self.buffer[: self.part_bytes])
            del self.buffer[: self.part_bytes]
            self._send(part)

    def _send(self, part: bytes) -> None:
        try:
            if self.upload_id is None:
                self.upload_id = self._call("start the upload", "create_multipart_upload")["UploadId"]
            # the oldest first (parts finish in about the order sent), also while the engine's budget is spent
            while len(self.parts) >= self.in_flight or self.parts and ENGINE.held + len(part) > ENGINE.budget:
                self._settle(self.parts.popleft())
            number, offset = len(self.done) + len(self.parts) + 1, self.sent
            upload = io_pool().submit(
                self._call, f"upload part {number} (bytes {offset}-{offset + len(part)})", "upload_part", offset,
                UploadId=self.upload_id, PartNumber=number, Body=part,
            )  # fmt: skip
            ENGINE.hold(len(part))
            self.parts.append((number, upload, len(part)))
            self.sent += len(part)
        except BaseException:
            self.abort()
            raise

    def _settle(self, sent: tuple[int, Future, int]) -> None:
        number, upload, nbytes = sent
        try:
            answer = upload.result()
        finally:
            ENGINE.release(nbytes)
        self.done.append({"PartNumber": number, "ETag": answer["ETag"]})

    def commit(self) -> None:
        if self.finished:
            return
        try:
            if self.upload_id is None:  # smaller than a part: one request
                self._call("upload the shard", "put_object", 0, Body=bytes(self.buffer))
            else:
                if self.buffer or not self.done and not self.parts:
                    self._send(bytes(self.buffer))
                    self.buffer.clear()
                while self.parts:
                    self._settle(self.parts.popleft())
                parts = sorted(self.done, key=lambda part: part["PartNumber"])
                self._call(
                    "finish the upload", "complete_multipart_upload", UploadId=self.upload_id,
                    MultipartUpload={"Parts": parts},
                )  # fmt: skip
        except BaseException as exn:
            self.abort()
            if isinstance(exn, ShardOpenError):
                raise
            raise ShardOpenError(f"cannot finish shard: {type(exn).__name__}: {exn}", url=self.url) from None
        self.finished = True
        self.buffer = bytearray()

    def abort(self) -> None:
        """Cancel the upload: parts not started are dropped, the multipart upload is aborted (best effort)."""
        if self.finished:
            return
        self.finished = True
        self.buffer = bytearray()
        while self.parts:
            _, upload, nbytes = self.parts.popleft()
            upload.cancel()  # one already running ends on its own: its bytes are let go now all the same
            ENGINE.release(nbytes)
        if self.upload_id is not None:
            try:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=self.key, UploadId=self.upload_id)
            except Exception:  # noqa: BLE001 - the store drops abandoned uploads by its lifecycle rules
                pass
