"""Tests of tools/dev/benchmark_conv_grad.py: what it records and what it times."""

import math
import os

from slowfast.config import load_config
from tests.helpers.tool_utils import REPO_ROOT, load_tool

DEMO = os.path.join(REPO_ROOT, "configs", "Demo")
CFG = os.path.join(DEMO, "Kinetics_SLOWFAST_tiny_multigrid.yaml")


def test_records_the_convolutions_as_computed_at_every_shape():
    tool = load_tool("dev/benchmark_conv_grad.py")
    # Batch 2 and width 4 (res5: 128 channels in the slow pathway) stay cheap.
    opts = ["TRAIN.BATCH_SIZE", "2", "RESNET.WIDTH_PER_GROUP", "4"]
    convs = tool.record_convs(load_config([CFG], opts))
    clips = {conv[0][0] for conv in convs}
    assert clips == {2, 4, 8, 16}  # the base batch, 2x, 4x and 8x
    # res5's slow-pathway 3-tap kernel over 1 frame (long 1/4: 4 fast frames,
    # ALPHA 4) is recorded trimmed to its central tap, as TimeTrimmedConv3d
    # computes it; over the base shape's 4 frames in full.
    res5 = [c for c in convs if c[1][:2] == (128, 128) and c[1][3:] == (3, 3)]
    assert {(c[0][2], c[1][2]) for c in res5} >= {(1, 1), (4, 3)}
    assert all(c[5] == 1 for c in convs)


def test_times_both_weight_gradients_where_the_batch_reduction_applies():
    tool = load_tool("dev/benchmark_conv_grad.py")
    small = ((4, 8, 2, 2, 2), (8, 8, 3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), 1)
    strided = ((4, 8, 2, 4, 4), (8, 8, 1, 3, 3), (1, 2, 2), (0, 1, 1), (1, 1, 1), 1)
    assert tool._eligible(small) and not tool._eligible(strided)
    assert tool._positions(small) == 8 and tool._positions(strided) == 8
    onednn, reduced = tool.time_conv(small, repeats=1, batch_reduced=True)
    assert onednn > 0 and reduced > 0
    onednn, reduced = tool.time_conv(strided, repeats=1, batch_reduced=False)
    assert onednn > 0 and math.isnan(reduced)
