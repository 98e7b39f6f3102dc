"""torch.distributed as the datasets ask it: a process group is "initialized"
when SHOAL_STUB_RANK and SHOAL_STUB_WORLD are set (as torchrun sets RANK and
WORLD_SIZE) and ``init_process_group`` was called in this process."""

import os

_group = None


def is_available():
    return True


def init_process_group(backend="gloo"):
    global _group
    _group = (int(os.environ["SHOAL_STUB_RANK"]), int(os.environ["SHOAL_STUB_WORLD"]))


def is_initialized():
    return _group is not None


def get_rank():
    return _group[0]


def get_world_size():
    return _group[1]
