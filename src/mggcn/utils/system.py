"""The one place that changes the process: the host allocator, the parent-death signal, torch's thread count,
how OpenMP's threads wait, warning filters, signal handlers.

A rank sets these for itself (:func:`enter_rank`, from :func:`mggcn.distributed.context.init_distributed`) and
they stay only in a process mggcn owns: a worker its launcher started, or the ``mggcn`` command itself
(:func:`own_process`). When a job runs in the caller's process (``mggcn.train(..., nprocs=1)`` in a notebook), it
runs inside :func:`caller_settings_kept`, which puts back the thread count and the warning filters on return; the
allocator is left as it was there: glibc cannot report its mmap threshold, so a threshold set could not be undone.
Signal handlers are installed for the length of a ``with`` block (:class:`StopOnSignal`, :func:`sigterm_as_interrupt`)
and restored after it; a model's forward leaves the caller's ``torch.inference_mode`` for its own length
(:func:`outside_inference_mode`).

Importing this module loads no torch.
"""

from __future__ import annotations

import os
import re
import select
import signal
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import Any, TypeVar

# MMAP_THRESHOLD: host allocations above this many bytes come from the system and go back to it when freed (glibc's
# M_MMAP_THRESHOLD). glibc's own threshold starts at 128 KiB and rises to the size of every large block freed, up to
# 32 MiB: after loading a graph, the tensors of an epoch then come from the heap, and what is freed stays there,
# resident, 20-40% above the live tensors. An epoch of mggcn allocates nothing large (the workspace), so a fixed
# threshold costs no page faults while training and keeps the memory what the plan says.
from mggcn.config import MMAP_THRESHOLD, MMAP_THRESHOLD_MAX
from mggcn.utils.errors import ConfigError
from mggcn.utils.parallel import configured_threads, set_threads
from mggcn.utils.streams import unwritable_characters_replaced

__all__ = ["SPARSE_WARNINGS", "StopOnSignal", "Terminated", "die_with_parent", "die_with_process",
           "caller_settings_kept", "enter_rank", "mmap_threshold", "own_process", "owns_process",
           "quiet_sparse_warnings", "set_mmap_threshold", "sigterm_as_interrupt", "sparse_warnings_silenced",
           "start_vector_math", "outside_inference_mode", "outside_autocast", "autocast_off", "eager_under_compile",
           "torch_threads", "trim_heap", "OPENMP_WAIT_ENV", "OPENMP_WAIT", "openmp_waits_passively",
           "children_wait_passively", "working_directory_not_imported", "hold_signals", "signals_end_process",
           "native_log_held", "job_defaults", "float32_default", "cpu_default_device", "note_stop_signal",
           "stop_signal_passed_on"]

# torch warns on every sparse CSR construction that the layout is beta; it is the layout MG-GCN is built on.
SPARSE_WARNINGS = ("Sparse CSR tensor support is in beta state", "Sparse invariant checks are implicitly disabled")

_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
_PR_SET_PDEATHSIG = 1


class _State:
    owned = False  # this process belongs to mggcn: a launched worker, or the mggcn command
    mmap_threshold: int | None = None  # what this module set (None: glibc's own, dynamic threshold)
    libc: Any = None  # the C library, once trim_heap loaded it (False: not glibc)
    vector_math = False  # start_vector_math ran in this process
    stop_signal: int | None = None  # the first signal that asked the running job to stop (note_stop_signal)


# How OpenMP's threads wait between parallel regions (torch's CPU ops split their work among them). By default they
# spin for a while first, taking the cycles of their core: beside another process on that core, the one that spins
# is then held back when the next op needs it, and every op of the epoch waits a scheduler slice for it. Sleeping
# keeps its turn for the moment work comes. OpenMP reads the setting once, when torch loads.
OPENMP_WAIT_ENV = "OMP_WAIT_POLICY"
OPENMP_WAIT = "PASSIVE"


