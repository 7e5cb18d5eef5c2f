"""The ``mggcn`` command: one module per subcommand, each with ``HELP``, a description, ``add_arguments`` and ``run``.

Only the subcommand being run has its arguments built, and its modules imported: ``mggcn --help`` and
``mggcn prepare`` load no torch. Library errors (:class:`~mggcn.utils.errors.GraphError`,
:class:`~mggcn.utils.errors.ConfigError` and other ``ValueError`` s) become one line on stderr, a setting named by
its flag (:func:`~mggcn.tools.cli.common.flag_message`), and exit status 2; a non-finite loss and an output that
could not be written (:class:`~mggcn.utils.files.OutputError`, naming the file) exit 1; a signal
(Ctrl-C, SIGTERM) exits 130 (training first finishes its epoch and checkpoints).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import re
import shlex
import sys
import warnings
from types import ModuleType

from mggcn.config import __version__
from mggcn.tools.cli import bench, datasets, info, plan, predict, prepare, report, train
from mggcn.tools.cli.common import HelpFormatter, flag_message, out_of_memory_line
from mggcn.tools.cli.process import prepare_process
from mggcn.utils.errors import ConfigError, GraphError, says_out_of_memory, without_source_locations
from mggcn.utils.files import OutputError, clipped
from mggcn.utils.launcher import torchrun_world_size, under_torchrun
from mggcn.utils.system import hold_signals, own_process, signals_end_process, sigterm_as_interrupt

__all__ = ["main", "build_parser", "COMMANDS", "EXIT_BROKEN_PIPE"]

# What float() reads as a negative number: no option of mggcn's looks like one, so such a word is always a value.
_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$|^-(inf|infinity|nan)$", re.IGNORECASE)

COMMANDS: dict[str, ModuleType] = {"train": train, "prepare": prepare, "datasets": datasets, "info": info,
                                   "report": report, "predict": predict, "bench": bench, "plan": plan}


class _Parser(argparse.ArgumentParser):
    """Errors in one line (and a pointer to -h), not the whole usage block; every negative number a value may be
    (``--lr -1e-3``, ``--lr -inf``) is read as that value, where argparse takes only ``-5`` and ``-0.5`` for one."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_NUMBER

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} -h)\n")

    def _print_message(self, message: str, file=None) -> None:  # type: ignore[override]
        # argparse drops a failed write (OSError) silently: --help or --version onto a full disk exited 0
        file = file or sys.stderr
        if message and file is not None:  # no stream at all (closed, a pythonw): nothing to say it on
            file.write(message)


