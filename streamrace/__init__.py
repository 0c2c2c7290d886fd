"""streamrace: cross-stream races and graph-pool aliasing inside captured CUDA graphs."""

__version__ = "0.1.0"
