"""Image-caption pairs as img2dataset and LAION store them (``key.jpg``, ``key.txt``, ``key.json``).

``WebDataset(urls).image_text_pairs(min_size=256, min_similarity=0.28)`` yields
``(image, caption)`` (or dicts with ``output="dict"``: ``image``, ``text``,
``meta``, ``__key__``, ``__url__``).  Samples without an image or a caption,
and samples the metadata filters reject, are skipped and counted in
``stage.stats`` (per process), never an error; an image that cannot be decoded
is a data error for ``handler``.

Filters use the JSON metadata when it has the value (``width``/``height`` or
``original_width``/``original_height``, ``similarity``), else the decoded image
for sizes; a similarity threshold skips samples without a similarity.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import DecodingError, SpecError
from ..fieldcodecs.images import ImageHandler
from ..handlers import Handler, reraise_exception
from .mapping import CountingStage

__all__ = ["ImageTextPairs"]


def _size_of(image: Any) -> tuple[int, int] | None:
    size = getattr(image, "size", None)  # PIL: (width, height)
    if isinstance(size, tuple) and len(size) == 2:
        return int(size[0]), int(size[1])
    shape = getattr(image, "shape", None)  # arrays: HWC (or CHW for torch specs, sizes are what matter)
    if shape is not None and len(shape) >= 2:
        h, w = (shape[1], shape[2]) if len(shape) == 3 and shape[0] in (1, 3, 4) and shape[2] > 4 else shape[:2]
        return int(w), int(h)
    return None


class ImageTextPairs(CountingStage):
    """Stage: ``(image, caption)`` from image-caption samples (see the module doc)."""

    def __init__(
        self,
        image: str = "jpg;jpeg;png;webp",
        text: str = "txt;caption",
        meta: str | None = "json",
        decode: str | None = "pil",
        min_size: int | tuple[int, int] | None = None,
        min_similarity: float | None = None,
        caption_length: tuple[int, int | None] | None = None,
        output: str = "tuple",
        handler: Handler = reraise_exception,
    ) -> None:
        if output not in ("tuple", "dict"):
            raise SpecError(f"output must be 'tuple' or 'dict', got {output!r}")
        if isinstance(min_size, int):
            min_size = (min_size, min_size)
        self.image_fields, self.text_fields = image.split(";"), text.split(";")
        self.meta, self.decode, self.output, self.handler = meta, decode, output, handler
        self.min_size, self.min_similarity, self.caption_length = min_size, min_similarity, caption_length
        self._image = ImageHandler(decode) if decode else None
        super().__init__()

    def _skip(self, reason: str) -> None:
        self.stats[reason] += 1

    def _metadata(self, sample: dict[str, Any]) -> dict[str, Any]:
        value = sample.get(self.meta) if self.meta else None
        if isinstance(value, (bytes, bytearray, str)):
            try:
                value = json.loads(value)
            except ValueError:
                value = None
        return value if isinstance(value, dict) else {}

    def process(self, sample: dict[str, Any]) -> Any:
        image_field = next((f for f in self.image_fields if sample.get(f) is not None), None)
        text_field = next((f for f in self.text_fields if sample.get(f) is not None), None)
        if image_field is None:
            return self._skip("missing_image")
        if text_field is None:
            return self._skip("missing_caption")
        caption = sample[text_field]
        if isinstance(caption, (bytes, bytearray)):
            caption = caption.decode("utf-8", errors="replace")
        caption = str(caption).strip()
        if self.caption_length is not None:
            low, high = self.caption_length
            if len(caption) < low or (high is not None and len(caption) > high):
                return self._skip("caption_length")
        meta = self._metadata(sample)
        if self.min_similarity is not None:
            similarity = meta.get("similarity")
            if not isinstance(similarity, (int, float)) or similarity < self.min_similarity:
                return self._skip("low_similarity")
        known = self._known_size(meta)
        if self.min_size is not None and known is not None and not self._big_enough(known):
            return self._skip("too_small")
        image = sample[image_field]
        if self._image is not None and isinstance(image, (bytes, bytearray)):
            try:
                decoded = self._image(f"x.{image_field.rsplit('.', 1)[-1]}", image)
                image = self._image("x.jpg", image) if decoded is None else decoded  # any field name: PIL sniffs
            except Exception as exn:
                raise DecodingError.in_sample(f"cannot decode the image: {exn}", sample, image_field) from exn
            if self.min_size is not None and known is None:
                size = _size_of(image)
                if size is not None and not self._big_enough(size):
                    return self._skip("too_small")
        self.stats["kept"] += 1
        if self.output == "tuple":
            return image, caption
        return {
            "__key__": sample.get("__key__"),
            "__url__": sample.get("__url__"),
            "image": image,
            "text": caption,
            "meta": meta,
        }

    @staticmethod
    def _known_size(meta: dict[str, Any]) -> tuple[int, int] | None:
        for w, h in (("width", "height"), ("original_width", "original_height")):
            if isinstance(meta.get(w), (int, float)) and isinstance(meta.get(h), (int, float)):
                return int(meta[w]), int(meta[h])
        return None

    def _big_enough(self, size: tuple[int, int]) -> bool:
        width, height = self.min_size or (0, 0)
        return size[0] >= width and size[1] >= height
