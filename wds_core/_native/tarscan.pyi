# The compiled helper's signature (tarscan.c; built by setup.py when a C compiler and Python's headers are there).
from typing import Any

def scan(
    buf: Any | None,
    body: Any,
    pos: int,
    n: int,
    base: int,
    max_member: int,
    out: list[Any],
    fd: int = -1,
    copy_below: int = 0,
    budget: int = -1,
    /,
) -> int: ...
