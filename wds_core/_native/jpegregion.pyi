# The compiled helper's signatures (jpegregion.c; built by setup.py when a C compiler and libjpeg-turbo are there).
from typing import Any

def header(data: bytes | bytearray | memoryview, /) -> tuple[int, int, str]: ...
def decode_region(
    data: bytes | bytearray | memoryview, denom: int, top: int, bottom: int, left: int, right: int, out: Any, /
) -> tuple[int, int]: ...
