"""``python -m mggcn`` is the ``mggcn`` command (and what ``torchrun -m mggcn`` runs on every rank)."""

import atexit
import os
import signal
import sys


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _ignore_sigterm() -> None:
    # past the exit handlers the interpreter puts the default handlers back (not an ignore), and a SIGTERM in its
    # teardown, taken by any of its threads, would kill the finished command without a word (status 143): ignored,
    # the process ends with the command's status. Ctrl-C keeps its default, which still ends a teardown that hangs.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


# SIGTERM while the command loads means what Ctrl-C means (main() takes over once loaded), unless the process was
# started with it ignored; a worker started from this module loads with both blocked, and gets back its handler
_loading = signal.getsignal(signal.SIGTERM)
if _loading != signal.SIG_IGN:
    signal.signal(signal.SIGTERM, _interrupt)
try:
    from mggcn.tools.cli import main
except KeyboardInterrupt:  # Ctrl-C or SIGTERM while the command loads: as during its run, one line and 130
    print("mggcn: interrupted", file=sys.stderr, flush=True)
    os._exit(130)
finally:
    signal.signal(signal.SIGTERM, signal.SIG_DFL if _loading is None else _loading)


def entry() -> None:
    """The command: ``main()``, then the exit a torchrun rank takes (the ``mggcn`` script runs this too, so that
    ``torchrun --no-python mggcn`` ends its ranks as ``torchrun -m mggcn`` does)."""
    atexit.register(_ignore_sigterm)  # the command's exit only, not a process that imports this module
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
