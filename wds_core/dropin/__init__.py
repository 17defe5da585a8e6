"""The drop-in: webdataset's module tree and top-level names, over wds's engine (framework-free).

Training code imports more of webdataset than ``WebDataset``: submodules
(``webdataset.filters._shuffle``, ``webdataset.tariterators.url_opener``,
``webdataset.shardlists.expand_urls``, ``webdataset.utils.pytorch_worker_seed``,
``webdataset.gopen``...), and webdataset 1.0.2's 83 top-level names.  This
package has them, each module named like webdataset's, with wds's recipes
behind the stage names: one implementation per behaviour.  ``wds_torch`` gives
the same modules with its PyTorch classes as ``wds_torch.filters``... and
:func:`install` makes ``import webdataset`` resolve to them.

Names wds does not provide (``LMDBCached``, ``multi.MultiLoader``...) can be
imported, and say why and what to use instead when used.
"""

from __future__ import annotations

import importlib.abc
import logging
import multiprocessing
import sys
import types
import warnings
from typing import Any

from ..spellings import TOP_LEVEL_NAMES
from . import (
    autodecode,
    cache,
    cborsiterators,
    compat,
    extradatasets,
    filters,
    handlers,
    hooks,
    mix,
    multi,
    pipeline,
    pytorch,
    shardlists,
    tariterators,
    tenbin,
    utils,
    writer,
)
from . import gopen as _gopen_module
from .autodecode import (
    Continue,
    Decoder,
    DecodingError,
    gzfilter,
    handle_extension,
    imagehandler,
    pytorch_weights_only,
    torch_audio,
    torch_loads,
    torch_video,
)
from .cache import (
    LRUCleanup,
    cached_tarfile_samples,
    cached_tarfile_to_samples,
    lru_cleanup,
    maybe_cached_tarfile_to_samples,
    pipe_cleaner,
)
from .cborsiterators import cbors2_to_samples, cbors_to_samples
from .compat import FluidInterface, FluidWrapper, WebDataset, WebLoader
from .extradatasets import MockDataset, with_epoch, with_length
from .filters import (
    Cached,
    LMDBCached,
    Processor,
    associate,
    batched,
    decode,
    detshuffle,
    extract_keys,
    getfirst,
    info,
    map,
    map_dict,
    map_tuple,
    pipelinefilter,
    rename,
    rename_keys,
    rsample,
    select,
    shuffle,
    slice,
    to_tuple,
    transform_with,
    unbatched,
    xdecode,
)
from .gopen import gopen, gopen_schemes
from .handlers import ignore_and_continue, ignore_and_stop, reraise_exception, warn_and_continue, warn_and_stop
from .mix import RandomMix, RoundRobin
from .modulespecs import PATH_PREFIX, path_hook, stand_in, stand_in_spec
from .pipeline import DataPipeline
from .shardlists import (
    MultiShardSample,
    ResampledShards,
    SimpleShardList,
    non_empty,
    resampled,
    shardspec,
    single_node_only,
    split_by_node,
    split_by_worker,
)
from .tariterators import tarfile_samples, tarfile_to_samples
from .utils import PipelineStage, repeatedly
from .writer import ShardWriter, TarWriter, numpy_dumps, torch_dumps

MODULES: dict[str, types.ModuleType] = {
    "autodecode": autodecode,
    "cache": cache,
    "cborsiterators": cborsiterators,
    "compat": compat,
    "extradatasets": extradatasets,
    "filters": filters,
    "gopen": _gopen_module,
    "handlers": handlers,
    "mix": mix,
    "multi": multi,
    "pipeline": pipeline,
    "pytorch": pytorch,
    "shardlists": shardlists,
    "tariterators": tariterators,
    "tenbin": tenbin,
    "utils": utils,
    "writer": writer,
}
hooks.register(MODULES)

