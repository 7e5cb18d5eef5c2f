"""Which launcher started this process: torchrun (or another launcher that sets ``RANK`` and ``WORLD_SIZE``), or
mggcn's own (whose workers carry ``MGGCN_INIT_METHOD``), or none.

Importing this module loads no torch.
"""

from __future__ import annotations

import os

__all__ = ["under_torchrun", "torchrun_world_size"]


def under_torchrun() -> bool:
    """Whether this process is a rank torchrun (or another launcher) started, not one of mggcn's own workers nor a
    command that starts workers."""
    return "TORCHELASTIC_RUN_ID" in os.environ or ("RANK" in os.environ and "WORLD_SIZE" in os.environ
                                                   and "MGGCN_INIT_METHOD" not in os.environ)


def torchrun_world_size() -> int:
    """How many ranks the launcher started (1 outside one, or where its ``WORLD_SIZE`` cannot be read)."""
    if not under_torchrun():
        return 1
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 1
