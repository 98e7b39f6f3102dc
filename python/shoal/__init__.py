"""shoal from Python, without a mount: ``shoal://`` for fsspec (``shoal.fs``)
and PyTorch datasets (``shoal.datasets``), over the cluster reader of the
``shoal`` library (``shoal._shoal``)."""

import os

from ._shoal import Client, Reader, Stream, __version__, before_fork
from .fs import ShoalFileSystem

# No runtime thread may run while the process forks (a DataLoader's workers
# start so): each stops first, and the next read builds a new one.
os.register_at_fork(before=before_fork)

__all__ = ["Client", "Reader", "Stream", "ShoalFileSystem", "__version__"]