#: webdataset's modules the drop-in does not have, and why
LEFT_OUT_MODULES = {
    "bench": "webdataset 0.2's benchmark command; `wds bench` measures reading",
    "typecheck": "webdataset 1.0.2's checks of its own functions' arguments",
}

__all__ = [  # webdataset's top-level names (:mod:`wds_core.spellings`), then the drop-in's own
    *TOP_LEVEL_NAMES,
    "MODULES",
    "Processor",
    "TOP_LEVEL",
    "WEBDATASET_NAMES",
    "install",
    "installed",
    "top_level",
    "uninstall",
]
WEBDATASET_NAMES = list(TOP_LEVEL_NAMES)

# the module each name comes from: an adapter's versions of the modules give its versions of the names
TOP_LEVEL: dict[str, str] = {
    name: next(module for module, m in MODULES.items() if name in m.__all__ and getattr(m, name) is globals()[name])
    for name in WEBDATASET_NAMES
}

# submodules that are also top-level attributes (gopen is the function there, as in webdataset)
_SUBMODULE_ATTRIBUTES = [name for name in MODULES if name not in TOP_LEVEL]

API_VERSION = "1.0.2"  # the webdataset release whose names and behaviour the drop-in follows


log = logging.getLogger("wds")
_saved: dict[str, Any] | None = None  # sys.modules entries install() replaced


def top_level(modules: dict[str, types.ModuleType]) -> dict[str, Any]:
    """webdataset's top-level namespace from a set of its modules (wds_core's or an adapter's)."""
    names = {name: getattr(modules[module], name) for name, module in TOP_LEVEL.items()}
    names.update({name: modules[name] for name in _SUBMODULE_ATTRIBUTES})
    return names


def _ours(name: str) -> bool:
    """Whether ``name`` is a module the switch stands in for: webdataset's or wids's, or one inside them."""
    return name in ("webdataset", "wids") or name.startswith(("webdataset.", "wids."))


