"""The shape of the code: imports run one way, the core names no adapter, private names stay home.

The package's source is parsed (nothing is imported): every ``import``,
``from ... import`` and ``importlib.import_module("...")`` counts, including
those inside functions, because a function-level import closes a cycle just
the same when it runs.
"""

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.repository  # the sources in this checkout, not an installed wheel

ROOT = Path(__file__).resolve().parents[2]
ADAPTERS = ("wds_torch", "wds_jax", "wds_tf")

# Private names one module may take from another, with the reason.  Keep it short: a name
# another module needs is part of the owner's interface and should say so with a public name.
ALLOWED_PRIVATE: dict[tuple[str, str, str], str] = {}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources(*packages: str) -> dict[str, tuple[Path, ast.Module]]:
    """Every module of ``packages``: parsed sources, and the compiled helpers (named by their ``.pyi`` stubs,
    imports of nothing), so that ``from .tarscan import scan`` in ``_native`` is an import of ``_native.tarscan``."""
    found = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[module_name(path)] = (path, ast.parse(path.read_text(), str(path)))
        for stub in sorted((ROOT / package).rglob("*.pyi")):
            if not stub.with_suffix(".py").exists():
                found[module_name(stub)] = (stub, ast.Module(body=[], type_ignores=[]))
    return found


CORE = sources("wds_core")
ALL = {**CORE, **sources(*ADAPTERS)}


def resolve(importer: str, is_package: bool, level: int, module: str | None) -> str:
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def owner(name: str) -> str | None:
    """The module of ``ALL`` that ``name`` (a module or a name inside one) belongs to."""
    while name:
        if name in ALL:
            return name
        name = name.rpartition(".")[0]
    return None


def imports(module: str) -> list[tuple[str, str | None]]:
    """``(target module, imported name or None)`` for every import in ``module``, at any depth."""
    path, tree = ALL[module]
    is_package = path.name == "__init__.py"
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = resolve(module, is_package, node.level, node.module) if node.level else node.module or ""
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.append((full, None) if full in ALL else (base, alias.name))
        elif isinstance(node, ast.Import):
            found.extend((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if func in ("import_module", "__import__", "find_spec") and isinstance(node.args[0].value, str):
                found.append((node.args[0].value, None))
    return found


def import_graph(modules: dict[str, tuple[Path, ast.Module]] = CORE) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for module in modules:
        for target, name in imports(module):
            dest = owner(target)
            if dest not in modules or dest == module:
                continue
            # importing a submodule runs its parents' __init__ first: that is not an edge of the design; a name
            # taken from a parent package (``from .. import __version__``) is: it needs the parent's __init__ run
            if module.startswith(dest + ".") and name is None:
                continue
            graph[module].add(dest)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_the_core_import_graph_has_no_cycle():
    graph = import_graph()
    assert sum(map(len, graph.values())) > 200  # the walk sees the imports (a broken walk passes nothing)
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_no_adapter_import_graph_has_a_cycle(adapter):
    """wds_torch's drop-in imported the wds_torch package (for its names) inside install_as_webdataset."""
    graph = import_graph({name: tree for name, tree in ALL.items() if name.split(".")[0] == adapter})
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_the_cycle_finder_finds_a_function_level_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    tree = ast.parse("def f():\n    from .storage import open_shard\n")
    CORE["wds_core.io.fake"] = ALL["wds_core.io.fake"] = (ROOT / "wds_core/io/fake.py", tree)
    try:
        assert ("wds_core.io.storage", "open_shard") in imports("wds_core.io.fake")
    finally:
        del CORE["wds_core.io.fake"], ALL["wds_core.io.fake"]


def adapter_references(module: str) -> list[str]:
    named = [t for t, _ in imports(module) if t.split(".")[0] in ADAPTERS]
    for node in ast.walk(ALL[module][1]):  # a module path in a string, to be imported some other way
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if text.split(".")[0] in ADAPTERS and all(p.isidentifier() for p in text.split(".")):
                named.append(f"string {text!r}")
    return named


def test_no_core_module_names_an_adapter():
    offenders = {module: refs for module in CORE if (refs := adapter_references(module))}
    assert offenders == {}
    assert adapter_references("wds_torch.datasets")  # the check does see adapter imports


def private_uses(module: str) -> list[tuple[str, str, str]]:
    """``(module, owner, name)`` for each private name ``module`` takes from another module of the project."""
    path, tree = ALL[module]
    uses = []
    module_aliases: dict[str, str] = {}
    for target, name in imports(module):
        dest = owner(f"{target}.{name}" if name else target)
        if name and name.startswith("_") and not name.startswith("__") and dest and dest != module:
            uses.append((module, dest, name))
    for node in ast.walk(tree):  # `from . import stages` / `import wds_core.stages.mapping as st`, then st._private
        if isinstance(node, ast.ImportFrom):
            base = resolve(module, path.name == "__init__.py", node.level, node.module) if node.level else node.module
            for alias in node.names:
                if f"{base}.{alias.name}" in ALL:
                    module_aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in ALL:
                    module_aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            dotted = ast.unparse(node.value)
            target = module_aliases.get(dotted, dotted)
            if target in ALL and target != module:
                uses.append((module, target, node.attr))
    return uses


def test_no_module_takes_another_modules_private_names():
    found = {use for module in ALL for use in private_uses(module)}
    assert found - set(ALLOWED_PRIVATE) == set()
    assert set(ALLOWED_PRIVATE) - found == set()  # an exception no longer needed is removed


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from wds_core.stages.mapping import _PerSample\n", ("wds_core.stages.mapping", "_PerSample")),
        ("from ..io import storage\nstorage._private_table\n", ("wds_core.io.storage", "_private_table")),
        ("import wds_core.io.storage as st\nst._private_table\n", ("wds_core.io.storage", "_private_table")),
    ],
)
def test_the_private_check_sees_each_way_of_reaching_in(source, expected):
    CORE["wds_core.dropin.fake"] = ALL["wds_core.dropin.fake"] = (ROOT / "wds_core/dropin/fake.py", ast.parse(source))
    try:
        assert [use[1:] for use in private_uses("wds_core.dropin.fake")] == [expected]
    finally:
        del CORE["wds_core.dropin.fake"], ALL["wds_core.dropin.fake"]


