"""shoal from Python, without a mount: ``shoal://`` for fsspec (``shoal.fs``)
and PyTorch datasets (``shoal.datasets``), over the cluster reader of the
``shoal`` library (``shoal._shoal``)."""

from ._shoal import Client, Reader, Stream, __version__
from .fs import ShoalFileSystem

__all__ = ["Client", "Reader", "Stream", "ShoalFileSystem", "__version__"]
