# The compiled helper's signature (mapcopy.c; built by setup.py when a C compiler and Python's headers are there).
from typing import Any

def copy(buffer: Any, offset: int, size: int, /) -> bytes | None: ...
