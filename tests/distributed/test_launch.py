from __future__ import annotations

import multiprocessing as mp
import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

import mggcn
import workers
from mggcn.distributed.launch import WorkerError, run_workers


def test_results_come_back_in_rank_order():
    results = run_workers(workers.ok_worker, 3, (10,), timeout_s=120)
    # all_reduce of 10 + rank over ranks 0..2
    assert [r[0] for r in results] == [33.0, 33.0, 33.0]
    assert all(list(r[1]) == [0, 1, 2] for r in results)


@pytest.mark.parametrize("mode, expected", [("raise", "failed: RuntimeError: boom from the test"),
                                            ("kill", "was killed by signal SIGKILL"),
                                            ("no memory", "failed: MemoryError: out of memory (too little left")])
def test_a_failing_rank_fails_the_job_and_is_named(mode, expected):
    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        run_workers(workers.failing_worker, 3, (1, mode), timeout_s=120)
    assert info.value.rank == 1
    assert str(info.value).startswith("rank 1 ")
    assert expected in str(info.value)
    assert time.monotonic() - start < 60  # the other ranks were stopped, not left waiting for the timeout
    assert mp.active_children() == []


def test_a_ranks_bad_setting_is_named_by_its_flag_on_the_command_line(capsys):
    """The setting a worker's error concerns travels with it: the launcher's line names the flag, as the same error
    raised in the command's own process would, and exits 2 (bad input)."""
    from mggcn.tools.cli.common import job_failure_status

    with pytest.raises(WorkerError) as info:
        run_workers(workers.failing_worker, 2, (1, "setting"), timeout_s=120)
    err = info.value
    assert (err.rank, err.kind, err.option) == (1, "bad_input", "hidden")
    assert str(err) == ("rank 1 failed: ConfigError: hidden sizes must be positive, got 0 (or leave hidden= out)")
    assert job_failure_status(err) == 2
    assert capsys.readouterr().err == ("mggcn: rank 1 failed: ConfigError: --hidden sizes must be positive, got 0 "
                                       "(or leave --hidden out)\n")


@pytest.mark.parametrize("mode, kind", [("pipe", "broken_pipe"), ("pipe text", "error"), ("raise", "error")])
def test_what_ended_a_rank_is_told_by_its_exception_type_not_its_text(mode, kind):
    """`| head` closing rank 0's output ends the command quietly (mggcn.tools.cli.common.job_failure_status): the
    launcher knows it from the exception's type, so an error whose text merely starts the same way is an error."""
    from mggcn.tools.cli.common import job_failure_status

    with pytest.raises(WorkerError) as info:
        run_workers(workers.failing_worker, 2, (1, mode), timeout_s=120)
    assert info.value.rank == 1 and info.value.kind == kind
    if kind == "broken_pipe":
        with pytest.raises(BrokenPipeError):
            job_failure_status(info.value)
    else:
        assert job_failure_status(info.value) == 1


@pytest.mark.slow
def test_a_hanging_rank_is_stopped_at_the_timeout():
    with pytest.raises(WorkerError) as info:
        run_workers(workers.failing_worker, 2, (1, "hang"), timeout_s=15)
    assert "did not finish within 15 s" in str(info.value)
    assert "1" in str(info.value).split("still running")[1]
    assert mp.active_children() == []


@pytest.mark.parametrize("nprocs, bad_rank", [(2, 1), (3, 2)])
def test_a_rank_that_stopped_responding_is_named_not_the_peers_that_gave_up_on_it(nprocs, bad_rank):
    """A rank stopped (SIGSTOP) or hung inside the job: its peers' collectives time out, and it is still running
    when they have ended. It is the one named, as stopped responding, not the first peer that gave up on it."""
    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        run_workers(workers.stopping_worker, nprocs, (bad_rank, 3.0), timeout_s=120)
    assert info.value.rank == bad_rank, str(info.value)
    head = (f"rank {bad_rank} stopped responding (stopped, hung, or slower than the timeout_s= seconds a collective "
            f"may wait): the other ranks gave up on it; rank ")
    assert str(info.value).startswith(head), str(info.value)
    assert int(str(info.value)[len(head)]) in set(range(nprocs)) - {bad_rank}, str(info.value)  # its peer's words
    assert info.value.option == "timeout_s"
    assert time.monotonic() - start < 60  # the peers' 3 s, the launcher's settling, not the job's 120 s
    assert mp.active_children() == []


