"""Write ``webdataset_names.json``: the module-level names of each module of the webdataset versions the drop-in
stands in for, read from their sources (``ast``, nothing imported).

    pip download --no-deps -d /tmp/w webdataset==0.2.31 && (cd /tmp/w && unzip -q -d 0.2.31 webdataset-0.2.31-*.whl)
    python tests/core/dropin/webdataset_names.py 0.2.31=/tmp/w/0.2.31/webdataset 0.2.86=... 1.0.2=...

A name is one a module defines (a function, a class, an assignment, one defined under ``try``/``if``) or takes from
another module of the package (``from . import gopen``, ``from .utils import PipelineStage``); names taken from
elsewhere (``import os``, ``from typing import ...``) and dunder names are left out.
"""

from __future__ import annotations

import ast
import json
import os
import sys
from pathlib import Path


def _defined(body: list[ast.stmt], out: set[str]) -> None:
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out.update(n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.ImportFrom) and node.level >= 1:
            out.update(alias.asname or alias.name for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Try):
            for part in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                _defined(part, out)
        elif isinstance(node, ast.If):
            _defined(node.body, out)
            _defined(node.orelse, out)


def module_names(path: Path) -> list[str]:
    names: set[str] = set()
    _defined(ast.parse(path.read_text()).body, names)
    return sorted(name for name in names if not name.startswith("__"))


def main(argv: list[str]) -> None:
    table = {}
    for item in argv:
        version, folder = item.split("=", 1)
        files = sorted(p for p in Path(folder).glob("*.py"))
        table[version] = {p.stem: module_names(p) for p in files}
    out = Path(__file__).with_suffix(".json")
    out.write_text(json.dumps(table, indent=1, sort_keys=True) + os.linesep)
    print(f"{out}: {sum(len(v) for m in table.values() for v in m.values())} names", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
