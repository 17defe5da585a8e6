"""The optional compiled helpers, each built when it can be and left out otherwise (``optional=True``).

All of them live in wds_core/_native/ and are loaded through :mod:`wds_core._native` (``WDS_PURE_PYTHON=1`` leaves
them all unused; ``wds_core._native.native_status()`` says which are built and used):

* ``wds_core._native.tarscan`` (tarscan.c): the common case of the tar walk, plain regular members,
  in C. Needs a C compiler and Python's headers; without it the walk is all Python, with the same results.
* ``wds_core._native.groupfast`` (groupfast.c): the common case of grouping members into samples, in C; the
  same needs and the same fallback.
* ``wds_core._native.mapcopy`` (mapcopy.c): bytes copied out of a map of a local shard for indexed access,
  a file cut while it is mapped reported instead of ending the process (SIGBUS); without it, indexed access reads
  local shards with ``pread``.  tarscan.c guards its copies the same way.
* ``wds_core._native.sigbus_guard`` (sigbus_guard.c): the process's one guard of those copies, which both reach
  through sigbus_guard.h; without it, neither of them is used.
* ``wds_core._native.jpegregion`` (jpegregion.c): JPEG region decoding by the system's
  libjpeg-turbo. Needs its headers too (Debian: ``libjpeg62-turbo-dev``); without it wds decodes whole JPEGs.

Without any of them, the build says so and the install goes on.
"""

from setuptools import Extension, setup

NATIVE = "wds_core/_native"
GUARD = [f"{NATIVE}/sigbus_guard.h"]  # the copies out of a map that survive a cut file, in both
guard = Extension("wds_core._native.sigbus_guard", [f"{NATIVE}/sigbus_guard.c"], depends=GUARD, optional=True)
scan = Extension("wds_core._native.tarscan", [f"{NATIVE}/tarscan.c"], depends=GUARD, optional=True)
mapcopy = Extension("wds_core._native.mapcopy", [f"{NATIVE}/mapcopy.c"], depends=GUARD, optional=True)
group = Extension("wds_core._native.groupfast", [f"{NATIVE}/groupfast.c"], optional=True)
region = Extension("wds_core._native.jpegregion", [f"{NATIVE}/jpegregion.c"], libraries=["jpeg"], optional=True)
setup(ext_modules=[guard, scan, group, region, mapcopy])