def openmp_waits_passively() -> bool:
    """Set :data:`OPENMP_WAIT_ENV` to :data:`OPENMP_WAIT` unless it is set: this process's OpenMP threads wait
    asleep where torch is not loaded yet, and so do those of the processes it starts. Whether it was set here."""
    if OPENMP_WAIT_ENV in os.environ:
        return False
    os.environ[OPENMP_WAIT_ENV] = OPENMP_WAIT
    return True


@contextmanager
def children_wait_passively() -> Iterator[None]:
    """For the ``with`` block, processes started from this one get :func:`openmp_waits_passively` (unless the
    environment says otherwise); this process's environment is as it was after the block."""
    added = openmp_waits_passively()
    try:
        yield
    finally:
        if added:
            os.environ.pop(OPENMP_WAIT_ENV, None)


@contextmanager
def working_directory_not_imported(server: bool = False) -> Iterator[None]:
    """For the ``with`` block, the Python processes started from this one (multiprocessing's fork server, resource
    tracker, spawned workers: ``python -c ...``) leave the working directory off the front of their ``sys.path``
    (``PYTHONSAFEPATH``, Python 3.11): a user's ``mggcn.py``, ``inspect.py`` or ``logging.py`` there would be
    imported in place of the module of that name, and the server die before it serves. (A fork server of Python
    3.12.8, 3.13.1 and later sets the launcher's own ``sys.path`` once it runs, as the launcher imported with it.)
    The workers take the launcher's environment, without it.

    Python 3.10 has no ``PYTHONSAFEPATH``: there a ``server`` (the fork server, the resource tracker: processes
    that run no job themselves) starts from the standard library's directory instead, the process's working
    directory changed for the moment of the fork and exec. Not a worker: multiprocessing gives it the working
    directory its launcher had when it started it."""
    added = "PYTHONSAFEPATH" not in os.environ
    if added:
        os.environ["PYTHONSAFEPATH"] = "1"
    here = _working_directory() if server and sys.version_info < (3, 11) else None
    if here is not None:
        os.chdir(os.path.dirname(os.__file__))
    try:
        yield
    finally:
        if added:
            os.environ.pop("PYTHONSAFEPATH", None)
        if here is not None:
            os.chdir(here)


def _working_directory() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # removed under this process: it holds no module to import either
        return None


# A line of c10's own log (``[E1206 16:50:04.763 socket.cpp:1028] ...``) or of the C++ stack it prints after one.
_NATIVE_LOG = re.compile(rb"^(\[[EWIF]\d{4} [^\]]*\]|frame #\d+:|Exception raised from |<omitting python frames>|$)")


@contextmanager
def native_log_held() -> Iterator[None]:
    """For the ``with`` block, what is written to the standard error descriptor (C++ code's log included) is held
    back, and given back when it ends: all of it when the block succeeds; when it raises, without c10's log lines and
    their C++ stacks, which say in forty lines what the error raised says in one (a rendezvous that cannot be reached
    logs each failed try with its stack)."""
    held = saved = None
    if sys.stderr is not None:  # None: started without it (2>&-), and descriptor 2 may be another file by now
        try:
            sys.stderr.flush()
            held = tempfile.TemporaryFile()
            saved = os.dup(2)
        except (OSError, ValueError):  # no standard error to hold, or no file to hold it in
            if held is not None:
                held.close()
            held = None
    if held is None or saved is None:
        yield
        return
    with held:
        os.dup2(held.fileno(), 2)
        failed = True
        try:
            yield
            failed = False
        finally:
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            text = held.read()
            if failed:
                text = b"".join(line for line in text.splitlines(keepends=True) if not _NATIVE_LOG.match(line))
            _write_all(2, text)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
    except OSError:  # standard error closed or full: the block's own outcome matters more than its log
        pass


