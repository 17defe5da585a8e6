"""The limits every reader and decoder holds to (:class:`DecodeLimits`): what a tar member's extension
headers, a field and a sample may take.

Here, below :mod:`wds_core.tar` and :mod:`wds_core.fieldcodecs`, because both hold to them: the tar readers
refuse members and samples from their headers before reading them, and the decoders refuse fields before
decoding them (:mod:`wds_core.fieldcodecs.bounded` has the decoders' checks).  Defaults are far beyond any
honest dataset's fields; raise them with ``decode(..., limits={"field_bytes": 8 << 30})`` or the
configuration file's ``decode_limits`` mapping (``WDS_CONFIG``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from .errors import OverLimitError

__all__ = ["GiB", "DecodeLimitError", "DecodeLimits", "parse_size"]

GiB = 1 << 30


class DecodeLimitError(ValueError):
    """A field or sample that would decode to more than a limit allows."""


@dataclass(frozen=True)
class DecodeLimits:
    """How much decoding may take (see the module doc): a field (``field_bytes``), a sample (``sample_bytes``),
    compressed data as a multiple of its bytes (``expansion``, at least ``expansion_floor``) and a tar member's
    extension headers (``header_bytes``)."""

    field_bytes: int = GiB
    sample_bytes: int = 4 * GiB
    header_bytes: int = 1 << 20
    expansion: int = 100
    expansion_floor: int = 64 << 20

    def allowed(self, encoded: int) -> int:
        """What a compressed field of ``encoded`` bytes may inflate to: ``expansion`` times, at least
        ``expansion_floor``, at most ``field_bytes``."""
        return min(self.field_bytes, max(self.expansion_floor, self.expansion * encoded))

    @classmethod
    def of(cls, given: Any = None) -> DecodeLimits:
        """``given`` (limits, a dict of some of them, or None) over the configuration file's, over the defaults."""
        from .io.config import configured

        limits = cls()
        for layer in (configured("decode_limits"), given):
            if layer is None:
                continue
            if isinstance(layer, DecodeLimits):
                limits = layer
                continue
            known = {f.name for f in fields(cls)}
            unknown = set(layer) - known
            if unknown:
                raise ValueError(f"unknown decode limits {sorted(unknown)}; the limits are {sorted(known)}")
            limits = replace(limits, **{k: int(v) for k, v in layer.items()})
        return limits

    def refuse(self, what: str, size: int | str, limit: str, where: str = "decode") -> DecodeLimitError:
        """The error for ``what`` (``size`` bytes) over ``limit``, saying how to raise it (``where(limits=)``).

        ``limit`` is a limit's name, or ``"allowed:N"`` for what :meth:`allowed` gave a field of ``N``
        compressed bytes (the message then names the limit that set it).
        """
        if limit.startswith("allowed:"):
            encoded = int(limit.split(":", 1)[1])
            value = self.allowed(encoded)
            limit = "field_bytes" if value == self.field_bytes else "expansion"
            if limit == "expansion":
                shown = f"{value:,} ({self.expansion}x its {encoded:,} bytes, at least expansion_floor="
                shown += f"{self.expansion_floor:,})"
                return self._refusal(what, size, limit, shown, where)
        return self._refusal(what, size, limit, f"{getattr(self, limit):,}", where)

    @staticmethod
    def _refusal(what: str, size: int | str, limit: str, shown: str, where: str) -> DecodeLimitError:
        return DecodeLimitError(
            f"{what} {size if isinstance(size, str) else f'{size:,} bytes'}, over the decode limit {limit}="
            f"{shown} (raise it with {where}(..., limits={{'{limit}': ...}}) or the config file's decode_limits)"
        )

    def over(self, what: str, size: int | str, limit: str, where: str, **located: Any) -> OverLimitError:
        """A reader's refusal (:meth:`refuse`'s message) as an :class:`OverLimitError` naming ``located``
        (``url``, ``member``, ``offset``)."""
        return OverLimitError(str(self.refuse(what, size, limit, where)), **located)


_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12}
_UNITS.update({"tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40})


def parse_size(value: Any) -> int:
    """A number of bytes as people write it: ``64MB``, ``512MiB``, ``1e9``, ``3 GB``, or a number (a ``ValueError``
    otherwise)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    text = str(value).strip()
    number = text.rstrip("bBiIkKmMgGtT").strip()
    unit = text[len(text.rstrip("bBiIkKmMgGtT")) :].lower()
    try:
        return int(float(number) * _UNITS[unit])
    except (KeyError, ValueError):
        raise ValueError(f"not a size: {value!r} (e.g. 64MB, 512MiB, 1e9)") from None
