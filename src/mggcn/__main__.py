"""``python -m mggcn`` is the ``mggcn`` command (and what ``torchrun -m mggcn`` runs on every rank)."""

import sys

from mggcn.cli import main

if __name__ == "__main__":
    sys.exit(main())