def test_a_rank_that_reported_its_error_but_is_slow_to_end_is_named_with_its_error():
    """A rank that wrote its own error report but is still running when its peers have ended (its teardown outlasts
    the launcher's settling) is named with that error, not as a rank that stopped responding."""
    with pytest.raises(WorkerError) as info:
        run_workers(workers.slow_teardown_worker, 2, (1, 3.0), timeout_s=120)
    assert info.value.rank == 1 and str(info.value) == "rank 1 failed: RuntimeError: the cause itself"
    assert mp.active_children() == []


@pytest.mark.parametrize("nprocs, bad_rank", [(2, 1), (3, 2)])
def test_the_failing_rank_is_reported_not_its_peers_lost_connection(nprocs, bad_rank):
    with pytest.raises(WorkerError) as info:
        run_workers(workers.late_reporting_worker, nprocs, (bad_rank, 1.5), timeout_s=120)
    assert info.value.rank == bad_rank, str(info.value)
    assert str(info.value).startswith(f"rank {bad_rank} failed: IndexError: index 7 is out of bounds")
    assert "\n" not in str(info.value) and "IndexError" in info.value.detail
    assert mp.active_children() == []


def test_workers_run_in_the_launchers_working_directory(tmp_path, monkeypatch):
    """A relative path a job is given (a dataset, --save-model) means what it means to the launcher: each worker
    runs in the launcher's working directory, whichever directory its fork server was started from."""
    monkeypatch.chdir(tmp_path)
    assert run_workers(workers.working_directory_worker, 2, (), timeout_s=120) == [str(tmp_path)] * 2
    assert os.getcwd() == str(tmp_path)


def test_stop_skips_processes_that_never_started():
    from mggcn.distributed.launch import _stop

    procs = [mp.get_context("spawn").Process(target=time.sleep, args=(0,)) for _ in range(2)]
    _stop(procs)  # a failed start leaves processes unstarted: nothing to join, no AssertionError
    assert all(p.pid is None for p in procs)


def _env(tmp_path):
    """The environment of a child that runs this checkout's mggcn, with its own temporary directory."""
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    src = os.path.dirname(os.path.dirname(mggcn.__file__))  # the mggcn this test imports
    return dict(os.environ, TMPDIR=str(tmp), PYTHONUNBUFFERED="1",
                PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])), tmp


def test_a_script_without_a_main_guard_gets_one_clear_error_and_leaves_nothing(tmp_path):
    env, tmp = _env(tmp_path)
    script = tmp_path / "snippet.py"
    script.write_text("import mggcn\n"
                      "run = mggcn.train('synthetic:n=300,features=8', nprocs=2, hidden=(8,), epochs=2, quiet=True)\n"
                      "print(run.history[-1]['test_acc'])\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env,
                         cwd=tmp_path)
    assert out.returncode != 0
    assert out.stderr.count('if __name__ == "__main__":') == 1, out.stderr
    assert out.stderr.count("Traceback") <= 1  # the script's own uncaught WorkerError, nothing from the workers
    assert "bootstrapping phase" not in out.stderr and "AssertionError" not in out.stderr
    assert os.listdir(tmp) == []  # no job directory left


@pytest.mark.parametrize("guarded", [False, True])
def test_a_script_piped_on_stdin_gets_one_clear_error_and_leaves_nothing(tmp_path, guarded):
    env, tmp = _env(tmp_path)
    call = "mggcn.train('synthetic:n=300,features=8', nprocs=2, hidden=(8,), epochs=2, quiet=True)"
    script = f"import mggcn\nif __name__ == '__main__':\n    {call}\n" if guarded else f"import mggcn\n{call}\n"
    out = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True, timeout=300, env=env,
                         cwd=tmp_path)
    assert out.returncode == 1
    assert out.stderr.count('if __name__ == "__main__":') == 1 and "read from <stdin>" in out.stderr, out.stderr
    assert out.stderr.count("Traceback") == 1  # the script's own uncaught ConfigError, nothing from a worker
    assert "forkserver" not in out.stderr and "FileNotFoundError" not in out.stderr
    assert os.listdir(tmp) == []


