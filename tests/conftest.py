import os
import sys

import pytest
import torch

# The multi-process helpers below are imported by spawned workers by module name.
sys.path.insert(0, os.path.dirname(__file__))

torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
