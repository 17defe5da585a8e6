"""Run a training script with ``import webdataset`` resolving to wds, without editing it.

::

    python -m wds_torch.run train.py --epochs 10        # a script and its arguments
    python -m wds_torch.run -m open_clip_train.main ...  # or a module, as python -m would
    torchrun --nproc_per_node=8 -m wds_torch.run train.py ...

The script's ``import webdataset as wds``, ``from webdataset.filters import
_shuffle`` and the like get wds_torch, in the script and in every process it
starts with Python (DataLoader workers under ``spawn`` or ``forkserver``,
subprocesses), whether or not the real webdataset is installed.  One line on
stderr says which package is active (``--quiet`` drops it).
"""

from __future__ import annotations

import os
import runpy
import sys

SHIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_shim")


def _usage() -> int:
    print("usage: python -m wds_torch.run [--quiet] (SCRIPT | -m MODULE) [ARGS...]", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    quiet = False
    while args and args[0] in ("-q", "--quiet"):
        quiet = True
        args.pop(0)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        return _usage() if not args else 0
    module = None
    if args[0] == "-m":
        if len(args) < 2:
            return _usage()
        module, args = args[1], args[2:]
    else:
        script, args = args[0], args[1:]
    # Spawned workers get sys.path from this process; other Python subprocesses get PYTHONPATH.
    sys.path.insert(0, SHIM)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (SHIM, os.environ.get("PYTHONPATH")) if p)
    import wds_torch

    wds_torch.install_as_webdataset(verbose=not quiet)
    if module is not None:
        sys.argv = [module, *args]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [script, *args]
        sys.path.insert(1, os.path.dirname(os.path.abspath(script)))  # as `python script.py` would
        runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
