"""Dataset-spec files: several shard collections mixed in proportions, from YAML or JSON.

``WebDataset("mix.yaml")`` (or ``.yml``/``.json``, a local path or any URL the
storage layer opens, or the parsed ``dict``) reads every source and mixes their
samples at random::

    dataset:                         # or "datasets" (webdataset's MultiShardSample), or a bare list
      - shards: s3://bucket/laion-{000000..000099}.tar
        weight: 0.7                  # or "scaleprob": how often this source is drawn (default 1)
        storage_options: {client_kwargs: {endpoint_url: "http://127.0.0.1:9000"}}
      - shards:                      # relative: to the spec's folder
          - cc3m/part-{000..009}.tar
          - cc3m/extra.tar
        scale: [1.0, 3.0]            # use the shards 1 to 3 times per epoch (drawn per epoch)
        extensions: "jpg;png txt"    # keep these fields (";": the first present, named as the first)
      - shards: local/ocr-{0..9}.tar
        choose: 4                    # 4 shards per epoch, without replacement (webdataset)
    longest: true                    # (default) go on until every source is used up

Per source: ``shards`` (brace pattern or list), ``name``, ``weight``/``scaleprob``,
``scale`` (a factor: every shard ``floor(f)`` times plus a random ``f - floor(f)``
fraction of them; ``[lo, hi]`` draws ``f`` uniformly each epoch), ``resample``
(that many shards drawn with replacement per epoch) or ``choose`` (that many
without; older webdataset called it ``perepoch``), ``extensions`` (a string of
field groups, or a mapping ``{new: "a;b"}`` that renames), ``storage_options``
(for this source's URLs, over the caller's), and webdataset's ``buckets`` (a
folder prefix); top level: ``prefix``,
``buckets``, ``longest``.  A ``pipe:`` URL is refused unless the caller passes
``allow_pipe=True``: a spec file names commands to run.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from ..errors import SampleError, SpecError, install_hint
from ..handlers import Handler, reraise_exception
from ..io.commands import refuse_command
from ..io.storage import Storage, storage_argument
from ..io.urls import expand_data, folder_of, join_url
from ..rng import Rng, derive_seed
from ..stages.mapping import PerSample
from ..tar.grouping import is_meta
from .shardlists import SimpleShardList

__all__ = ["Extensions", "Source", "SourceShards", "is_spec", "load_spec"]

_SOURCE_KEYS = {
    "shards", "name", "weight", "scaleprob", "scale", "resample", "choose", "perepoch", "extensions",
    "storage_options", "buckets",
}  # fmt: skip
_TOP_KEYS = {"dataset", "datasets", "prefix", "buckets", "longest", "name"}


@dataclass
class Source:
    """One shard collection of a spec file."""

    name: str
    urls: list[str]
    weight: float = 1.0
    scale: float | tuple[float, float] | None = None
    resample: int | None = None
    choose: int | None = None
    extensions: Any = None
    storage_options: dict[str, Any] | None = field(default=None, repr=False)


def is_spec(urls: Any) -> bool:
    """Whether ``urls`` names a spec file (or is a parsed one) rather than shards."""
    if isinstance(urls, dict):
        return True
    return isinstance(urls, str) and urls.lower().endswith((".yaml", ".yml", ".json"))


def _parse(text: bytes, where: str) -> Any:
    if where.lower().endswith(".json"):
        try:
            return json.loads(text)
        except ValueError as exn:
            raise SpecError(f"{where}: not valid JSON: {exn}") from None
    try:
        import yaml
    except ImportError:
        raise SpecError(f"reading {where} needs PyYAML: {install_hint('pyyaml', 'yaml')}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exn:
        raise SpecError(f"{where}: not valid YAML: {exn}") from None


def _number(entry: dict[str, Any], key: str, where: str, integer: bool = False) -> Any:
    value = entry.get(key)
    if value is None:
        return None
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or value < 0 or (integer and value < 1):
        kind = "an integer >= 1" if integer else "a number >= 0"
        raise SpecError(f"{where}: {key} must be {kind}, got {value!r}")
    return value


def _source(
    entry: Any, index: int, base: str | None, prefix: str, buckets: str, allow_pipe: bool, spec_name: str | None
) -> Source:
    where = f"source {index}"
    if not isinstance(entry, dict) or "shards" not in entry:
        raise SpecError(f"{where}: each source is a mapping with 'shards'")
    unknown = set(entry) - _SOURCE_KEYS
    if unknown:
        raise SpecError(f"{where}: unknown keys {sorted(unknown)} (known: {sorted(_SOURCE_KEYS)})")
    where = f"source {index} ({entry.get('name') or entry['shards']!r})"
    if "perepoch" in entry:  # older webdataset's name of choose
        if "choose" in entry:
            raise SpecError(f"{where}: give choose or perepoch (its older name), not both")
        entry = {**entry, "choose": entry["perepoch"]}
    bucket = entry.get("buckets", buckets) or ""
    if isinstance(bucket, list):
        if len(bucket) > 1:
            raise SpecError(f"{where}: one bucket per source")
        bucket = bucket[0] if bucket else ""
    if not isinstance(bucket, str):
        raise SpecError(f"{where}: buckets is a URL prefix (or a list of one), got {type(bucket).__name__}")
    patterns = entry["shards"] if isinstance(entry["shards"], list) else [entry["shards"]]
    urls: list[str] = []
    origin = f"{spec_name}: {where}" if spec_name else where
    for pattern in patterns:
        for url in expand_data(pattern, origin):  # once: the URLs are data from here on, never expanded again
            url = prefix + (bucket.rstrip("/") + "/" + url if bucket else url)
            url = url if url.startswith("pipe:") else join_url(base, url)
            urls.append(refuse_command(url, origin, allow_pipe))
    if not urls:
        raise SpecError(f"{where}: no shards")
    weight = _number(entry, "weight", where)
    if weight is None:
        weight = _number(entry, "scaleprob", where)
    scale: Any = entry.get("scale")
    if isinstance(scale, list):
        if len(scale) != 2 or not all(isinstance(x, (int, float)) and x >= 0 for x in scale) or scale[0] > scale[1]:
            raise SpecError(f"{where}: scale must be a number or [low, high], got {scale!r}")
        scale = (float(scale[0]), float(scale[1]))
    elif scale is not None:
        scale = float(_number(entry, "scale", where))
    counts = [k for k in ("scale", "resample", "choose") if entry.get(k) is not None]
    if len(counts) > 1:
        raise SpecError(f"{where}: give one of scale, resample, choose; got {counts}")
    options = entry.get("storage_options")
    if options is not None and not isinstance(options, dict):
        raise SpecError(f"{where}: storage_options must be a mapping")
    return Source(
        name=str(entry.get("name") or patterns[0]),
        urls=urls,
        weight=1.0 if weight is None else float(weight),
        scale=scale,
        resample=_number(entry, "resample", where, integer=True),
        choose=_number(entry, "choose", where, integer=True),
        extensions=Extensions.check(entry.get("extensions"), where),
        storage_options=options,
    )


def load_spec(
    spec: Any, allow_pipe: bool = False, storage: Storage | dict | None = None, *,
    storage_options: Storage | dict | None = None,
) -> tuple[list[Source], dict[str, Any]]:  # fmt: skip
    """The sources of a spec file, path, URL or parsed dict, and its top-level options."""
    storage = storage_argument("load_spec", storage, storage_options)
    base = name = None
    if isinstance(spec, str):
        base, name = folder_of(spec), spec
        spec = _parse(Storage.of(storage).read_bytes(spec), spec)
    if isinstance(spec, list):
        spec = {"datasets": spec}
    if not isinstance(spec, dict):
        raise SpecError("a dataset spec is a mapping with a 'dataset' list (or a list of sources)")
    unknown = set(spec) - _TOP_KEYS
    if unknown:
        raise SpecError(f"unknown top-level keys {sorted(unknown)} in the dataset spec (known: {sorted(_TOP_KEYS)})")
    entries = spec.get("dataset", spec.get("datasets"))
    if not isinstance(entries, list) or not entries:
        raise SpecError("the dataset spec lists no sources under 'dataset'")
    prefix, buckets = str(spec.get("prefix") or ""), spec.get("buckets") or ""
    sources = [_source(entry, i, base, prefix, buckets, allow_pipe, name) for i, entry in enumerate(entries)]
    return sources, {"longest": bool(spec.get("longest", True))}


class SourceShards(SimpleShardList):
    """A source's shards for an epoch: scaled, resampled or chosen, then shuffled if asked."""

    def __init__(self, source: Source, seed: int | None, shuffle: bool) -> None:
        super().__init__(source.urls, seed=seed, shuffle=shuffle)
        self.source = source

    def order(self, epoch: int) -> list[str]:
        urls, source = list(self.urls), self.source
        rng = Rng(derive_seed(self.seed if self.seed_given else 0, "source", source.name, epoch))
        if source.resample is not None:
            chosen = [urls[rng.below(len(urls))] for _ in range(source.resample)]
        elif source.choose is not None:
            chosen = [urls[i] for i in rng.permutation(len(urls))[: source.choose]]
        elif source.scale is not None:
            factor = source.scale
            if isinstance(factor, tuple):
                factor = factor[0] + (factor[1] - factor[0]) * rng.next64() / 2.0**64
            whole = math.floor(factor)
            extra = round((factor - whole) * len(urls))
            chosen = urls * whole + [urls[i] for i in sorted(rng.permutation(len(urls))[:extra])]
        else:
            chosen = urls
        if self.shuffle:
            chosen = [chosen[i] for i in rng.permutation(len(chosen))]
        return chosen


