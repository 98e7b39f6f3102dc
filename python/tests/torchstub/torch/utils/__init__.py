"""The stand-in's torch.utils."""
