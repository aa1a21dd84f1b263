"""slowfast: video recognition (C2D, I3D, I3D-NL, Slow, SlowFast) with multigrid training."""

__version__ = "0.1.0"