def test_a_killed_launcher_leaves_no_worker_and_no_job_directory(tmp_path):
    env, tmp = _env(tmp_path)
    metrics = tmp_path / "m.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "mggcn", "train", "synthetic:n=2000,features=8", "--nprocs", "2",
                             "--epochs", "100000", "--quiet", "--trace-epoch", "0", "--metrics", str(metrics)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 180
        while not (metrics.exists() and metrics.read_text().count("\n") >= 2):
            assert proc.poll() is None and time.monotonic() < deadline, "training did not start"
            time.sleep(0.2)
        assert [d for d in os.listdir(tmp) if d.startswith("mggcn-job-")]  # the job's directory, while it runs
        family = psutil.Process(proc.pid).children(recursive=True)
        proc.kill()
        proc.wait(30)
        gone, alive = psutil.wait_procs(family, timeout=30)
        assert alive == []
        deadline = time.monotonic() + 30
        while os.listdir(tmp) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert os.listdir(tmp) == []  # neither the job's directory nor multiprocessing's (pymp-*)
    finally:
        if proc.poll() is None:
            proc.kill()


def _free_port() -> int:

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun_nodes(tmp_path, env, *train_args, node_env=({}, {}), master_addr="127.0.0.1", cwds=(None, None),
                    node_args=((), ())):
    """Two torchrun "nodes" of one process each on this host (node 0 holds the rendezvous store), in the working
    directories ``cwds`` (each node's own files; None: this process's), each given ``node_args`` after
    ``train_args``."""
    port = _free_port()
    nodes = []
    for i in range(2):
        log = open(tmp_path / f"node{i}.log", "w")
        nodes.append(subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(i),
             "--nproc-per-node", "1", "--master-addr", master_addr, "--master-port", str(port),
             "-m", "mggcn", "train", *train_args, *node_args[i]], stdout=log, stderr=subprocess.STDOUT,
            env={**env, **node_env[i]}, cwd=cwds[i]))
        log.close()
    return nodes


def _signal_group(proc, sig, ready, timeout: float) -> tuple[str, str, list]:
    """``ready()`` (it returns at the moment to signal), then ``sig`` to the process group of ``proc`` (started with
    ``start_new_session``): its output, and the processes it had when signalled. Whatever still runs at the end, a
    failed wait included, is killed with its group."""
    try:
        ready()
        family = psutil.Process(proc.pid).children(recursive=True)
        os.killpg(proc.pid, sig)
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return out, err, family


def _node_results(tmp_path, nodes, timeout: float = 240) -> tuple[list[int], list[str]]:
    """The exit statuses of :func:`_torchrun_nodes`' nodes (killed if still running after ``timeout``) and their
    logs."""
    try:
        codes = [n.wait(timeout) for n in nodes]
    finally:
        for n in nodes:
            if n.poll() is None:
                n.kill()
    return codes, [(tmp_path / f"node{i}.log").read_text() for i in range(len(nodes))]