class Extensions(PerSample):
    """Keep a source's fields: ``"jpg;png txt"`` or ``{"image": "jpg;png", "text": "txt"}`` (see the module doc)."""

    def __init__(self, groups: Any, handler: Handler = reraise_exception) -> None:
        self.groups, self.handler = groups, handler

    @staticmethod
    def check(value: Any, where: str) -> Any:
        """``{output name: [alternatives]}`` from a spec's ``extensions`` entry (``None`` if absent)."""
        if value is None:
            return None
        if isinstance(value, str):
            value = value.split()
        if isinstance(value, list):
            value = {str(group).split(";")[0]: str(group) for group in value}
        if not isinstance(value, dict) or not value:
            raise SpecError(f"{where}: extensions must be a string, a list or a mapping, got {value!r}")
        return {str(name): [a for a in str(alts).split(";") if a] for name, alts in value.items()}

    def process(self, sample: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in sample.items() if is_meta(k)}
        for name, alternatives in self.groups.items():
            found = next((a for a in alternatives if a in sample), None)
            if found is None:
                fields = sorted(k for k in sample if not is_meta(k))
                raise SampleError(
                    f"the sample has none of the fields {alternatives} (it has {fields})",
                    url=sample.get("__url__"),
                    member=sample.get("__key__"),
                )
            out[name] = sample[found]
        return out