class _RefuseUnknownSubmodules(importlib.abc.MetaPathFinder):
    """``import webdataset.<x>`` (or ``wids.<x>``) for a module the drop-in does not have: a clear error."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if _saved is None:
            return None
        if fullname in sys.modules:  # a stand-in reloaded: its own spec, never the real package on sys.path
            return stand_in_spec(fullname)
        if fullname.startswith("webdataset."):
            why = LEFT_OUT_MODULES.get(fullname.partition(".")[2])
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: `import webdataset` is wds's drop-in here, which has "
                f"webdataset's modules {', '.join(sorted(MODULES))}{f' ({why})' if why else ''} (see wds's "
                "docs/guides/moving-from-webdataset.md)",
                name=fullname,
            )
        if fullname.startswith("wids."):
            instead = _WIDS_INSTEAD.get(fullname, "")
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: `import wids` is wds's drop-in here, which has wids.wids, "
                f"wids.wids_decode and wids.wids_specs{instead} (see wds's docs/guides/moving-from-webdataset.md)",
                name=fullname,
            )
        return None


# what to use instead of wids's internal modules the drop-in does not have
_WIDS_INSTEAD = {
    "wids.wids_mmtar": "; shards are read by wds's offset index and memory map (wids.ShardListDataset)",
    "wids.wids_tar": "; shards are read by wds's offset index and memory map (wids.ShardListDataset)",
    "wids.wids_index": "; indexes are built by `wds index create` or wds_core.ShardListDataset",
    "wids.wids_dl": "; downloads go through wds's storage (wds_core.io.open_shard, any URL wds reads)",
    "wids.wids_lru": "; wids.wids.LRUShards keeps the open shards",
    "wids.wids_cleanup": "; wds's shard cache (ShardCache) removes the least recently used files",
    "wids.wids_dir": "; a folder of shards is wds_core.DirectoryShardList",
    "wids.wids_bench": "; benchmarks are wds's benchmarks/bench_indexed.py",
}

_FINDER = _RefuseUnknownSubmodules()


def _describe_real() -> str:
    try:
        from importlib.metadata import version

        return f"the installed webdataset {version('webdataset')} is not used"
    except Exception:
        return "no webdataset package is installed"


def install(
    namespace: dict[str, Any],
    modules: dict[str, types.ModuleType],
    flavour: str,
    verbose: bool = True,
    wids: dict[str, types.ModuleType] | None = None,
) -> types.ModuleType:
    """Make ``import webdataset`` and ``import webdataset.<module>`` give wds (see ``install_as_webdataset``),
    and ``import wids`` too.

    ``namespace`` is the whole top-level namespace (the package's names with
    :func:`top_level`'s on top), ``modules`` webdataset's submodules,
    ``flavour`` the package that provides them (``"wds_torch"``), ``wids``
    the modules that stand in for wids (:func:`.wids.wids_modules`, the
    framework-free ones by default).  Says which one is active (the ``wds``
    logger, and one line on stderr in the main process when ``verbose``).
    Idempotent; :func:`uninstall` undoes it.
    """
    global _saved
    current = sys.modules.get("webdataset")
    if current is not None and getattr(current, "__wds__", None) == flavour:
        return current
    if current is not None and getattr(current, "__wds__", None) is None:
        warnings.warn(
            "the real webdataset was imported before install_as_webdataset(): modules that imported it "
            "already keep using it; call install_as_webdataset() before importing them",
            stacklevel=3,
        )
    if _saved is None:  # what to restore: the real webdataset's and wids's modules, if imported (not the run shim)
        _saved = {name: m for name, m in sys.modules.items() if _ours(name) and getattr(m, "__wds__", None) is None}
    for name in [n for n in sys.modules if _ours(n)]:
        del sys.modules[name]
    from ..version import __version__

    # each a module of its own (its spec says webdataset.<name>), holding the names of the one it stands for
    submodules = {
        name: hooks.track(
            stand_in(
                f"webdataset.{name}",
                vars(module),
                getattr(module, "__file__", None),
                kind=hooks.write_through(type(module)),
                doc=module.__doc__,
            )  # fmt: skip
        )
        for name, module in modules.items()
    }
    doc = f"wds {__version__} standing in for webdataset ({flavour})"
    names = {**namespace, "__version__": API_VERSION, "__wds__": flavour, "__all__": sorted(TOP_LEVEL)}
    names.update({name: submodules[name] for name in _SUBMODULE_ATTRIBUTES})
    sys.modules["webdataset"] = stand_in("webdataset", names, __file__, package=True, doc=doc)
    sys.modules.update({f"webdataset.{name}": module for name, module in submodules.items()})
    top = sys.modules["webdataset"]
    if wids is None:
        from .wids import wids_modules

        wids = wids_modules(flavour)
    sys.modules.update(wids)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    if path_hook not in sys.path_hooks:
        sys.path_hooks.insert(0, path_hook)
    message = (
        f"import webdataset -> {flavour} (wds {__version__}, webdataset {API_VERSION} API; import wids too); "
        f"{_describe_real()}"
    )
    log.info(message)
    if verbose and multiprocessing.parent_process() is None:
        print(f"wds: {message}", file=sys.stderr)
    return top


def installed() -> str | None:
    """The package ``import webdataset`` gives now: ``"wds_torch"``/``"wds_core"``, ``"webdataset"`` or ``None``."""
    current = sys.modules.get("webdataset")
    if current is None:
        return None
    return getattr(current, "__wds__", "webdataset")


def uninstall() -> None:
    """Undo :func:`install`: ``import webdataset`` gives what it gave before."""
    global _saved
    if _saved is None:
        return
    for name in [n for n in sys.modules if _ours(n)]:
        del sys.modules[name]
    sys.modules.update(_saved)
    _saved = None
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    if path_hook in sys.path_hooks:
        sys.path_hooks.remove(path_hook)
    for entry in [e for e in sys.path_importer_cache if isinstance(e, str) and e.startswith(PATH_PREFIX)]:
        del sys.path_importer_cache[entry]
