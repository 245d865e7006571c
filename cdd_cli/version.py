"""cdd's version, at the bottom layer: records, checkpoints and surrogates name it, and none of
them may import the package's `__init__` (which imports the whole API)."""

__version__ = "0.1.0"
