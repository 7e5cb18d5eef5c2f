"""``python -m mggcn`` is the ``mggcn`` command (and what ``torchrun -m mggcn`` runs on every rank)."""

import os
import sys

try:
    from mggcn.tools.cli import main
except KeyboardInterrupt:  # Ctrl-C while the command loads: as during its run, one line and 130
    print("mggcn: interrupted", file=sys.stderr, flush=True)
    os._exit(130)


def entry() -> None:
    """The command: ``main()``, then the exit a torchrun rank takes (the ``mggcn`` script runs this too, so that
    ``torchrun --no-python mggcn`` ends its ranks as ``torchrun -m mggcn`` does)."""
    status = main()
    if "TORCHELASTIC_RUN_ID" in os.environ:
        # A torchrun rank skips the teardown of gloo's state, which occasionally aborts (as launch.exit_now does).
        # Nothing is imported here: a rank stopped while importing torch holds a half-loaded torch, and importing
        # it again fails with "duplicate registrations".
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


if __name__ == "__main__":
    entry()
