"""The host allocator policy of mggcn's ranks (mggcn.distributed.context.set_mmap_threshold), in fresh processes."""

import workers
from mggcn.config import MMAP_THRESHOLD
from mggcn.distributed.launch import run_workers


def test_a_fixed_mmap_threshold_returns_freed_tensors_to_the_system():
    # glibc's dynamic threshold rises to 8 MiB when the first 8 MiB block is freed: the second one then comes from
    # the heap and stays resident after it is freed; with the threshold fixed at 1 MiB it goes back at once
    kept = run_workers(workers.freed_rss_worker, 1, (None, 8 << 20), timeout_s=120)[0]
    returned = run_workers(workers.freed_rss_worker, 1, (MMAP_THRESHOLD, 8 << 20), timeout_s=120)[0]
    assert kept >= 7 << 20, kept
    assert returned <= 1 << 20, returned
