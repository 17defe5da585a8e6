"""The optional compiled helpers, each built when it can be and left out otherwise (``optional=True``).

* ``wds_core.tar.tarscan`` (wds_core/tar/tarscan.c): the common case of the tar walk, plain regular members,
  in C. Needs a C compiler and Python's headers; without it the walk is all Python, with the same results.
* ``wds_core.groupfast`` (wds_core/groupfast.c): the common case of grouping members into samples, in C; the
  same needs and the same fallback.
* ``wds_core.fieldcodecs.jpegregion`` (wds_core/fieldcodecs/jpegregion.c): JPEG region decoding by the system's
  libjpeg-turbo. Needs its headers too (Debian: ``libjpeg62-turbo-dev``); without it wds decodes whole JPEGs.

Without either, the build says so and the install goes on.
"""

from setuptools import Extension, setup

scan = Extension("wds_core.tar.tarscan", ["wds_core/tar/tarscan.c"], optional=True)
group = Extension("wds_core.groupfast", ["wds_core/groupfast.c"], optional=True)
region = Extension(
    "wds_core.fieldcodecs.jpegregion", ["wds_core/fieldcodecs/jpegregion.c"], libraries=["jpeg"], optional=True
)
setup(ext_modules=[scan, group, region])