def _description(module: ModuleType) -> str:
    return module.description() if hasattr(module, "description") else module.DESCRIPTION


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of ``mggcn`` with the arguments of ``command`` (every command's when ``command`` is None, none
    when it is not a command's name)."""
    parser = _Parser(prog="mggcn", formatter_class=HelpFormatter,
                     description="Full-batch GCN training across processes and GPUs. Run `mggcn COMMAND -h` for "
                                 "a command's options and an example.\n\nexample:\n  mggcn train --nprocs 2")
    parser.add_argument("--version", action="version", version=f"mggcn {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND")
    for name, module in COMMANDS.items():
        if command is not None and name != command:
            sub.add_parser(name, help=module.HELP, add_help=False)
            continue
        p = sub.add_parser(name, help=module.HELP, description=_description(module),
                           formatter_class=HelpFormatter)
        module.add_arguments(p)
    return parser


# The status of a command whose reader went away (``mggcn train | head -3``): what a shell reports for a Unix tool
# ended by SIGPIPE, 128 + 13.
EXIT_BROKEN_PIPE = 141


def main(argv: list[str] | None = None) -> int:
    """Run ``mggcn ARGV``; without ``argv`` this process is the ``mggcn`` program (``sys.argv``: the installed command
    and ``python -m mggcn`` alike), the process settings a rank makes in it stay
    (:func:`mggcn.utils.system.own_process`), and a reader of stdout that goes away (``| head``) ends it quietly with
    :data:`EXIT_BROKEN_PIPE`. With ``argv`` (a caller's process, as in tests) they are undone after training, and a
    closed stdout raises ``BrokenPipeError``."""
    if argv is not None:
        return _main(list(argv))
    own_process()
    try:
        prepare_process()
    except ConfigError as err:
        print(f"mggcn: error: {err}", file=sys.stderr, flush=True)
        return 2
    try:
        with sigterm_as_interrupt(ending=130):  # to the end: a signal after the command's own handling is Ctrl-C's
            try:
                status = _main(sys.argv[1:])
                sys.stdout.flush()  # a closed pipe shows here at the latest, not in the interpreter's teardown
            finally:  # however the command ended, before the default SIGTERM is back: a signal from here ends it
                hold_signals()  # with 130 (signals_end_process)
    except BrokenPipeError:
        status = _stdout_gone()
    except OutputError as err:  # standard output itself could not be written (a full disk): said once
        _stdout_gone()
        print(f"mggcn: error: {err}", file=sys.stderr, flush=True)
        status = 1
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM once the command had handled its own (a second, a third)
        print("mggcn: interrupted", file=sys.stderr, flush=True)
        status = 130
    except SystemExit as done:  # argparse's usage error or --help: its status, once what it printed is written
        status = done.code if isinstance(done.code, int) else int(done.code is not None)
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            status = _stdout_gone()
        except OutputError as err:
            _stdout_gone()
            print(f"mggcn: error: {err}", file=sys.stderr, flush=True)
            status = 1
    signals_end_process()  # and in the interpreter's teardown
    return status


def _stdout_gone() -> int:
    """The reader of stdout went away: stop quietly, as Unix tools do. Output still buffered for the closed pipe is
    sent to /dev/null, so that the interpreter's final flush does not report the same error again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE


# Commands that are no job's rank: under torchrun each rank would write the same directory, or start its own workers
_ONE_PROCESS = {"prepare": "then train on what it wrote under torchrun",
                "bench": "it starts its own workers: --nprocs"}


def _main(argv: list[str]) -> int:
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(command or "")
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the command's parser, as its other errors are: "mggcn plan: error: ... (see mggcn plan -h)"
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        commands.choices[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    args.command_line = shlex.join(["mggcn", *argv])  # what a report says it was made by
    ranks = torchrun_world_size()
    if args.command in _ONE_PROCESS and ranks > 1:  # each rank would run the whole command, all at once
        print(f"mggcn {args.command}: error: runs as one process, not as torchrun's {ranks} ranks: run it without "
              f"torchrun ({_ONE_PROCESS[args.command]})", file=sys.stderr)
        return 2
    try:
        with sigterm_as_interrupt(), _warnings_in_one_line(args.command):  # SIGTERM means Ctrl-C: outputs being
            return COMMANDS[args.command].run(args)  # written are removed, as on any error
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM outside training (which stops by itself at an epoch's end)
        print(f"mggcn {args.command}: interrupted", file=sys.stderr)
        return 130
    except (GraphError, ValueError) as err:  # bad input or options, ConfigError and CheckpointError included
        print(f"mggcn {args.command}: error: {flag_message(err)}", file=sys.stderr)
        return getattr(err, "exit_status", 2)  # a download that failed is a failed run (1)
    except (FloatingPointError, OutputError) as err:  # NonFiniteLoss; an output that could not be written
        print(f"mggcn {args.command}: error: {flag_message(err)}", file=sys.stderr)
        return 1
    except OSError as err:  # a path the system refuses as it is written, before any file is read
        if err.errno != errno.ENAMETOOLONG:
            raise
        print(f"mggcn {args.command}: error: {clipped(os.fsdecode(err.filename or ''))}: a name in the path is longer "
              f"than the file system takes ({err.strerror})", file=sys.stderr)
        return 2
    except Exception as err:  # noqa: BLE001 - a torchrun rank: its node's log gets one line, not a traceback
        if says_out_of_memory(type(err).__name__, str(err)) and not under_torchrun():  # one line, the run failed
            print(f"mggcn {args.command}: error: {out_of_memory_line(_said(err))}", file=sys.stderr, flush=True)
            return 1
        if not under_torchrun():
            raise
        print(f"mggcn {args.command}: error: {_rank_failure(err)}", file=sys.stderr, flush=True)
        return 1


@contextlib.contextmanager
def _warnings_in_one_line(command: str):
    """Warnings said as the command's other lines are (``mggcn train: warning: ...``), not as Python's two lines
    with a source line of mggcn's own."""
    def show(message, category, filename, lineno, file=None, line=None):
        print(f"mggcn {command}: warning: {' '.join(str(message).split())}", file=file or sys.stderr, flush=True)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


def _said(err: BaseException) -> str:
    """``Type: message`` of ``err`` on one line, without the C++ source locations of torch's and gloo's words."""
    return without_source_locations(" ".join(f"{type(err).__name__}: {err}".split()))


def _rank_failure(err: Exception) -> str:
    """What ended a torchrun rank, in one line naming it: a lost connection to its peers (a rank or a node that
    failed or was stopped, whose own log says why) as such, rather than gloo's or NCCL's words alone."""
    rank = os.environ.get("RANK", "?")
    text = _said(err)
    launch = sys.modules.get("mggcn.distributed.launch")  # loaded by any job that got as far as a collective
    dist = sys.modules.get("torch.distributed")
    if type(err).__name__ == "RendezvousUnreachable":
        return str(err)
    if type(err).__name__ == "DistStoreError" and dist is not None and not dist.is_initialized():
        return f"rank {rank} gave up waiting for the other ranks to join the job: one of them failed or was " \
               f"stopped before it joined, or was never started (its node's log says why): {text[:200]}"
    if says_out_of_memory(type(err).__name__, text):
        return f"rank {rank} ran {out_of_memory_line(text)}"
    if launch is not None and launch.peer_lost(text):
        return f"rank {rank} lost its connection to the other ranks (one of them, or its node, failed or was " \
               f"stopped; its log says why): {text[:300]}"
    return f"rank {rank} failed: {text}"