def own_process() -> None:
    """Declare this process mggcn's own (a worker the launcher started, the ``mggcn`` command): the settings of
    :func:`enter_rank` then stay, and OpenMP's threads wait asleep (:func:`openmp_waits_passively`; the command
    declares itself before it loads torch)."""
    _State.owned = True
    openmp_waits_passively()


def owns_process() -> bool:
    return _State.owned


def die_with_parent() -> None:
    """Linux: have the kernel kill this process when its parent dies (even by SIGKILL), so that no worker is left
    orphaned: mggcn's launcher, or torchrun's agent, whose workers would otherwise train on alone, and their peers
    on other nodes never notice. Elsewhere a no-op."""
    try:
        import ctypes

        if ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
            return
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before the request: it will never fire
        os.kill(os.getpid(), signal.SIGKILL)


def die_with_process(pid: int) -> None:
    """Linux: end this process at once (SIGKILL) when process ``pid`` ends, however it ends: a worker forked by the
    fork server dies with the launcher itself, not only once the fork server it hangs from has noticed and ended
    (which takes that server's own exit, while the worker trains on). A thread waits on a pidfd of ``pid``; where
    there is none (not Linux, a kernel before 5.3) nothing is watched."""
    try:
        watched = os.pidfd_open(pid)
    except ProcessLookupError:  # gone already
        os.kill(os.getpid(), signal.SIGKILL)
        return
    except (AttributeError, OSError):
        return

    def watch() -> None:
        select.select([watched], [], [])  # readable once the process has ended
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="mggcn-watch-launcher", daemon=True).start()


def set_mmap_threshold(nbytes: int | None) -> bool:
    """Fix glibc's ``M_MMAP_THRESHOLD`` at ``nbytes`` (see :data:`MMAP_THRESHOLD`); ``None`` or 0 leaves glibc's
    dynamic threshold. False where the C library is not glibc.

    Raises:
        ConfigError: ``nbytes`` above :data:`~mggcn.config.MMAP_THRESHOLD_MAX` (mallopt's ``int`` would take
            another value, or glibc none at all); the job's check refuses it before any rank starts.
    """
    if not nbytes:
        return False
    if nbytes > MMAP_THRESHOLD_MAX:
        raise ConfigError(f"mmap_threshold must be at most {MMAP_THRESHOLD_MAX} (bytes, glibc's largest), got "
                          f"{nbytes!r}", "mmap_threshold")
    try:
        import ctypes

        done = bool(ctypes.CDLL("libc.so.6").mallopt(_M_MMAP_THRESHOLD, int(nbytes)))
    except (OSError, AttributeError):
        return False
    if done:
        _State.mmap_threshold = int(nbytes)
    return done


def trim_heap() -> None:
    """Give the free pages of the heap back to the system (glibc's ``malloc_trim``), so that the holes a pass's
    temporaries leave between the arrays it keeps do not stay resident; a no-op where the C library is not glibc.
    Called between the chunks of the shard's setup (:mod:`mggcn.distributed.sharding`)."""
    if _State.libc is None:
        try:
            import ctypes

            _State.libc = ctypes.CDLL("libc.so.6")
        except OSError:
            _State.libc = False
    if _State.libc:
        try:
            _State.libc.malloc_trim(0)
        except AttributeError:
            _State.libc = False


def mmap_threshold() -> int | None:
    """The mmap threshold mggcn fixed in this process, or None where glibc's own (dynamic) one still rules."""
    return _State.mmap_threshold


def quiet_sparse_warnings() -> None:
    """Silence torch's :data:`SPARSE_WARNINGS` in this process."""
    for message in SPARSE_WARNINGS:
        warnings.filterwarnings("ignore", message=message)


@contextmanager
def sparse_warnings_silenced() -> Iterator[None]:
    """Silence torch's :data:`SPARSE_WARNINGS` in the ``with`` block only (the filters are restored after it)."""
    with warnings.catch_warnings():
        quiet_sparse_warnings()
        yield


