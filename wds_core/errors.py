"""The exception hierarchy of wds.

Every error the library raises on purpose derives from :class:`WdsError`, and
also from the builtin a caller would naturally catch::

    WdsError
     ├── SpecError (ValueError)             a shard spec or argument that cannot work
     │    └── EmptyDatasetError             a spec or a whole epoch with nothing in it
     ├── ShardOpenError (OSError)           a shard that cannot be opened, read or written
     │    ├── ShardNotFoundError            ... because it does not exist (FileNotFoundError)
     │    ├── ShardChangedError             ... because it was replaced while it was read
     │    └── PipeError                     a ``pipe:`` command that failed
     ├── TarFormatError (ValueError,        bytes that are not a valid tar stream
     │    │   tarfile.ReadError)
     │    └── TruncatedShardError           the shard ends before it should
     ├── SampleError (ValueError)           members that do not form a valid sample
     │    ├── MissingFieldError (KeyError)  a field a stage needs is not in the sample
     │    ├── SampleShapeError (TypeError,  a sample of the wrong kind for the stage (a dict
     │    │   AssertionError)               where a tuple is needed...): a mistake in the
     │    │                                 pipeline, so it is raised whatever the handler
     │    └── FieldError                    one field of a sample (``key``, ``field``)
     │         ├── DecodingError            ... whose bytes cannot be decoded
     │         └── EncodingError            ... that cannot be encoded or written
     └── CheckpointError (ValueError)       a state that cannot be taken or restored
          └── NotElastic                    a pipeline whose delivered samples cannot be
                                            followed (why elastic resume is refused)

The second builtin of ``TarFormatError``, ``MissingFieldError`` and
``SampleShapeError`` is what webdataset raises in the same place, so that code
written against webdataset catches ours.

Errors about data carry ``url``, ``member`` and ``offset`` attributes (each may
be ``None``) and put them in the message.  Messages never contain credentials:
URLs are passed through :func:`redact_url` before they are shown.
"""

from __future__ import annotations

import re
import tarfile
from typing import Any, TypeVar

__all__ = [
    "install_hint",
    "CheckpointError",
    "DecodingError",
    "EmptyDatasetError",
    "EncodingError",
    "FieldError",
    "MissingFieldError",
    "NotElastic",
    "OverLimitError",
    "PipeError",
    "SampleError",
    "SampleShapeError",
    "ShardChangedError",
    "ShardNotFoundError",
    "ShardOpenError",
    "SpecError",
    "TarFormatError",
    "TruncatedShardError",
    "WdsError",
    "is_secret_name",
    "redact",
    "redact_url",
]

# The rule: a header, query or fragment parameter, option, environment variable or command flag whose name contains
# one of these words (any case, any separator) holds a secret, and its value is masked wherever text is shown.
SECRET_WORDS = ("key", "token", "secret", "sig", "auth", "password", "passwd", "credential", "session", "cookie",
                "bearer")  # fmt: skip
