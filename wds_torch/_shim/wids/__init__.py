"""``import wids`` in a process started by ``python -m wds_torch.run`` (and in its workers): wds_torch's wids.

Importing this module installs wds_torch as ``webdataset`` and ``wids``, which
replaces this module in ``sys.modules`` before the import statement that asked
for it completes.
"""

__wds__ = "shim"

import wds_torch  # noqa: E402

wds_torch.install_as_webdataset(verbose=False)
