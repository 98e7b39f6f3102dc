"""A stand-in for torch (torch itself is gigabytes): the parts the datasets use."""