def test_killing_one_torchrun_agent_ends_both_nodes_and_leaves_no_process(tmp_path):
    env, _ = _env(tmp_path)
    metrics = tmp_path / "m.jsonl"
    nodes = _torchrun_nodes(tmp_path, env, "synthetic:n=2000,features=8", "--epochs", "100000", "--quiet",
                            "--trace-epoch", "0", "--timeout", "30", "--metrics", str(metrics))
    family = []
    try:
        deadline = time.monotonic() + 240
        while not (metrics.exists() and metrics.read_text().count("\n") >= 2):
            assert all(n.poll() is None for n in nodes) and time.monotonic() < deadline, "training did not start"
            time.sleep(0.2)
        family = [c for n in nodes for c in psutil.Process(n.pid).children(recursive=True)]
        assert len(family) >= 2  # a worker under each agent
        nodes[1].kill()  # kill -9 of the agent that does not hold the store
        nodes[1].wait(30)
        # node 1's worker dies with its agent; node 0's worker loses its peer and fails, and so does its agent:
        # well within the collective timeout (30 s) plus the agent's own shutdown
        assert nodes[0].wait(150) != 0
        gone, alive = psutil.wait_procs(family, timeout=30)
        assert alive == [], [p.cmdline() for p in alive]
    finally:
        for p in nodes + [p for p in family if p.is_running()]:
            try:
                p.kill()
            except (psutil.NoSuchProcess, ProcessLookupError):
                pass


def test_a_lost_node_is_one_line_in_the_other_nodes_log(tmp_path):
    env, _ = _env(tmp_path)
    metrics = tmp_path / "m.jsonl"
    nodes = _torchrun_nodes(tmp_path, env, "synthetic:n=2000,features=8", "--epochs", "100000", "--quiet",
                            "--trace-epoch", "0", "--timeout", "30", "--metrics", str(metrics))
    try:
        deadline = time.monotonic() + 240
        while not (metrics.exists() and metrics.read_text().count("\n") >= 2):
            assert all(n.poll() is None for n in nodes) and time.monotonic() < deadline, "training did not start"
            time.sleep(0.2)
        nodes[1].kill()  # the node without the store is lost
        assert nodes[0].wait(150) != 0
    finally:
        for n in nodes:
            if n.poll() is None:
                n.kill()
    log = (tmp_path / "node0.log").read_text()
    ours = [line for line in log.splitlines() if line.startswith(("mggcn train", "mggcn:", "[rank"))]
    assert len(ours) == 1, log
    assert ours[0].startswith("mggcn train: error: rank 0 lost its connection to the other ranks"), log


def test_shm_on_across_nodes_that_do_not_share_it_is_one_line_from_rank_0(tmp_path):
    env, _ = _env(tmp_path)
    dirs = [tmp_path / "shm0", tmp_path / "shm1"]  # as two containers with private /dev/shm see it
    for d in dirs:
        d.mkdir()
    nodes = _torchrun_nodes(tmp_path, env, "synthetic:n=500,features=8", "--epochs", "3", "--quiet", "--shm", "on",
                            node_env=({"MGGCN_SHM_DIR": str(dirs[0])}, {"MGGCN_SHM_DIR": str(dirs[1])}))
    codes, logs = _node_results(tmp_path, nodes)
    assert codes == [1, 1]  # torchrun's status when a worker fails
    # the workers' own words: one line in each node's log (the rest of the logs is torchrun's report of a failed
    # worker; a worker's traceback would come as "[rankN]: ..." lines)
    for log in logs:
        ours = [line for line in log.splitlines() if line.startswith(("mggcn train", "mggcn:", "[rank"))]
        assert len(ours) == 1 and ours[0].startswith(f"mggcn train: error: rank 0: cannot open rank 1's outbox "
                                                     f"{dirs[0]}/mggcn-outbox-"), logs
    assert "exitcode  : 2" in logs[0] and "exitcode  : 2" in logs[1]
    assert os.listdir(dirs[0]) == [] and os.listdir(dirs[1]) == []


@pytest.mark.parametrize("name", ["t#h", "t?q", "t%41"])
def test_a_temporary_directory_that_is_no_plain_url_path_keeps_each_job_private(tmp_path, name):
    """The ranks meet at a file:// URL in the job's directory: torch cut its path at '#' or '?' (jobs under one
    such TMPDIR shared the file at the cut, or hung on one already there); the job's directory then goes in /tmp."""
    tmp = tmp_path / name
    tmp.mkdir()
    cut = tmp_path / "t"
    cut.write_text("precious\n")  # where the URL's path would end
    env = dict(os.environ, TMPDIR=str(tmp))
    done = subprocess.run([sys.executable, "-m", "mggcn", "train", "builtin:karate", "--nprocs", "2", "--threads", "1",
                           "--epochs", "2", "--quiet", "--timeout", "60"], capture_output=True, text=True, env=env,
                          timeout=180)
    assert done.returncode == 0, done.stderr
    assert cut.read_text() == "precious\n" and sorted(p.name for p in tmp_path.iterdir()) == sorted([name, "t"])