def enter_rank(threads: int, mmap_threshold: int | None = MMAP_THRESHOLD) -> None:
    """Set what a rank runs with: ``threads`` torch threads, the sparse warnings silenced, the vector math library
    started on one thread (:func:`start_vector_math`), and, in a process mggcn owns, the allocator's
    ``mmap_threshold`` (None: glibc's)."""
    import torch

    if _State.owned:
        set_mmap_threshold(mmap_threshold)
    start_vector_math()
    torch.set_num_threads(threads)
    set_threads(threads)  # the data layer's thread pools (mggcn.utils.parallel) keep to the same cores
    quiet_sparse_warnings()


# torch's CPU exp, log, sqrt, ... of float tensors call MKL's vector math (VML) on each thread's share of the
# elements. A process's first call of a function from two threads at once can go wrong in one of them: measured
# with a second process on each core, one training run in about six began with an exp whose first thread's half of
# the elements was off by up to 1,769 units in the last place, so that epoch's loss and gradients changed in the
# sixth digit and two runs of one seed differed. Once a function has run, later calls from any number of threads
# agree with one thread's, bit for bit. The functions a model, loss or optimizer may call, in both float widths.
_VECTOR_MATH = ("exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "tanh", "sigmoid", "erf")


def start_vector_math() -> None:
    """Run each of :data:`_VECTOR_MATH` once on one thread (a few elements: below torch's grain, so the calling
    thread alone runs it), before any op can call it from several; the first call in a process does the work, later
    ones return at once."""
    if _State.vector_math:
        return
    import torch

    for dtype in (torch.float32, torch.float64):
        x = torch.linspace(0.5, 2.0, 256, dtype=dtype)
        for name in _VECTOR_MATH:
            getattr(torch, name)(x)
    _State.vector_math = True


@contextmanager
def caller_settings_kept() -> Iterator[None]:
    """In a process mggcn does not own, the thread count and the warning filters are put back as they were when the
    ``with`` block ends (the jobs run inside one); in a process it owns, nothing is put back. In either, the block
    runs as a job needs, whatever the caller's settings: with gradients (outside the caller's ``torch.no_grad`` or
    ``torch.inference_mode``), outside the caller's ``torch.autocast`` (the job's ``precision`` decides its dtypes)
    and with torch's defaults as mggcn makes its tensors (:func:`job_defaults`)."""
    import torch

    with job_defaults(), autocast_off(), torch.inference_mode(False), torch.enable_grad():
        if _State.owned:
            yield
            return
        threads, data_threads = torch.get_num_threads(), configured_threads()
        try:
            with warnings.catch_warnings():  # puts the filters back on exit
                yield
        finally:
            torch.set_num_threads(threads)
            set_threads(data_threads)


@contextmanager
def job_defaults() -> Iterator[None]:
    """In the ``with`` block torch's defaults are those mggcn makes its models and tensors with, whatever the caller
    set for its own: float32 as the default dtype (:func:`float32_default`), the CPU as the default device
    (:func:`cpu_default_device`); and mggcn's lines can be written whatever the streams' encoding
    (:func:`unwritable_characters_replaced`)."""
    with float32_default(), cpu_default_device(), unwritable_characters_replaced():
        yield


@contextmanager
def float32_default() -> Iterator[None]:
    """torch's default dtype is float32 in the ``with`` block, and the caller's again after it: mggcn's models and
    their inputs are float32 (or the dtype asked for) whatever ``torch.set_default_dtype`` the caller chose."""
    import torch

    dtype = torch.get_default_dtype()
    if dtype == torch.float32:
        yield
        return
    torch.set_default_dtype(torch.float32)
    try:
        yield
    finally:
        torch.set_default_dtype(dtype)


@contextmanager
def cpu_default_device() -> Iterator[None]:
    """torch's default device is the CPU in the ``with`` block, whatever device the caller made the default
    (``torch.set_default_device``, ``with torch.device(...)``): mggcn puts each tensor on its rank's device itself, and
    the tensors it makes without one (host buffers, indices it reads) belong on the host."""
    import torch

    if torch.empty(0).device.type == "cpu":  # nothing to undo, and no mode that every torch call would pass
        yield
        return
    with torch.device("cpu"):
        yield


@contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """torch uses ``threads`` threads in the ``with`` block, and as many as before after it."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


_Forward = TypeVar("_Forward", bound=Callable[..., Any])


def outside_inference_mode(forward: _Forward) -> _Forward:
    """``forward`` (a model's), called under ``torch.inference_mode``, runs outside it and without autograd
    (``torch.no_grad``), to the same values. What a forward makes and keeps for the next one (the workspace's
    buffers) must be an ordinary tensor: an inference tensor may never again be written outside inference mode, so
    the first training forward after it would fail, and the kernels' pool threads, which do not inherit the
    caller's inference mode, could not write it even then."""

    @wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Any:
        import torch

        if not torch.is_inference_mode_enabled():
            return forward(*args, **kwargs)
        with torch.inference_mode(False), torch.no_grad():
            return forward(*args, **kwargs)

    return run  # type: ignore[return-value]


def outside_autocast(forward: _Forward) -> _Forward:
    """``forward`` (a model's), called under ``torch.autocast``, runs without it, in the dtype of the model's weights
    and operator, as PyTorch's custom operators declared with ``torch.amp.custom_fwd(cast_inputs=...)`` do: the
    layers' autograd functions multiply the tensors they saved with each other in backward, which autocast would
    leave of two dtypes. A model in bfloat16 is one cast to it, with its operator (or ``precision="bf16"``)."""

    @wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Any:
        with autocast_off():
            return forward(*args, **kwargs)

    return run  # type: ignore[return-value]


@contextmanager
def autocast_off() -> Iterator[None]:
    """No ``torch.autocast`` in the ``with`` block, on the CPU or CUDA, whatever the caller's block around it."""
    import torch

    if not (torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda")):
        yield
        return
    with torch.autocast("cpu", enabled=False), torch.autocast("cuda", enabled=False):
        yield


def sparse_forward(forward: _Forward) -> _Forward:
    """A model's or a layer's ``forward``: outside ``torch.inference_mode`` (:func:`outside_inference_mode`: the
    workspace outlives the call, and the kernels' pool threads must write ordinary tensors), outside
    ``torch.autocast`` (:func:`outside_autocast`: the layers compute in their weights' dtype), eager under
    ``torch.compile`` (:func:`eager_under_compile`: workspace buffers and autograd functions over sparse tiles are
    more than dynamo traces soundly). A layer called by its model finds them off already."""
    return outside_inference_mode(outside_autocast(eager_under_compile(forward)))


def eager_under_compile(forward: _Forward) -> _Forward:
    """``forward`` (a model's) runs eagerly where ``torch.compile`` traces it, a graph break around it: what it runs
    (kernels over tiles of sparse CSR tensors, which have no strides) is more than the tracer follows. Outside a
    compiled frame it is called as it is (``torch.compiler.is_compiling`` imports nothing)."""

    @wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Any:
        import torch

        if torch.compiler.is_compiling():
            return torch.compiler.disable(forward)(*args, **kwargs)
        return forward(*args, **kwargs)

    return run  # type: ignore[return-value]


class StopOnSignal:
    """SIGINT/SIGTERM, for the length of the ``with`` block, only ask to stop (``requested``); a second SIGINT stops
    at once. The previous handlers come back on exit. Outside the main thread nothing is installed."""

    def __init__(self) -> None:
        self.requested = False
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: stop now
        self.requested = True
        note_stop_signal(signum)

    def __exit__(self, *exc) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def note_stop_signal(signum: int) -> None:
    """Record that ``signum`` asked the running job to stop (the first one counts), for
    :func:`stop_signal_passed_on`."""
    if _State.stop_signal is None:
        _State.stop_signal = signum


@contextmanager
def stop_signal_passed_on() -> Iterator[None]:
    """Around a job run for a caller (``mggcn.train``): a SIGTERM or Ctrl-C that stopped the job at an epoch's end
    (its checkpoint and outputs written) is passed on once the block returns, to the handler the caller had: a
    Python handler of the caller's is called, the default SIGTERM ends the process as it would have (by
    ``SystemExit(143)``, the status a shell shows for it, so that exit handlers run). Ctrl-C's
    default (KeyboardInterrupt) is not raised again: the job's result says it was interrupted. Nothing is passed on
    when the block raises, outside the main thread, or in a process mggcn owns (the command says it by its exit
    status)."""
    if _State.owned or threading.current_thread() is not threading.main_thread():
        yield
        return
    caller = {sig: signal.getsignal(sig) for sig in _STOPPING}
    _State.stop_signal = None
    yield
    sig, _State.stop_signal = _State.stop_signal, None
    if sig is None or caller[sig] in (signal.default_int_handler, signal.SIG_IGN, None):
        return
    if caller[sig] == signal.SIG_DFL:  # the end the signal would have brought, with the exit handlers run (the
        raise SystemExit(128 + sig)  # fork server's socket directory is removed by one), and its shell status
    signal.raise_signal(sig)


class Terminated(KeyboardInterrupt):
    """SIGTERM, under :func:`sigterm_as_interrupt`: a KeyboardInterrupt that says which signal it was."""


_STOPPING = {signal.SIGINT, signal.SIGTERM}


def hold_signals() -> None:
    """Ctrl-C and SIGTERM wait (blocked) until :func:`signals_end_process`: a command past its own handling of them."""
    if threading.current_thread() is threading.main_thread():
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOPPING)


def _exit_with(status: int) -> Callable[[int, Any], None]:
    """A signal handler that ends the process at once with ``status``."""
    return lambda signum, frame: os._exit(status)


def signals_end_process(status: int = 130) -> None:
    """From here on Ctrl-C or SIGTERM (one held by :func:`hold_signals` too) ends this process at once with
    ``status``: for a command that has done its work and written its outputs, so that a signal in its last moments
    (the interpreter's teardown) is no traceback and no death by the signal, but the status an interrupted command
    has."""
    if threading.current_thread() is threading.main_thread():
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOPPING)
        for sig in _STOPPING:
            signal.signal(sig, _exit_with(status))
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPPING)


