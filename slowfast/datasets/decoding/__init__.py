"""Decoding: videos (PyAV, ``decoder`` and the one-pass ``span_decoder``) and
JPEG frame folders (``frames``) into frames, with the optional frame cache."""
