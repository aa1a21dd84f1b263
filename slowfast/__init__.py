"""slowfast: video recognition (C2D, I3D, I3D-NL, Slow, SlowFast) with multigrid."""

__version__ = "0.1.0"
