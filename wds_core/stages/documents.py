"""Interleaved image-text documents (MMC4, OBELICS) as one ordered sequence per sample.

``WebDataset(urls).interleaved()`` gives each document ``sample["interleaved"]``:
a list whose items are ``str`` (text) or images, in document order.  Layouts
(``layout="auto"`` tells them apart by the JSON's keys):

* ``"mmc4"``: a JSON field with ``text_list`` and ``image_info`` (``image_name``,
  ``matched_text_index``, ``matched_sim``, ``raw_url``).  Image ``j`` is the
  member ``<key>.<j>.<ext>`` (as :func:`interleaved_sample` writes it), else the
  member named by its ``image_name`` (``<key>.`` prefix optional), else its
  ``image_base64`` (the OpenFlamingo shard layout).  Each image goes *before*
  the sentence it is matched to, several in ``image_info`` order; an index equal
  to the number of sentences puts it after the last one.
* ``"obelics"``: parallel ``texts`` and ``images`` lists, one of the two ``null``
  at each position.  The image at position ``i`` is the member ``<key>.<i>.<ext>``,
  else the member named by ``images[i]``, else ``images[i]`` itself as base64 or a
  ``data:`` URI.

Options: ``min_sim`` drops MMC4 images matched below it, ``max_images`` keeps the
first images of a document, ``require_images`` drops documents left without
any, ``decode`` is an image spec (``"pil"``, ``"rgb8"``, ... or ``None`` for the
encoded bytes), ``lazy=True`` gives :class:`LazyImage` objects decoded on
``.decode()``.  A malformed document (an index out of range, a missing image,
bad base64) is a :class:`~wds_core.SampleError` naming shard and key, handed
to ``handler``; dropped documents are counted in ``stage.stats``.
"""

from __future__ import annotations

import base64
import binascii
import collections
import json
from collections.abc import Callable
from typing import Any

from ..errors import SampleError, SpecError
from ..fieldcodecs.images import IMAGE_EXTENSIONS, ImageHandler
from ..handlers import Handler, reraise_exception
from .mapping import CountingStage

__all__ = ["Interleaved", "LazyImage", "interleaved_sample"]


class LazyImage:
    """An encoded image decoded when asked: ``.data`` (bytes), ``.decode()`` (cached)."""

    __slots__ = ("_decoded", "data", "spec")

    def __init__(self, data: bytes, spec: str) -> None:
        self.data, self.spec, self._decoded = data, spec, None

    def decode(self) -> Any:
        if self._decoded is None:
            self._decoded = ImageHandler(self.spec)("image.jpg", self.data)
        return self._decoded

    def __repr__(self) -> str:
        return f"LazyImage({len(self.data)} bytes, {self.spec!r})"


