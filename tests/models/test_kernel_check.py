"""The split-BN kernels' check before first use, and the fall-back it decides.

Runs on CPU tensors through Triton's interpreter (conftest sets
TRITON_INTERPRET): the numerical check runs as on a GPU; a missing compiler
and a wrong kernel result are made on purpose.
"""

import json
import logging
import re

import pytest
import torch

from slowfast.config import load_config
from slowfast.engine.builders import check_split_kernels
from slowfast.models import norm
from slowfast.models.kernels import self_check, split_bn
from slowfast.models.norm import SubBatchNorm3d, set_bn_split_kernels

CPU = torch.device("cpu")


@pytest.fixture
def fresh(monkeypatch):
    """Kernels importable, layers sending CPU batches to them, no verdict kept."""
    pytest.importorskip("triton", reason="triton is a dev dependency (setup.py)")
    monkeypatch.setattr(norm, "fused_split_ok", lambda x: True)
    self_check.split_kernels_verdict.cache_clear()
    yield
    self_check.split_kernels_verdict.cache_clear()


def _layer_path(mode="auto", channels_last=False):
    layer = SubBatchNorm3d(3, num_splits=2).train()
    set_bn_split_kernels(layer, mode)
    x = torch.randn(4, 3, 2, 3, 3)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last_3d)
    return layer.forward_path(x)


@pytest.mark.parametrize("channels_last", [False, True])
def test_the_kernels_pass_their_check_and_are_used(fresh, channels_last, caplog):
    with caplog.at_level(logging.INFO):
        verdict = norm.check_split_kernels(CPU, torch.float32, channels_last)
    assert verdict.ok and verdict.reason == "", verdict
    assert _layer_path(channels_last=channels_last) == "triton"
    # Its cost is in the line (measured, not asserted: timings vary by machine).
    assert re.search(
        r"split-BN Triton kernels checked \(.*\) in \d+\.\d\d s", caplog.text
    )


def test_no_compiler_falls_back_with_one_line(fresh, monkeypatch, caplog):
    monkeypatch.delenv("TRITON_INTERPRET")  # as on a GPU: a launcher to build
    monkeypatch.setattr(self_check.shutil, "which", lambda name: None)
    with caplog.at_level(logging.WARNING):
        assert _layer_path() == "native"
        assert _layer_path() == "native"  # decided once per process
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(lines) == 1 and "no C compiler" in lines[0], lines
    assert "BN.SPLIT_KERNELS triton" in lines[0]


def test_a_wrong_kernel_result_falls_back(fresh, monkeypatch, caplog):
    real = split_bn.split_batch_norm

    def off_by_a_bit(x, *args, **kwargs):
        return real(x, *args, **kwargs) + 1e-2

    monkeypatch.setattr(norm, "split_batch_norm", off_by_a_bit)
    verdict = norm.check_split_kernels(CPU, torch.float32, False)
    assert not verdict.ok and "output differs from the native one" in verdict.reason
    assert _layer_path() == "native"
    assert "split-BN Triton kernels off" in caplog.text


def test_the_key_forces_either_path(fresh, monkeypatch):
    monkeypatch.setattr(norm, "compare_with_native", lambda *a: "broken on purpose")
    assert _layer_path("auto") == "native"
    assert _layer_path("triton") == "triton"  # unchecked
    assert _layer_path("native") == "native"
    with pytest.raises(ValueError, match="split kernels"):
        set_bn_split_kernels(SubBatchNorm3d(3), "fast")


def test_the_verdict_is_in_the_run_statistics(fresh, monkeypatch, tmp_path):
    monkeypatch.setattr(norm, "compare_with_native", lambda *a: "broken on purpose")
    cfg = load_config(
        opts=["TRAIN.MIXED_PRECISION", "True", "OUTPUT_DIR", str(tmp_path)]
    )
    verdict = check_split_kernels(cfg, CPU, channels_last=True, master=True)
    assert not verdict.ok
    lines = (tmp_path / "json_stats.log").read_text().splitlines()
    stats = [json.loads(line) for line in lines if '"kernel_check"' in line]
    assert stats and stats[-1]["split_bn"] == "native"
    assert stats[-1]["reason"] == "broken on purpose"
    assert stats[-1]["dtype"] == "bfloat16" and stats[-1]["channels_last"] is True
