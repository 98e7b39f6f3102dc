"""Who reads which share of a dataset: this process's rank among ``world``
(given, else ``torch.distributed``'s when a process group is initialized,
else 0 of 1) and its DataLoader worker among the rank's workers
(``torch.utils.data.get_worker_info``, which torch sets in each worker)."""


def _torch(module):
    try:
        if module == "data":
            from torch.utils import data as m
        else:
            import torch.distributed as m
    except ImportError:
        return None
    return m


def distributed():
    """``(rank, world)`` of an initialized process group, else None."""
    dist = _torch("distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist.get_rank(), dist.get_world_size()


def worker():
    """``(this worker's id, how many there are)`` in a DataLoader, else ``(0, 1)``."""
    data = _torch("data")
    info = data.get_worker_info() if data is not None else None
    if info is None:
        return 0, 1
    return info.id, info.num_workers


class Ranks:
    """A dataset's rank and world: given, else asked of torch.distributed
    when needed (a dataset is often made before the process group). What the
    parent found travels with the dataset to workers started by spawn or
    forkserver, where no process group is initialized."""

    def __init__(self, rank=None, world=None):
        if (rank is None) != (world is None):
            raise ValueError("give rank and world together, or neither (torch.distributed's then)")
        if world is not None and not 0 <= rank < world:
            raise ValueError(f"rank {rank} is not one of {world}")
        self.given = None if world is None else (rank, world)
        self.carried = None

    def now(self):
        return self.given or distributed() or self.carried or (0, 1)

    def __getstate__(self):
        return {"given": self.given, "carried": self.now()}

    def __setstate__(self, state):
        self.given, self.carried = state["given"], state["carried"]

    def share(self, n, worker_of=None):
        """The indexes of ``range(n)`` this rank takes (every ``world``-th),
        and of those, every ``workers``-th from this DataLoader worker's
        (``worker_of`` if given, else torch's); ``worker_of=False``: the
        rank's whole share. So a rank's share is the same however many
        workers it has, and its length is the rank's ``__len__``."""
        rank, world = self.now()
        mine = range(rank, n, world)
        if worker_of is False:
            return mine
        w, workers = worker_of or worker()
        return mine[w::workers]