def test_a_name_taken_from_a_parent_package_is_an_edge_and_a_compiled_helper_a_module():
    """What the graph missed: ``wds_core.dropin`` took ``__version__`` from ``wds_core`` (whose ``__init__``
    imports the drop-in: a cycle), while ``from .mapcopy import copy`` (a compiled helper) is no edge to
    ``wds_core.io``."""
    tree = ast.parse("def f():\n    from .. import __version__\n    from .._native.mapcopy import copy\n")
    CORE["wds_core.dropin.fake"] = ALL["wds_core.dropin.fake"] = (ROOT / "wds_core/dropin/fake.py", tree)
    try:
        assert import_graph()["wds_core.dropin.fake"] == {"wds_core", "wds_core._native.mapcopy"}
    finally:
        del CORE["wds_core.dropin.fake"], ALL["wds_core.dropin.fake"]


LOWER = {  # each layer, and what lies below it: all it may import
    "wds_core._native": set(),
    "wds_core.io": {"wds_core.errors", "wds_core._native"},
    "wds_core.limits": {"wds_core.errors", "wds_core.io"},
    "wds_core.tar": {"wds_core.errors", "wds_core.io", "wds_core.limits", "wds_core._native"},
}


def _in(module: str, layer: str) -> bool:
    return module == layer or module.startswith(layer + ".")


@pytest.mark.parametrize("layer", sorted(LOWER))
def test_the_lower_layers_import_nothing_from_above(layer):
    """Issue 46: tar/ took the key rules from grouping and the limits from fieldcodecs, which lie above it."""
    graph = import_graph()
    allowed = LOWER[layer] | {layer}
    for module in (m for m in CORE if _in(m, layer)):
        upward = sorted(t for t in graph[module] if not any(_in(t, below) for below in allowed))
        assert not upward, f"{module} imports {upward}, above {layer}"


