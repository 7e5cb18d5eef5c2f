"""``python -m mggcn`` is the ``mggcn`` command (and what ``torchrun -m mggcn`` runs on every rank)."""

import os
import sys

from mggcn.tools.cli import main

if __name__ == "__main__":
    status = main()
    if "TORCHELASTIC_RUN_ID" in os.environ:  # a torchrun rank: skip the teardown of gloo's state (see exit_now)
        from mggcn.distributed.launch import exit_now

        exit_now(status)
    sys.exit(status)