@pytest.mark.parametrize("module", ["mggcn", "inspect"])
def test_a_module_in_the_working_directory_does_not_replace_the_workers(tmp_path, module):
    """A user's mggcn.py (or a stdlib name, inspect.py) in the working directory was imported by the fork server,
    started with `python -c` (the working directory first on its path): --nprocs 2 died with a traceback."""
    command = os.path.join(os.path.dirname(sys.executable), "mggcn")  # the installed command: its own path first
    if not os.path.exists(command):
        pytest.skip("no mggcn command beside this interpreter")
    (tmp_path / f"{module}.py").write_text(f"raise SystemExit('the local {module}.py was imported')\n")
    done = subprocess.run([command, "train", "builtin:karate", "--nprocs", "2", "--threads", "1", "--epochs", "2",
                           "--quiet"], capture_output=True, text=True, cwd=tmp_path, timeout=180)
    assert done.returncode == 0 and "was imported" not in done.stderr + done.stdout, done.stderr


@pytest.mark.parametrize("second", ["SIGTERM", "SIGINT"])
def test_a_second_sigterm_while_the_workers_stop_is_ignored_a_second_ctrl_c_stops_at_once(tmp_path, monkeypatch,
                                                                                          second):
    """The launcher, asked to stop (its workers finish their epoch), is asked again: SIGTERM again (GNU timeout sends
    it to the child and then to its group) changes nothing, and the results come back; a second Ctrl-C stops now."""
    import pickle

    from mggcn.distributed import launch
    from mggcn.utils.system import Terminated

    class Ended:  # a worker that has already ended
        pid, sentinel = None, None

        def is_alive(self):
            return False

    stops = [Terminated(), Terminated() if second == "SIGTERM" else KeyboardInterrupt()]

    def wait_for_any(running, *args):
        if stops:
            raise stops.pop(0)
        running.clear()

    monkeypatch.setattr(launch, "_wait_for_any", wait_for_any)
    monkeypatch.setattr(launch, "_start", lambda procs: None)
    (tmp_path / "result.0").write_bytes(pickle.dumps("done"))
    if second == "SIGTERM":
        assert launch._run([Ended()], 1, str(tmp_path), None, None, 5.0, 1.0) == ["done"]
    else:
        with pytest.raises(KeyboardInterrupt):
            launch._run([Ended()], 1, str(tmp_path), None, None, 5.0, 1.0)


def test_nprocs_in_a_pool_worker_is_refused_in_one_line():
    """A daemonic process (a multiprocessing.Pool's worker) may not have children: nprocs 2 there is one line
    saying what to do, where multiprocessing raised an AssertionError from deep inside; nprocs 1 trains."""
    with mp.get_context("spawn").Pool(1) as pool:
        assert pool.apply(workers.train_in_a_pool_worker, (1,), ) == "trained"
        said = pool.apply(workers.train_in_a_pool_worker, (2,))
    assert said.startswith("ConfigError: nprocs > 1 starts worker processes, and this process is a daemonic one"), said


_CALLERS_GROUP = """import os, sys
import torch.distributed as dist
import torch.multiprocessing as mp
import mggcn


def work(rank, port, env):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    if env:
        os.environ.update(RANK=str(rank if env == "right" else 1 - rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                          LOCAL_WORLD_SIZE="2")
    try:
        run = mggcn.train("synthetic:n=301", hidden=4, epochs=3, quiet=True)
        said = f"{rank} losses {[r['loss'] for r in run.history]}"
    except ValueError as err:
        said = f"{rank} refused {err}"
    os.write(1, (said + "\\n").encode())  # one write: the two ranks' lines never interleave
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(work, args=(int(sys.argv[1]), sys.argv[2]), nprocs=2)
"""