def _unit(module: str) -> str | None:
    """The folder (or top-level module) of ``wds_core`` a module is in; ``None`` for the package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_the_folders_import_one_way():
    """Issue 46: a folder per layer (io, tar, sources, stages, pipeline, loader...), each importing only what lies
    below it: the graph of the folders and top-level modules has no cycle (sources/ took ``ListSource`` from
    pipeline/, and the spec files' mix, which builds pipelines, lived among the sources)."""
    graph = import_graph()
    units: dict[str, set[str]] = {}
    for module, targets in graph.items():
        here = _unit(module)
        if here is None:
            continue
        units.setdefault(here, set())
        for target in targets:
            there = _unit(target)
            if there is not None and there != here:
                units[here].add(there)
                units.setdefault(there, set())
    assert {"sources", "stages", "pipeline", "loader", "indexed", "observe", "io", "tar"} <= set(units)
    assert find_cycle(units) is None, " -> ".join(find_cycle(units) or [])


def test_the_io_layer_imports_only_errors_the_compiled_helpers_and_itself():
    graph = import_graph()
    below = {"wds_core.errors"} | {m for m in CORE if _in(m, "wds_core.io") or _in(m, "wds_core._native")}
    for module in (m for m in CORE if m.startswith("wds_core.io.")):
        assert graph[module] <= below, module


def test_every_compiled_helper_is_in_native_and_loaded_through_it():
    """Issue 46: the C helpers were spread over four folders, each imported its own way; they are all in _native/,
    which imports nothing of wds_core, and the other modules reach them through ``_native.load``."""
    stubs = sorted(p.stem for p in (ROOT / "wds_core").rglob("*.pyi") if not p.with_suffix(".py").exists())
    assert stubs == sorted(["groupfast", "jpegregion", "mapcopy", "sigbus_guard", "tarscan"])
    assert all((ROOT / "wds_core" / "_native" / f"{stub}.pyi").exists() for stub in stubs)
    graph = import_graph()
    for module, targets in graph.items():
        helpers = {t for t in targets if t.startswith("wds_core._native.")}
        assert not helpers or _in(module, "wds_core._native"), (module, helpers)


def test_the_pipeline_knows_no_feature_by_name():
    """Balanced epochs, elastic resume and profiling plug into the pipeline through the hooks state.py declares
    (``Recipe.splits_epoch``, ``EPOCH_TRACKERS``, ``RUN_HOOKS``); the pipeline imports none of them."""
    graph = import_graph()
    features = {"wds_core.sources.balanced", "wds_core.elastic", "wds_core.observe.profiling",
                "wds_core.observe.metrics", "wds_core.pipeline.mixing"}  # fmt: skip
    assert graph["wds_core.pipeline.datapipeline"] & features == set()


def test_features_are_plugged_in_by_the_packages_not_by_being_imported():
    """Issue 59 (5): profiling, balanced epochs and wds_torch's closer appended themselves to state's registries as
    their modules were imported; now only a package's ``__init__`` plugs them in (``state.plug_in``), by name."""
    registries = {"RUN_HOOKS", "SOURCE_CLOSERS", "EPOCH_TRACKERS"}
    for module, (_, tree) in ALL.items():
        for node in tree.body:  # module-level statements
            for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
                name = ast.unparse(call.func)
                assert not any(name.endswith(f"{r}.append") for r in registries), (module, name)
                if name.endswith("plug_in"):
                    assert module in ("wds_core", "wds_torch"), module
    init = (ROOT / "wds_torch" / "__init__.py").read_text()
    assert "plug_in(source_closer=" in init and "SOURCE_CLOSERS.append" not in init


def test_no_module_fills_another_modules_table_as_it_is_imported():
    """Issue 59 (5): the module-level tables (codecs, schemes, hooks) are filled by the module that keeps them (its
    built-ins) or by a package's ``__init__``, by name: importing a module never registers it elsewhere."""
    packages = {"wds_core", "wds_torch", "wds_jax", "wds_tf", "wds_core.dropin"}
    for module, (_, tree) in ALL.items():
        defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
                name = ast.unparse(call.func)
                last = name.rsplit(".", 1)[-1]
                if (last.startswith("register") and name != "os.register_at_fork") or last == "plug_in":
                    assert module in packages or name in defined, (module, name)


def test_code_says_what_and_why_and_leaves_history_and_figures_to_the_records():
    """Issue 59 (7): module docstrings of 54 lines, a 47-line docstring on an 86-line function, comments citing
    issues, timings and "used to".  Figures go to benchmarks/README.md and docs/benchmarks-history.md, history to
    the commit log."""
    import io
    import tokenize

    cites = re.compile(r"\b\d+(\.\d+)? ?(ms|µs|MB/s|GB/s)\b|\b\d+(\.\d+)? -> \d|[Ii]ssue \d+|\bused to\b")
    found = []
    for module, (path, tree) in ALL.items():
        doc = ast.get_docstring(tree, clean=False) or ""
        if doc.count("\n") >= 45:
            found.append(f"{module}: a module docstring of {doc.count(chr(10)) + 1} lines")
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                lines = (ast.get_docstring(node, clean=False) or "").count("\n") + 1
                if lines > 30:
                    found.append(f"{module}.{node.name}: a docstring of {lines} lines")
        for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
            if token.type == tokenize.COMMENT and cites.search(token.string):
                found.append(f"{module}:{token.start[0]}: {token.string}")
    assert found == []


def test_no_module_writes_a_pipelines_private_fields():
    """``mixing`` used to reset a copy's ``_run`` and ``_pending`` itself: ``DataPipeline.fresh_copy`` does it."""
    written = []
    for module, (_, tree) in ALL.items():
        if module == "wds_core.pipeline.datapipeline":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            else:
                continue
            for attribute in (t for each in targets for t in ast.walk(each) if isinstance(t, ast.Attribute)):
                if attribute.attr.startswith("_") and not attribute.attr.startswith("__"):
                    if not (isinstance(attribute.value, ast.Name) and attribute.value.id in ("self", "cls")):
                        written.append((module, attribute.attr))
    assert [use for use in written if use[1] in ("_run", "_pending", "_elastic")] == []


# Where storage_options= is accepted: the public entry points, each turning it into one Storage at once.  Inside,
# code takes a Storage (``storage``), never loose option dicts.
STORAGE_ENTRY_POINTS = {
    "wds_core.dataset": {"__init__"},  # WebDataset
    "wds_core.indexed.dataset": {"__init__"},  # ShardListDataset
    "wds_core.sources.tarsamples": {"__init__", "tarfile_to_samples"},  # the shard-reading stage
    "wds_core.sources.recordstreams": {"__init__", "cbors_to_samples", "msgpacks_to_samples"},  # and its writers
    "wds_core.sources.specfile": {"load_spec"},
    "wds_core.sources.descriptor": {"load_descriptor"},
    "wds_core.writer": {"__init__"},  # TarWriter (ShardWriter passes it on)
    "wds_core.tools.parallel": {"map_shards"},
    "wds_core.tools.makeshards": {"make_shards"},
    # the native entry points take storage=, and webdataset's word for it with a DeprecationWarning (storage_argument)
    "wds_core.io.storage": {"storage_argument", "open_shard", "open_random_access", "create_shard", "read_bytes"},
    "wds_core.dropin.gopen": {"gopen", "_gopen_storage"},  # webdataset's signatures
    "wds_core.dropin.tariterators": {"url_opener", "tarfile_to_samples"},  # webdataset's, with wds's options
    "wds_core.dropin.writer": {"__init__"},
}


def storage_option_parameters() -> list[tuple[str, str]]:
    found = []
    for module, (_, tree) in ALL.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                arguments = node.args.args + node.args.kwonlyargs + node.args.posonlyargs
                if any(a.arg == "storage_options" for a in arguments):
                    found.append((module, node.name))
    return found


def test_only_the_entry_points_take_storage_options():
    found = storage_option_parameters()
    inside = [(m, f) for m, f in found if f not in STORAGE_ENTRY_POINTS.get(m, ())]
    assert not inside, f"take a Storage instead of storage_options: {inside}"
    assert len(found) <= 23, f"{len(found)} declarations of storage_options"


# The one gate for files and processes (issue 56): every file the package opens, creates, renames, lists or
# removes, and every process it starts, goes through wds_core/io/, whose local backend (io/files.py) applies secure
# mode.  Outside io/, these calls (and the modules that make them) are refused but for the places listed here,
# each with its reason; the list only shrinks.
FILE_CALLS = {
    "open", "io.open", "os.open", "os.fdopen", "os.replace", "os.rename", "os.renames", "os.remove", "os.unlink",
    "os.rmdir", "os.removedirs", "os.mkdir", "os.makedirs", "os.listdir", "os.scandir", "os.walk", "os.fwalk",
    "os.utime", "os.link", "os.symlink", "os.truncate", "os.chmod", "os.chown", "os.mkfifo", "os.stat", "os.lstat",
    "os.path.exists", "os.path.lexists", "os.path.isfile", "os.path.isdir", "os.path.islink", "os.path.getsize",
    "os.path.getmtime", "os.path.getctime", "os.path.getatime", "os.system", "os.popen", "os.execv", "os.execvp",
    "os.spawnv", "os.posix_spawn", "os.posix_spawnp",
}  # fmt: skip
FILE_MODULES = {"shutil", "tempfile", "glob", "subprocess", "pathlib", "fileinput", "pty"}
FILE_CALLS_ALLOWED: dict[tuple[str, str], str] = {
    ("wds_core.tools.jobs", "open"): "/proc/self/statm: this process's own memory, to bound a worker's",
    ("wds_core.cli.main", "os.open"): "os.devnull, so that a reader that went away (`wds ls | head`) ends quietly",
    ("wds_core.loader.shm", "os.listdir"): "/dev/shm: the loader's own shared-memory slots, left by dead processes",
    ("wds_core.loader.shm", "os.stat"): "/dev/shm: the age of a slot left behind",
}


def file_calls(module: str) -> set[str]:
    """The file and process calls of ``FILE_CALLS`` that ``module`` makes, and the modules of ``FILE_MODULES`` it
    imports (``import shutil`` is one, whatever it then calls)."""
    _, tree = ALL[module]
    found: set[str] = set()
    aliases: dict[str, str] = {}  # `from os import replace as r`: r -> os.replace
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(f"import {a.name}" for a in node.names if a.name in FILE_MODULES)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module in FILE_MODULES:
                found.add(f"import {node.module}")
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if full in FILE_MODULES:
                    found.add(f"import {full}")
                if full in FILE_CALLS or full == "os.path":
                    aliases[alias.asname or alias.name] = full
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            head, _, rest = name.partition(".")
            name = f"{aliases[head]}.{rest}".rstrip(".") if head in aliases else name
            if name in FILE_CALLS:
                found.add(name)
    return found


def test_only_io_opens_files_and_starts_processes():
    found = {(module, call) for module in ALL if not _in(module, "wds_core.io") for call in file_calls(module)}
    assert found - set(FILE_CALLS_ALLOWED) == set(), "go through wds_core.io.files (or io/commands for a process)"
    assert set(FILE_CALLS_ALLOWED) - found == set()  # an exception no longer needed is removed


@pytest.mark.parametrize(
    "source, expected",
    [
        ("open('x')\n", {"open"}),
        ("import os\nos.replace('a', 'b')\n", {"os.replace"}),
        ("from os import replace as r\nr('a', 'b')\n", {"os.replace"}),
        ("from os import path\npath.exists('a')\n", {"os.path.exists"}),
        ("import tempfile\n", {"import tempfile"}),
        ("from shutil import copyfileobj\n", {"import shutil"}),
        ("import subprocess as sp\nsp.run(['ls'])\n", {"import subprocess"}),
        ("from pathlib import Path\nPath('x').read_text()\n", {"import pathlib"}),
        ("files.open_file('x')\nPIL.Image.open(b)\n", set()),
    ],
)
def test_the_file_check_sees_each_way_of_reaching_a_file(source, expected):
    ALL["wds_core.dropin.fake"] = (ROOT / "wds_core/dropin/fake.py", ast.parse(source))
    try:
        assert file_calls("wds_core.dropin.fake") == expected
    finally:
        del ALL["wds_core.dropin.fake"]


THREAD_PRIMITIVES = {"Lock", "RLock", "Condition", "Event", "Semaphore", "BoundedSemaphore", "Barrier"}


def thread_primitives(module: str) -> set[str]:
    """The ``threading`` locks, conditions and events ``module`` makes itself (``threading.Lock()``, or a name
    taken from ``threading`` or ``_thread``)."""
    _, tree = ALL[module]
    taken = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module in ("threading", "_thread")
        for alias in node.names
        if alias.name in THREAD_PRIMITIVES | {"allocate_lock"}
    }
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            head, _, last = name.rpartition(".")
            if (head in ("threading", "_thread") and last in THREAD_PRIMITIVES | {"allocate_lock"}) or name in taken:
                found.add(name)
    return found


def test_every_lock_is_made_anew_in_a_forked_child():
    """Issue 56, case 9: a DataLoader forked its worker while an I/O thread held the engine's lock, and the child
    blocked for ever on its first remote read.  Every lock and event is a wds_core.io.forklocks one."""
    found = {
        module: calls for module in ALL if module != "wds_core.io.forklocks" if (calls := thread_primitives(module))
    }
    assert found == {}, "make a wds_core.io.forklocks.ForkSafeLock (or fork_safe_event) instead"
    source = "import threading\nfrom threading import Event as E\na = threading.Lock()\nb = E()\nc = ForkSafeLock()\n"
    ALL["wds_core.dropin.fake"] = (ROOT / "wds_core/dropin/fake.py", ast.parse(source))
    try:
        assert thread_primitives("wds_core.dropin.fake") == {"threading.Lock", "E"}
    finally:
        del ALL["wds_core.dropin.fake"]