@contextmanager
def sigterm_as_interrupt(sigint: bool = False, ending: int | None = None) -> Iterator[None]:
    """In the ``with`` block SIGTERM means what Ctrl-C means (raises :class:`Terminated`, a KeyboardInterrupt);
    restored after it. With ``sigint``, Ctrl-C too raises KeyboardInterrupt in the block, whatever handler the caller
    had (a launcher's workers stop at an epoch's end, and :func:`stop_signal_passed_on` calls the caller's handler
    once they have), unless the process ignores it (started in the background). With ``ending`` (a command's
    process), SIGTERM after the block ends the process with that status instead: its main thread holds the signals
    (:func:`hold_signals`), but another thread (OpenBLAS's) would take a SIGTERM under the default disposition
    and the process would die by it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        note_stop_signal(signum)
        raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt

    taken = [signal.SIGTERM] + ([signal.SIGINT] if sigint and signal.getsignal(signal.SIGINT) != signal.SIG_IGN
                                else [])
    previous = {sig: signal.signal(sig, handler) for sig in taken}
    if ending is not None:
        previous[signal.SIGTERM] = _exit_with(ending)
    try:
        yield
    finally:
        for sig, before in previous.items():
            signal.signal(sig, signal.SIG_DFL if before is None else before)  # None: set outside Python
