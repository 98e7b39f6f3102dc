"""torch.utils.data as the datasets use it, and a DataLoader that drives them
as torch's does: ``num_workers`` processes started by the context asked for
(fork, spawn or forkserver), each with its own ``get_worker_info()`` (set in
the worker before it touches the dataset, as torch sets it); a map dataset's
batches of indexes dealt to the workers in turn and read with
``__getitems__`` when the dataset has it; an iterable dataset iterated whole
in each worker, its samples batched there. A worker's batches come back in
the order asked."""

import multiprocessing
import os
import queue


class Dataset:
    pass


class IterableDataset(Dataset):
    pass


class WorkerInfo:
    def __init__(self, id, num_workers, seed, dataset):
        self.id, self.num_workers, self.seed, self.dataset = id, num_workers, seed, dataset


_worker_info = None


def get_worker_info():
    return _worker_info


def _map_worker(dataset, wid, workers, index_q, out_q):
    global _worker_info
    _worker_info = WorkerInfo(wid, workers, wid, dataset)
    while True:
        job = index_q.get()
        if job is None:
            return
        n, batch = job
        try:
            getitems = getattr(dataset, "__getitems__", None)
            data = getitems(batch) if getitems else [dataset[i] for i in batch]
            out_q.put((n, wid, os.getpid(), data, None))
        except Exception as e:  # passed to the parent, as torch does
            out_q.put((n, wid, os.getpid(), None, repr(e)))


def _iter_worker(dataset, wid, workers, batch_size, out_q):
    global _worker_info
    _worker_info = WorkerInfo(wid, workers, wid, dataset)
    batch = []
    try:
        for s in dataset:
            batch.append(s)
            if len(batch) == batch_size:
                out_q.put((wid, os.getpid(), batch, None))
                batch = []
        if batch:
            out_q.put((wid, os.getpid(), batch, None))
    except Exception as e:
        out_q.put((wid, os.getpid(), None, repr(e)))
    out_q.put((wid, os.getpid(), None, "done"))


class DataLoader:
    """Yields ``(worker id, worker pid, batch)``: what torch's yields (the
    batch), and who read it."""

    def __init__(self, dataset, batch_size=1, num_workers=1, multiprocessing_context="fork", order=None):
        self.dataset, self.batch_size, self.num_workers = dataset, batch_size, num_workers
        self.ctx = multiprocessing.get_context(multiprocessing_context)
        self.order = order

    def __iter__(self):
        out_q = self.ctx.Queue()
        if isinstance(self.dataset, IterableDataset):
            procs = [
                self.ctx.Process(target=_iter_worker, args=(self.dataset, w, self.num_workers, self.batch_size, out_q))
                for w in range(self.num_workers)
            ]
            for p in procs:
                p.start()
            done = 0
            try:
                while done < self.num_workers:
                    wid, pid, batch, err = out_q.get(timeout=300)
                    if err == "done":
                        done += 1
                    elif err:
                        raise RuntimeError(f"worker {wid}: {err}")
                    else:
                        yield wid, pid, batch
            finally:
                self._stop(procs)
            return
        order = list(self.order if self.order is not None else range(len(self.dataset)))
        batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        index_qs = [self.ctx.Queue() for _ in range(self.num_workers)]
        procs = [
            self.ctx.Process(target=_map_worker, args=(self.dataset, w, self.num_workers, index_qs[w], out_q))
            for w in range(self.num_workers)
        ]
        for p in procs:
            p.start()
        try:
            for n, b in enumerate(batches):
                index_qs[n % self.num_workers].put((n, b))
            got = {}
            for _ in batches:
                try:
                    n, wid, pid, data, err = out_q.get(timeout=300)
                except queue.Empty:
                    raise RuntimeError("a worker gave no batch in 300 s") from None
                if err:
                    raise RuntimeError(f"worker {wid}: {err}")
                got[n] = (wid, pid, data)
            for n in range(len(batches)):
                yield got[n]
        finally:
            for q in index_qs:
                q.put(None)
            self._stop(procs)

    @staticmethod
    def _stop(procs):
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
