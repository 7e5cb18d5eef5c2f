"""What several commands share: argument types, the dataset options, the reader keywords, launch facts."""

from __future__ import annotations

import argparse
import os
import re
import sys
import textwrap
from typing import TYPE_CHECKING

from mggcn.config import MMAP_THRESHOLD_MAX, ORDERINGS, PRECISIONS
from mggcn.data.catalog import named
from mggcn.data.formats import VERTEX_FILE_FORMATS
from mggcn.utils.devices import parse_device
from mggcn.utils.errors import ConfigError, GraphError, says_out_of_memory
from mggcn.utils.launcher import under_torchrun
from mggcn.utils.units import parse_bytes

if TYPE_CHECKING:  # the launcher imports torch; the commands that only parse arguments must not
    from mggcn.distributed.launch import WorkerError

__all__ = ["hidden_sizes", "device_arg", "byte_size", "byte_sizes", "mmap_threshold_size", "path_arg", "graph_count",
           "positive_int", "int_list", "orderings", "add_dataset_options",
           "add_reader_options", "read_options", "rank_zero", "node_speaker", "exit_status", "HelpFormatter",
           "FORMAT_HELP", "flag", "flag_message", "job_failure_status"]


INT64_MAX = 2**63 - 1  # the largest count of vertices or edges: graphs index them with int64


class HelpFormatter(argparse.HelpFormatter):
    """Descriptions filled to the terminal's width, paragraph by paragraph, their indented lines (examples) kept as
    written; every option's default shown, unless its help already says it or there is none to show."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out: list[str] = []
        paragraph: list[str] = []

        def flush() -> None:
            if paragraph:
                out.append(textwrap.fill(" ".join(paragraph), width, initial_indent=indent, subsequent_indent=indent,
                                         break_on_hyphens=False, break_long_words=False))
                paragraph.clear()

        for line in text.strip("\n").splitlines():
            if line.strip() and not line[0].isspace() and not line.rstrip().endswith(":"):
                paragraph.append(line.strip())
                continue
            flush()
            out.append(indent + line.rstrip())
        flush()
        return "\n".join(out)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("default" in text or action.default is None or action.default == argparse.SUPPRESS or action.nargs == 0
                or not action.option_strings):  # nargs 0: a flag, off unless given
            return text
        value = ",".join(map(str, action.default)) if isinstance(action.default, tuple) else "%(default)s"
        return f"{text} (default {value})"


def hidden_sizes(text: str) -> tuple[int, ...]:
    """Comma-separated sizes; an empty text is no size at all (no hidden layer), an empty item is refused."""
    if not text.strip():
        return ()
    try:
        sizes = tuple(int(t) for t in text.split(","))  # int() refuses an empty item ("8,,8", "8,")
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 128,128, got '{text}'") from None
    if any(s < 1 for s in sizes):
        raise argparse.ArgumentTypeError(f"hidden sizes must be positive, got '{text}'")
    return sizes


def fraction(text: str) -> float:
    """A number in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1], got '{text}'") from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1], got '{text}'")
    return value


def byte_size(text: str) -> int:
    try:
        value = parse_bytes(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size such as 4M or 512K, got '{text}'") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a size of at least 0, got '{text}'")
    return value


def byte_sizes(text: str) -> tuple[int, ...]:
    return tuple(byte_size(t) for t in text.split(",") if t.strip())


def mmap_threshold_size(text: str) -> int:
    """A byte size glibc's mallopt takes as its mmap threshold: at most :data:`~mggcn.config.MMAP_THRESHOLD_MAX`."""
    value = byte_size(text)
    if value > MMAP_THRESHOLD_MAX:
        raise argparse.ArgumentTypeError(f"expected a size of at most {MMAP_THRESHOLD_MAX >> 20}M (glibc's largest "
                                         f"mmap threshold), got '{text}'")
    return value


def path_arg(text: str) -> str:
    """A file or directory's name: not empty (``''`` would name the working directory, or nothing)."""
    if not text:
        raise argparse.ArgumentTypeError("expected a path, got ''")
    return text


