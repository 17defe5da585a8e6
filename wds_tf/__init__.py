"""The tf adapter of wds (not built yet: see the framework-adapters issue).

For now it re-exports the framework-free core so that imports work.
"""

from wds_core import *  # noqa: F401,F403
from wds_core import __all__  # noqa: F401
