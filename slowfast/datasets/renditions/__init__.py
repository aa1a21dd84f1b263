"""Renditions: lower-resolution copies of each video for multigrid's coarse
shapes; their names and scales (``layout``) and choosing one to read
(``reader``)."""
