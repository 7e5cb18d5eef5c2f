"""``python -m mggcn`` is the ``mggcn`` command (and what ``torchrun -m mggcn`` runs on every rank)."""

import os
import sys

from mggcn.tools.cli import main

# The status of a command whose reader went away (``mggcn train | head -3``): what a shell reports for a Unix tool
# ended by SIGPIPE, 128 + 13.
EXIT_BROKEN_PIPE = 141


def _stdout_gone() -> int:
    """The reader of stdout went away: stop quietly, as Unix tools do. Output still buffered for the closed pipe is
    sent to /dev/null, so that the interpreter's final flush does not report the same error again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    try:
        status = main()
        sys.stdout.flush()  # a closed pipe shows here at the latest, not in the interpreter's teardown
    except BrokenPipeError:
        status = _stdout_gone()
    if "TORCHELASTIC_RUN_ID" in os.environ:  # a torchrun rank: skip the teardown of gloo's state (see exit_now)
        from mggcn.distributed.launch import exit_now

        exit_now(status)
    sys.exit(status)
