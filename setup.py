"""The optional compiled helper: JPEG region decoding by the system's libjpeg-turbo (wds_core/fieldcodecs/jpegregion.c).

``optional=True``: without a C compiler, Python's headers or libjpeg-turbo's (Debian: ``libjpeg62-turbo-dev``),
the build says so and the install goes on without it; wds then decodes whole JPEGs, as before.
"""

from setuptools import Extension, setup

region = Extension(
    "wds_core.fieldcodecs.jpegregion", ["wds_core/fieldcodecs/jpegregion.c"], libraries=["jpeg"], optional=True
)
setup(ext_modules=[region])
