"""The pipeline: the recipe (:mod:`.datapipeline`), one run of it (:mod:`.run`), the chainable methods
(:mod:`.fluid`), and mixes of pipelines (:mod:`.mixing`)."""

from .datapipeline import *  # noqa: F401,F403
from .datapipeline import __all__ as __all__