# Query parameters whose values grant access whatever their names say: CloudFront's Policy, an OAuth code.
SECRET_PARAMS = ("policy", "code")
_WORDS = "|".join(SECRET_WORDS)
_NAME = rf"[-\w.]*(?:{_WORDS})[-\w.]*"  # a name that says it holds a secret: api_key, X-Functions-Key, sig...
_EQUALS = r"(?:=|%3[dD])"
_BEFORE = r"(?:^|[?&;:#,/\s'\"(\[{]|%2[36]|%3[fF])"  # what a name follows: a URL's query or fragment, a space...
_PARAMETER = re.compile(rf"({_BEFORE}(?:{'|'.join(SECRET_PARAMS)}){_EQUALS})[^&#;\s'\"]*", re.I)
_ASSIGNED = re.compile(rf"({_BEFORE}{_NAME}{_EQUALS})[^&#;\s'\"]*", re.IGNORECASE)
# curl's user and password (-u alice:PASS, --user, --proxy-user, -U): the value is a secret when it has a colon
_USER_FLAG = re.compile(r"((?:^|\s)(?:-u|-U|--user|--proxy-user)(?:\s+|=)?['\"]?)[^\s'\":]*:[^\s'\"]*")
_USERINFO = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s'\"]*@")
_FLAG = re.compile(rf"((?:^|\s)--?{_NAME}\s+['\"]?)[^\s'\"]+", re.IGNORECASE)
# a header (X-Functions-Key: ...); a name that ends in Error, Exception or Warning is an exception's type before its
# message, not a header: "NoCredentialsError: Unable to locate credentials" keeps what it says
_HEADER = re.compile(rf"((?<![-\w.]){_NAME}(?<!error)(?<!exception)(?<!warning)\s*:\s*)[^'\"\n]+", re.IGNORECASE)
# a quoted name in a mapping's repr or JSON ('secret': 'value', "api_key": "value")
_QUOTED = re.compile(rf"((['\"]){_NAME}\2\s*:\s*)(['\"])(?:(?!\3).)*\3", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    """Whether an option, parameter, header or variable called ``name`` holds a secret (its name contains ``key``,
    ``token``, ``secret``, ``sig``, ``auth``, ``password``, ``credential``, ``session``, ``cookie``...)."""
    lowered = name.lower()
    return any(word in lowered for word in SECRET_WORDS)


def redact(text: object) -> str:
    """``text`` fit for a message, a log line or a repr, by one rule: the value of every header, query or fragment
    parameter, option (a mapping's quoted key), ``NAME=value`` assignment and ``--flag value`` whose name contains
    ``key``, ``token``, ``secret``, ``sig``, ``auth``, ``password``/``passwd``, ``credential``, ``session``,
    ``cookie`` or ``bearer`` (any case, any separator: ``X-Functions-Key``, ``x-amz-server-side-encryption-customer-
    key``, ``access_token``), CloudFront's ``Policy`` and OAuth's ``code``, the user info of any URL, and curl's ``-u
    user:password``.  The one redaction of wds: URLs, ``pipe:`` commands, error texts (every :class:`WdsError`'s
    whole message) and log lines all go through it."""
    text = _USERINFO.sub(r"\1***@", str(text))
    text = _QUOTED.sub(r"\1\3***\3", text)
    text = _HEADER.sub(r"\1***", text)
    text = _FLAG.sub(r"\1***", text)
    text = _USER_FLAG.sub(r"\1***", text)
    text = _PARAMETER.sub(r"\1***", text)
    return _ASSIGNED.sub(r"\1***", text)


def redact_url(url: object) -> str:
    """Return ``url`` (or a ``pipe:`` command) as text fit for a message: :func:`redact`."""
    return redact(url)


class WdsError(Exception):
    """Base class of every error wds raises on purpose."""

    def __init__(
        self,
        message: str,
        *,
        url: object = None,
        member: str | None = None,
        offset: int | None = None,
    ) -> None:
        self.reason = redact(message)  # a message may quote a URL or a command of its own
        self.url = None if url is None else redact_url(url)
        self.member = member
        self.offset = offset
        super().__init__(self._compose())

    def __str__(self) -> str:  # not KeyError's quoted repr, for the subclasses that are KeyErrors too
        return self._compose()

    def _where(self) -> list[tuple[str, object]]:
        return [("shard", self.url), ("member", self.member), ("offset", self.offset)]

    def _compose(self) -> str:
        where = [
            f"{label} {value if label in ('shard', 'offset') else repr(value)}"
            for label, value in self._where()
            if value is not None
        ]
        if not where:
            return self.reason
        return f"{self.reason} ({', '.join(where)})"

    def __reduce__(self) -> tuple[Any, ...]:  # keep the attributes when sent between processes
        return (_rebuild, (type(self), self.reason, self.url, self.member, self.offset))


def _rebuild(cls: type[WdsError], reason: str, url: object, member: str | None, offset: int | None) -> WdsError:
    return cls(reason, url=url, member=member, offset=offset)


class SpecError(WdsError, ValueError):
    """A shard spec or an argument that cannot work."""


class EmptyDatasetError(SpecError):
    """A spec that expands to nothing, or an epoch that produced no sample."""


class ShardOpenError(WdsError, OSError):
    """A shard that cannot be opened, read or written (``errno`` is the system's when there is one)."""


class ShardNotFoundError(ShardOpenError, FileNotFoundError):
    """A shard that does not exist."""


class ShardChangedError(ShardOpenError):
    """A remote shard replaced while it was read (its ETag, Last-Modified or size changed): its bytes would mix two
    objects.  Not retried: read the shard again from its start."""


class PipeError(ShardOpenError):
    """A ``pipe:`` command that exited with an error."""


class TarFormatError(WdsError, ValueError, tarfile.ReadError):
    """Bytes that are not a valid tar stream."""


class TruncatedShardError(TarFormatError):
    """A shard that ends in the middle of a header or a member."""


class SampleError(WdsError, ValueError):
    """Members that do not form a valid sample (for example a field given twice)."""


class OverLimitError(SampleError):
    """A member, sample or record larger than the decode limits allow, refused before it was read.

    ``repeats`` is true for the refusal of a member whose extension headers were already reported over the
    limit when the first of them was met (the reader names the member once they are streamed past).
    """

    repeats = False


class MissingFieldError(SampleError, KeyError):
    """A field that a stage needs is not in the sample."""


class SampleShapeError(SampleError, TypeError, AssertionError):
    """A sample of the wrong kind for the stage: a dict where a tuple is needed, or the reverse.

    It says the pipeline's stages are in the wrong order, not that the data is
    bad, so stages raise it whatever their handler (webdataset asserts there).
    """


class CheckpointError(WdsError, ValueError):
    """A state that cannot be taken, or cannot be restored into this pipeline."""


class NotElastic(CheckpointError):
    """Why a pipeline's delivered positions in a balanced epoch cannot be followed (:mod:`wds_core.elastic`)."""


class FieldError(SampleError):
    """A field of a sample that cannot be decoded or encoded.

    ``key`` is the sample key and ``field`` the field name (``"jpg"``,
    ``"seg.png"``); ``member`` is the tar member they make.  ``k`` and
    ``sample`` are kept for code written against webdataset.
    """

    def __init__(
        self,
        message: str,
        *,
        url: object = None,
        key: str | None = None,
        field: str | None = None,
        sample: object = None,
    ) -> None:
        self.key, self.field, self.sample = key, field, sample
        member = None if key is None or field is None else f"{key}.{field}"
        super().__init__(message, url=url, member=member)

    @classmethod
    def in_sample(cls: type[_Field], message: str, sample: dict[str, Any], field: str) -> _Field:
        """The error about ``field`` of ``sample``: its shard and key come from ``__url__`` and ``__key__``."""
        return cls(message, url=sample.get("__url__"), key=sample.get("__key__"), field=field, sample=sample)

    def _where(self) -> list[tuple[str, object]]:
        return [("shard", self.url), ("sample", self.key), ("field", self.field)]

    @property
    def k(self) -> str | None:
        return self.field

    def __reduce__(self) -> tuple[Any, ...]:  # the sample stays behind: it may be large or unpicklable
        return (_rebuild_field_error, (type(self), self.reason, self.url, self.key, self.field))


_Field = TypeVar("_Field", bound=FieldError)


def _rebuild_field_error(
    cls: type[FieldError], reason: str, url: object, key: str | None, field: str | None
) -> FieldError:
    return cls(reason, url=url, key=key, field=field)


class DecodingError(FieldError):
    """A field whose bytes cannot be decoded."""


class EncodingError(FieldError):
    """A field that cannot be encoded, or a sample that cannot be written as it is."""


def install_hint(packages: str, extra: str) -> str:
    """How to install what a feature needs: the packages themselves, and wds's extra that brings them (wds is
    installed from a clone of its repository, not from PyPI)."""
    return f'pip install {packages} (or pip install -e ".[{extra}]" in your clone of wds)'
