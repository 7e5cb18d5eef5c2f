"""mggcn.utils.errors: which failures are out of memory (the command line's and the bench's one line)."""

import pytest

from mggcn.utils.errors import says_out_of_memory


@pytest.mark.parametrize("kind, message", [
    ("torch.AcceleratorError", "CUDA error: out of memory"),  # a worker's error names its type qualified
    ("builtins.RuntimeError", "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"),
    ("OSError", "[Errno 12] Cannot allocate memory"),  # the system's words, capitalised
    ("RuntimeError", "CUDA Out Of Memory"),
    ("torch.OutOfMemoryError", "CUDA out of memory. Tried to allocate 2.00 GiB"),
])
def test_an_allocation_that_failed_is_out_of_memory(kind, message):
    assert says_out_of_memory(kind, message)


@pytest.mark.parametrize("kind, message", [("ValueError", "out of memory"), ("RuntimeError", "shape mismatch")])
def test_other_errors_are_not_out_of_memory(kind, message):
    assert not says_out_of_memory(kind, message)