@pytest.mark.parametrize("env", ["", "right", "swapped"])
def test_a_group_the_caller_made_is_the_jobs_or_refused(tmp_path, env):
    """Processes of a torch.distributed group made by the caller (mp.spawn, init_process_group): with torchrun's
    variables naming each one's place, the job runs across that group (P = 2's losses); without them each would
    train alone on the whole graph, and with other values the collectives would not match: one line each."""
    env_vars, _ = _env(tmp_path)
    script = tmp_path / "group.py"
    script.write_text(_CALLERS_GROUP)
    out = subprocess.run([sys.executable, str(script), str(_free_port()), env], capture_output=True, text=True,
                         timeout=300, env=env_vars, cwd=tmp_path)
    lines = sorted(line for line in out.stdout.splitlines() if line[:2] in ("0 ", "1 "))
    assert len(lines) == 2, out.stdout + out.stderr
    if env == "right":
        expected = [r["loss"] for r in mggcn.train("synthetic:n=301", hidden=4, epochs=3, quiet=True, nprocs=2).history]
        assert all(line.split(" ", 2)[2] == str(expected) for line in lines), (lines, expected)
    elif env == "swapped":
        assert lines[0].startswith("0 refused RANK=1 and WORLD_SIZE=2, but this process is rank 0 of a torch.")
    else:
        assert lines[0].startswith("0 refused this process is rank 0 of a torch.distributed group of 2 made before "
                                   "the job, and RANK and WORLD_SIZE are not set: each process would run the job alone")


def test_a_killed_bench_leaves_no_copy_of_its_graphs(tmp_path):
    """The bench writes its graphs' copies (SAINT's files, the prepared directory) in a directory of its own under
    TMPDIR: a bench killed with SIGKILL left it there, one per kill. The watcher removes it as it removes a job's."""
    env, tmp = _env(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "mggcn", "bench", "--small", "--saint-graph", "--nprocs", "1",
                             "--no-pyg", "--epochs", "200"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 180
        while not any(os.path.isdir(os.path.join(tmp, d, "prepared")) for d in os.listdir(tmp)
                      if d.startswith("mggcn-bench-")):
            assert proc.poll() is None and time.monotonic() < deadline, "the bench did not write its graphs"
            time.sleep(0.1)
        proc.kill()
        proc.wait(30)
        deadline = time.monotonic() + 30
        while [d for d in os.listdir(tmp) if d.startswith("mggcn-bench-")] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [d for d in os.listdir(tmp) if d.startswith("mggcn-bench-")] == []
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_killed_launcher_leaves_no_worker_where_there_is_no_pidfd(tmp_path):
    """As test_a_killed_launcher_leaves_no_worker_and_no_job_directory, on a system without pidfd_open (a kernel
    before 5.3, a seccomp policy): the workers cannot watch the launcher, and only their letting go of the fork
    server's pipe (let_go_of_the_fork_server) lets the killed launcher's server, and then them, end."""
    import psutil

    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text("import os\nif hasattr(os, 'pidfd_open'):\n    del os.pidfd_open\n")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    src = os.path.dirname(os.path.dirname(__import__("mggcn").__file__))
    env = dict(os.environ, TMPDIR=str(tmp),
               PYTHONPATH=os.pathsep.join([str(hook), src, os.environ.get("PYTHONPATH", "")]))
    metrics = tmp_path / "m.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "mggcn", "train", "synthetic:n=2000,features=8", "--nprocs", "2",
                             "--epochs", "100000", "--quiet", "--metrics", str(metrics)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    family = []
    try:
        deadline = time.monotonic() + 180
        while not (metrics.exists() and metrics.read_text().count("\n") >= 2):
            assert proc.poll() is None and time.monotonic() < deadline, "training did not start"
            time.sleep(0.2)
        family = psutil.Process(proc.pid).children(recursive=True)
        proc.kill()
        proc.wait(30)
        _, alive = psutil.wait_procs(family, timeout=30)
        assert alive == []
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in family:
            try:
                p.kill()
            except psutil.Error:
                pass
