"""Whether a script starts spawned workers from code that each worker would run again.

A worker started with ``spawn`` (or ``forkserver``) imports the script that started it, to find the functions of its
pipeline; code outside ``if __name__ == "__main__":`` runs again there, and when that code starts the workers, each
worker starts workers of its own, which multiprocessing refuses: the worker dies and the loader says only that.
:func:`unguarded_start` finds the line of the script that is starting workers, if it is outside such a block, so
that the loader can say so before it starts any.
"""

from __future__ import annotations

import ast
import linecache
import sys
from types import FrameType

from ..errors import WdsError

__all__ = ["refuse_unguarded", "unguarded_start"]


def unguarded_start() -> tuple[str, int] | None:
    """``(script, line)`` where ``__main__``'s module code, outside ``if __name__ == "__main__":``, is what runs now;
    ``None`` when it is guarded, or there is no script to run again (``python -c``, a notebook)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    frame = _module_frame(getattr(main, "__dict__", None))
    if not path or frame is None:
        return None
    source = "".join(linecache.getlines(frame.f_code.co_filename))
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    line = frame.f_lineno
    for statement in tree.body:
        if statement.lineno <= line <= (statement.end_lineno or statement.lineno):
            return None if _is_main_guard(statement) else (frame.f_code.co_filename, line)
    return None


def _module_frame(namespace: dict | None) -> FrameType | None:
    """The frame running ``__main__``'s module code, if it is on this thread's stack."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals is namespace:
            return frame
        frame = frame.f_back
    return None


def _is_main_guard(statement: ast.stmt) -> bool:
    if not isinstance(statement, ast.If) or not isinstance(statement.test, ast.Compare):
        return False
    test = statement.test
    sides = [test.left, *test.comparators]
    names = {side.id for side in sides if isinstance(side, ast.Name)}
    values = {side.value for side in sides if isinstance(side, ast.Constant)}
    return names == {"__name__"} and values == {"__main__"} and isinstance(test.ops[0], ast.Eq)


def refuse_unguarded(what: str, method: str) -> None:
    """An error now, before any process starts, when each ``what`` started with ``method`` would run the line
    that starts them again."""
    found = unguarded_start()
    if found is not None:
        script, line = found
        raise WdsError(
            f"{what} start with {method!r}: each imports your script again, and line {line} of {script} starts them "
            'outside `if __name__ == "__main__":`, so each would start processes of its own (multiprocessing '
            'refuses, and the process dies). Put the code that starts them under `if __name__ == "__main__":` (or in '
            "a main() called from there)"
        )
