import os
import sys

import pytest
import torch

# The multi-process helpers below are imported by spawned workers by module name.
sys.path.insert(0, os.path.dirname(__file__))

from mggcn.utils.system import start_vector_math  # noqa: E402

# the references a test computes in this process (PyG's models, torch's losses) call MKL's vector math too, and
# can meet the race a rank's start avoids (mggcn.utils.system.start_vector_math) before any rank has started
start_vector_math()
torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
