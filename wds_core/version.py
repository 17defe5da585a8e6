"""The version of wds (pyproject.toml's), where every module can read it without importing the package."""

__all__ = ["__version__"]

__version__ = "0.1.0"
