"""The models' performance kernels: what makes a layer fast, not what it is.

Sub-batch BN's fused path (``split_bn``, its Triton kernels in
``split_bn_triton``) and the convolution variants the blocks use
(``time_trimmed_conv``: temporal taps that only see padding skipped;
``small_map_conv``: the weight gradient batch-reduced on small maps).
"""
