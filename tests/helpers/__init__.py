"""Helpers shared by the tests: generated videos, tools, checkpoints, renditions."""