class Interleaved(CountingStage):
    """Stage: ``sample["interleaved"]`` from a stored document (see the module doc)."""

    def __init__(
        self,
        layout: str = "auto",
        field: str = "json",
        decode: str | None = "pil",
        lazy: bool = False,
        min_sim: float | None = None,
        max_images: int | None = None,
        require_images: bool = False,
        keep_fields: bool = False,
        handler: Handler = reraise_exception,
    ) -> None:
        if layout not in ("auto", "mmc4", "obelics"):
            raise SpecError(f"layout must be 'auto', 'mmc4' or 'obelics', got {layout!r}")
        if max_images is not None and (not isinstance(max_images, int) or max_images < 0):
            raise SpecError(f"max_images must be an integer >= 0, got {max_images!r}")
        self.layout, self.field, self.decode, self.lazy = layout, field, decode, lazy
        self.min_sim, self.max_images, self.require_images = min_sim, max_images, require_images
        self.keep_fields, self.handler = keep_fields, handler
        super().__init__()
        self._image: Callable[[str, bytes], Any] | None = ImageHandler(decode) if decode else None

    # ------------------------------------------------------------ parsing

    def _document(self, sample: dict[str, Any]) -> dict[str, Any]:
        if self.field not in sample:
            raise self._error(sample, f"no {self.field!r} field holding the document")
        doc = sample[self.field]
        if isinstance(doc, (bytes, bytearray, str)):
            try:
                doc = json.loads(doc)
            except ValueError as exn:
                raise self._error(sample, f"the {self.field!r} field is not JSON: {exn}") from None
        if not isinstance(doc, dict):
            raise self._error(sample, f"the {self.field!r} field is not a JSON object")
        return doc

    @staticmethod
    def _error(sample: dict[str, Any], message: str) -> SampleError:
        return SampleError(f"interleaved document: {message}", url=sample.get("__url__"), member=sample.get("__key__"))

    def _member(self, sample: dict[str, Any], index: int, name: Any, used: set[str]) -> bytes | None:
        """The image member for position/number ``index`` or named ``name``."""
        for ext in IMAGE_EXTENSIONS:
            field = f"{index}.{ext}"
            if field in sample:
                used.add(field)
                return sample[field]
        if isinstance(name, str) and name:
            key = str(sample.get("__key__", ""))
            base = name.rsplit("/", 1)[-1]
            for candidate in (name, base, base[len(key) + 1 :] if base.startswith(key + ".") else None):
                field = candidate or ""
                if field and field in sample and isinstance(sample[field], (bytes, bytearray)):
                    used.add(field)
                    return sample[field]
        return None

    def _inline(self, sample: dict[str, Any], text: str, what: str) -> bytes:
        if text.startswith("data:"):
            text = text.partition(",")[2]
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError) as exn:
            raise self._error(sample, f"{what} is not valid base64 ({exn})") from None

    def _mmc4(self, sample: dict[str, Any], doc: dict[str, Any], used: set[str]) -> list[Any]:
        texts, infos = doc.get("text_list"), doc.get("image_info")
        if not isinstance(texts, list) or not isinstance(infos, list):
            raise self._error(sample, "text_list and image_info must be lists")
        before: dict[int, list[bytes]] = collections.defaultdict(list)
        for j, info in enumerate(infos):
            if not isinstance(info, dict):
                raise self._error(sample, f"image_info[{j}] is not an object")
            index = info.get("matched_text_index")
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index <= len(texts):
                raise self._error(sample, f"image_info[{j}] has matched_text_index {index!r}, outside 0..{len(texts)}")
            sim = info.get("matched_sim")
            if self.min_sim is not None and (not isinstance(sim, (int, float)) or sim < self.min_sim):
                self.stats["images_below_min_sim"] += 1
                continue
            data = self._member(sample, j, info.get("image_name"), used)
            if data is None and isinstance(info.get("image_base64"), str):
                data = self._inline(sample, info["image_base64"], f"image_info[{j}].image_base64")
            if data is None:
                name = info.get("image_name")
                raise self._error(sample, f"image {j} ({name!r}) is neither a member nor embedded as image_base64")
            before[index].append(data)
        sequence: list[Any] = []
        for i in range(len(texts) + 1):
            sequence.extend(before.get(i, ()))
            if i < len(texts):
                if not isinstance(texts[i], str):
                    raise self._error(sample, f"text_list[{i}] is not a string")
                sequence.append(texts[i])
        return sequence

    def _obelics(self, sample: dict[str, Any], doc: dict[str, Any], used: set[str]) -> list[Any]:
        texts, images = doc.get("texts"), doc.get("images")
        if not isinstance(texts, list) or not isinstance(images, list) or len(texts) != len(images):
            raise self._error(sample, "texts and images must be lists of the same length")
        sequence: list[Any] = []
        for i, (text, image) in enumerate(zip(texts, images)):
            if image is not None and text is not None:
                raise self._error(sample, f"position {i} has both a text and an image")
            if text is not None:
                if not isinstance(text, str):
                    raise self._error(sample, f"texts[{i}] is not a string")
                sequence.append(text)
            elif image is not None:
                data = self._member(sample, i, image, used)
                if data is None:
                    if not isinstance(image, str) or "://" in image:
                        raise self._error(sample, f"image at position {i} ({str(image)[:80]!r}) is not a member")
                    data = self._inline(sample, image, f"images[{i}]")
                sequence.append(data)
        return sequence

    # ------------------------------------------------------------ the stage

    def process(self, sample: dict[str, Any]) -> dict[str, Any] | None:
        doc = self._document(sample)
        layout = self.layout
        if layout == "auto":
            if "text_list" in doc and "image_info" in doc:
                layout = "mmc4"
            elif "texts" in doc and "images" in doc:
                layout = "obelics"
            else:
                raise self._error(sample, f"neither MMC4 nor OBELICS keys in the document (it has {sorted(doc)[:10]})")
        used: set[str] = set()
        sequence = self._mmc4(sample, doc, used) if layout == "mmc4" else self._obelics(sample, doc, used)
        images = 0
        out: list[Any] = []
        for item in sequence:
            if isinstance(item, str):
                out.append(item)
                continue
            images += 1
            if self.max_images is not None and images > self.max_images:
                self.stats["images_over_max"] += 1
                continue
            out.append(self._decoded(sample, item))
        if self.require_images and not any(not isinstance(x, str) for x in out):
            self.stats["documents_without_images"] += 1
            return None
        self.stats["documents"] += 1
        result = sample if self.keep_fields else {k: v for k, v in sample.items() if k not in used}
        result["interleaved"] = out
        return result

    def _decoded(self, sample: dict[str, Any], data: bytes) -> Any:
        if self._image is None:
            return bytes(data)
        if self.lazy:
            return LazyImage(bytes(data), str(self.decode))
        try:
            return self._image("image.jpg", data)
        except Exception as exn:
            raise self._error(sample, f"an image cannot be decoded: {exn}") from exn


def interleaved_sample(
    key: str, items: list[Any], image_format: str = "jpg", meta: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A sample storing ``items`` (``str`` or images) in the MMC4 layout with image members.

    Images may be encoded bytes (stored as they are) or anything the writer's
    encoder takes for ``image_format`` (arrays, PIL images).  Write it with
    :class:`TarWriter`/:class:`ShardWriter`; ``.interleaved()`` reads it back in order.
    """
    texts: list[str] = []
    infos: list[dict[str, Any]] = []
    sample: dict[str, Any] = {"__key__": key}
    for item in items:
        if isinstance(item, str):
            texts.append(item)
            continue
        j = len(infos)
        infos.append({"image_name": f"{key}.{j}.{image_format}", "matched_text_index": len(texts), "matched_sim": 1.0})
        sample[f"{j}.{image_format}"] = item
    sample["json"] = {**(meta or {}), "text_list": texts, "image_info": infos}
    return sample
