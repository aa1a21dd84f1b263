"""Renditions: lower-resolution copies of each video for multigrid's coarse
shapes; their file names and scales (``files``) and choosing one to read
(``reader``)."""
