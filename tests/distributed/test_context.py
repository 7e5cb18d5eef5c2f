"""The distributed context (mggcn.distributed.context): the host allocator policy of mggcn's ranks
(mggcn.utils.system.set_mmap_threshold) and their thread count, in fresh processes; waiting for a device."""

import workers
from mggcn.config import MMAP_THRESHOLD
from mggcn.distributed.launch import run_workers


def test_a_fixed_mmap_threshold_returns_freed_tensors_to_the_system():
    # glibc's dynamic threshold rises to 8 MiB when the first 8 MiB block is freed: the second one then comes from
    # the heap and stays resident after it is freed; with the threshold fixed at 1 MiB it goes back at once. (Kept:
    # at least half, not all 8 MiB: the block may reuse free heap pages that were resident already, 6.8 MiB kept
    # measured once in a fresh clone; returned stays at most 1 MiB.)
    kept = run_workers(workers.freed_rss_worker, 1, (None, 8 << 20), timeout_s=120)[0]
    returned = run_workers(workers.freed_rss_worker, 1, (MMAP_THRESHOLD, 8 << 20), timeout_s=120)[0]
    assert kept >= 4 << 20, kept
    assert returned <= 1 << 20, returned


def test_a_thread_count_above_the_cores_is_refused_before_torch_hears_of_it():
    """``threads=100000`` would make the next parallel region crash the process (SIGSEGV, libgomp failing to start
    the threads), even after fewer are set again: refused with one line, the thread count left as it was."""
    import pytest
    import torch

    from mggcn.distributed.context import available_cores, init_distributed

    before = torch.get_num_threads()
    for threads in (available_cores() + 1, 100000, 0):
        with pytest.raises(ValueError, match=f"threads {threads}: must be between 1 and"):
            init_distributed("cpu", threads=threads)
    assert torch.get_num_threads() == before
