"""Worker processes for any pipeline: the main side (:mod:`.main`, ``Loader``), the worker side
(:mod:`.worker`) and the shared memory arrays travel through (:mod:`.shm`)."""

from .main import *  # noqa: F401,F403
from .main import __all__ as __all__