def device_arg(text: str) -> str:
    """A job's device: ``cpu``, ``cuda``, ``cuda:K`` or ``auto`` (:func:`mggcn.utils.devices.parse_device`)."""
    try:
        return parse_device(text)
    except ConfigError:
        raise argparse.ArgumentTypeError(f"expected cpu, cuda, cuda:K (GPU K) or auto, got '{text}'") from None


def graph_count(text: str, low: int = 0) -> int:
    """An integer from ``low`` to the largest int64 (the counts of a graph are stored as int64)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got '{text}'") from None
    if not low <= value <= INT64_MAX:
        raise argparse.ArgumentTypeError(f"expected an integer from {low} to {INT64_MAX} (int64), got '{text}'")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'")
    return value


def int_list(text: str) -> tuple[int, ...]:
    """Comma-separated positive integers, at least one (process counts)."""
    try:
        sizes = hidden_sizes(text)
    except argparse.ArgumentTypeError:
        sizes = ()
    if not sizes:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers such as 1,2, got '{text}'")
    return sizes


def _names(text: str, known: tuple[str, ...], what: str) -> tuple[str, ...]:
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    bad = [n for n in names if n not in known]
    if not names or bad:
        raise argparse.ArgumentTypeError(f"expected {what} among {', '.join(known)}, got '{text}'")
    return names


def orderings(text: str) -> tuple[str, ...]:
    return _names(text, ORDERINGS, "orderings")


def precisions(text: str) -> tuple[str, ...]:
    return _names(text, PRECISIONS, "precisions")


FORMAT_HELP = ("layout of a dataset path: ogb, saint, dgl-reddit, mtx, edgelist, mggcn-bin, planetoid or npz "
               "(a prepared directory needs none; see `mggcn prepare -h`)")


def add_precision_option(p: argparse.ArgumentParser) -> None:
    """``--precision`` (train, bench, plan)."""
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="fp32 (default, exact); tf32: float32 storage, the GEMMs on tensor cores (CUDA); bf16: "
                        "features, activations and exchanged rows in bfloat16 (weights, Adam and the loss float32)")


def add_dataset_options(p: argparse.ArgumentParser, as_trained: bool = False) -> None:
    """How a DATASET path is read (train and predict)."""
    p.add_argument("--format", dest="fmt", default=None, metavar="FORMAT", help=FORMAT_HELP)
    add_reader_options(p, as_trained)


def add_reader_options(p: argparse.ArgumentParser, as_trained: bool = False) -> None:
    """The options of the readers that take them (train, predict, prepare). ``as_trained`` (predict): the switches
    that change the graph or its features default to how the model's training read its graph, and have ``--no-``
    forms (None: not given)."""
    switch = {"action": argparse.BooleanOptionalAction, "default": None} if as_trained else {"action": "store_true"}
    trained = " (default: as the model's training read it, from MODEL.json)" if as_trained else ""
    p.add_argument("--features", type=path_arg, default=None,
                   help="mtx/edgelist: features .npy [n, F] (default: random)")
    p.add_argument("--labels", type=path_arg, default=None,
                   help="mtx/edgelist: labels .npy [n], -1 (or NaN) = unlabelled, or [n, C] of 0/1 for several "
                        "labels per vertex (default: random)")
    p.add_argument("--split", type=path_arg, default=None,
                   help="mtx/edgelist: split .npy of 0/1/2/-1 (train/val/test/none) or .npz of masks "
                        "(default: random 50/25/25); ogb: the split scheme, split/NAME (default: the only one)")
    p.add_argument("--normalize-features", **switch,
                   help="planetoid: divide each feature row by its sum, as PyG's NormalizeFeatures "
                        f"{trained or '(default: as stored)'}")
    p.add_argument("--undirected", **switch,
                   help=f"every edge in both directions, once each (PyG's to_undirected){trained}")
    p.add_argument("--dedup", **switch, help=f"drop duplicate edges{trained}")


def read_options(args: argparse.Namespace) -> dict:
    """The reader keywords: ``--features/--labels/--split`` (and ``--num-nodes`` where the command has it) of
    mtx/edge-list sources, refused for formats that carry their own vertex data; ``--normalize-features`` of
    planetoid sources."""
    names = ("features", "labels", "split", "num_nodes")
    options = {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}
    for option in ("features", "labels", "split"):
        if options.get(option) == "":  # a command whose parser does not refuse it (path_arg)
            raise ConfigError(f"{option} '': an empty path names no file", option)
    if args.fmt == "ogb" and list(options) == ["split"]:  # the name of one of its split schemes (split/NAME)
        return options
    if options and args.fmt not in VERTEX_FILE_FORMATS:
        raise GraphError(f"--{next(iter(options)).replace('_', '-')} is for --format mtx or edgelist (and --split "
                         "NAME for ogb: a split scheme); other sources carry their vertex data")
    if "num_nodes" in options and args.fmt != "edgelist":
        raise GraphError("--num-nodes is for --format edgelist (a Matrix Market header gives n)")
    if getattr(args, "normalize_features", False):
        entry = named(getattr(args, "dataset", None)) if args.fmt is None else None  # cora, citeseer, pubmed
        if (entry.fmt if entry is not None else args.fmt) != "planetoid":
            raise GraphError("--normalize-features is for --format planetoid and the Planetoid datasets by name")
        options["normalize_features"] = True
    return options


def rank_zero() -> bool:
    """Whether this process speaks for the job: rank 0 under torchrun, and any command that is not a rank."""
    return os.environ.get("RANK", "0") == "0" or not under_torchrun()


def node_speaker() -> bool:
    """Whether this process says an error every rank shares, once for its node's log: local rank 0 under torchrun
    (each node's log has the line, not only rank 0's), and any command that is not a rank."""
    return os.environ.get("LOCAL_RANK", "0") == "0"


def exit_status(result) -> int:
    """0, or 130 when a signal stopped training (the shell's code for an interrupted command)."""
    return 130 if result.stopped == "interrupted" else 0


# library options whose flag has another name; the rest: --name-with-dashes
FLAGS = {"layer": "--embeddings", "timeout_s": "--timeout", "fmt": "--format", "out_dir": "OUT_DIR"}

# a setting's value that has a flag of its own on the command line
VALUE_FLAGS = {"resume='auto'": "--resume-or-start"}

# a setting as a Python caller passes it (``fmt=mtx``, ``(num_nodes=)``, ``pyg=False``), at the start or after a
# space, "(" or "/"; one given a quoted Python value (``norm='sym'``) is a call's text and stays as it is, but for
# those of VALUE_FLAGS
_KEYWORD = re.compile(r"(?:(?<=^)|(?<=[\s(/]))([a-z][a-z0-9_]*)=(?!['\"])(True\b|False\b)?(?=(\S?))")


def _keyword_flag(m: re.Match) -> str:
    """A keyword as its flag: a switch ``name=True`` as ``--name``, ``name=False`` as ``--no-name``, the flag then a
    space where a value follows (``fmt=mtx``: ``--format mtx``)."""
    name, switch, after = m.groups()
    if switch == "False":
        return "--no-" + flag(name)[2:]
    # "features=/labels=" names two settings; "out=/tmp/x" a setting and its value, an absolute path
    another = after == "/" and re.match(r"/[a-z][a-z0-9_]*=", m.string[m.end():]) is not None
    # a closing bracket ("(fmt=)"), or punctuation that ends the sentence or the clause ("give fmt=.", "fmt=),"),
    # not the first character of a value (./a.out)
    following = m.string[m.end() + 1: m.end() + 2]
    punctuation = after in ")]" or (after in ",;:." and (following.strip() == "" or following in ",;:)]"))
    value = not switch and after and not punctuation and (after != "/" or not another)
    return flag(name) + (" " if value else "")


def flag(option: str) -> str:
    """The command line's flag for the library setting ``option``."""
    return FLAGS.get(option, "--" + option.replace("_", "-"))


def flag_message(err: Exception) -> str:
    """A library error as the command line says it. An error that carries the setting it concerns (``option``: an
    :class:`~mggcn.utils.errors.InputError`, a non-finite loss) names flags instead of settings: a message that
    starts with the option's library name (``nprocs 5 is larger ...``) starts with its flag (``--nprocs 5 is
    larger ...``), and settings written as a Python caller passes them (``give fmt= (mtx, ...)``, ``fmt=mtx is for a
    path``, ``pyg=False``) become their flags (``give --format (mtx, ...)``, ``--format mtx is for a path``,
    ``--no-pyg``), a value with a flag of its own (``resume='auto'``) that flag (``--resume-or-start``); a message
    that names the option neither way gets the flag at its end (``... give its format (--format)``); one about an
    environment variable (``MGGCN_CPU_KERNELS``: upper case) stays as it is. A worker's
    error (:class:`~mggcn.distributed.launch.WorkerError`) is said so in its own words, ``reason``, which end the
    launcher's line (``rank 0 failed: NonFiniteLoss: ... lr=``)."""
    text = str(err)
    option = getattr(err, "option", None)
    if not isinstance(option, str) or not option or option.isupper():  # an environment variable has no flag
        return text
    reason = getattr(err, "reason", None)
    head = ""
    if isinstance(reason, str) and reason and text.endswith(reason):
        head, text = text[:-len(reason)], reason
    valued = any(value in text for value in VALUE_FLAGS)
    for value, value_flag in VALUE_FLAGS.items():
        text = text.replace(value, value_flag)
    starts = re.match(rf"{re.escape(option)}(?![\w=])", text) is not None
    named = starts or valued or _KEYWORD.search(text) is not None
    if starts:
        text = flag(option) + text[len(option):]
    text = _KEYWORD.sub(_keyword_flag, text)
    return head + (text if named else f"{text} ({flag(option)})")


def out_of_memory_line(said: str) -> str:
    """What ran out of memory says, after ``error:`` or ``rank R ran``: the allocator's words (``said``, one line)
    and what sizes a job."""
    return f"out of memory ({said[:300]}); `mggcn plan` sizes a job before it runs"


def job_failure_status(err: WorkerError, command: str = "train") -> int:
    """The exit status of a job the launcher could not finish, its one line said on stderr: 130 for Ctrl-C or
    SIGTERM before the workers could stop by themselves, 2 for bad input a rank found in its rows, 1 for another
    failure. A rank 0 whose output went away (``| head``) is re-raised as ``BrokenPipeError``, which the command
    ends quietly. A non-finite loss is the job's, not a rank's (every rank has the all-reduced loss), and so is an
    output rank 0 could not write (it names the file): each is said as ``command`` says it in one process."""
    from mggcn.distributed.launch import JobInterrupted

    if isinstance(err, JobInterrupted):
        print(f"mggcn: interrupted: {err}", file=sys.stderr)
        return 130
    if err.kind == "broken_pipe":  # rank 0's reader went away (| head)
        raise BrokenPipeError from None
    if err.kind == "non_finite" and err.reason:
        print(f"mggcn {command}: error: {flag_message(ConfigError(err.reason, err.option))}", file=sys.stderr)
        return 1
    if err.kind == "output" and err.reason:  # rank 0's file, said as the command says it in one process
        print(f"mggcn {command}: error: {err.reason}", file=sys.stderr)
        return 1
    raised = err.message.removeprefix("failed: ")
    if raised != err.message and says_out_of_memory(raised.partition(":")[0], raised):  # a rank's allocation failed
        print(f"mggcn: rank {err.rank} ran {out_of_memory_line(raised)}", file=sys.stderr)
        return 1
    print(f"mggcn: {flag_message(err)}", file=sys.stderr)
    return 2 if err.kind == "bad_input" else 1
