"""Tests of the run-time set-up: autocast (TRAIN.MIXED_PRECISION), RNG states."""

import logging

import pytest
import torch

from slowfast.config import load_config
from slowfast.engine import precision
from slowfast.utils import rng

CPU = torch.device("cpu")


def _autocast(mixed: bool):
    return precision.autocast_factory(
        load_config([], ["TRAIN.MIXED_PRECISION", mixed]), CPU
    )


def test_mixed_precision_is_bf16_autocast_on_cpu():
    with _autocast(False)():
        assert not torch.is_autocast_enabled("cpu")
    with _autocast(True)():
        assert torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16


@pytest.mark.parametrize("has_bf16", [True, False, None])
def test_bf16_on_a_cpu_without_bf16_kernels_warns(has_bf16, monkeypatch, caplog):
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: has_bf16)
    with caplog.at_level(logging.WARNING, logger=precision.__name__):
        _autocast(True)
        _autocast(False)
    warnings = [r.getMessage() for r in caplog.records]
    if has_bf16 is False:  # one warning, for the run with mixed precision
        assert len(warnings) == 1
        assert "set TRAIN.MIXED_PRECISION False" in warnings[0]
        assert torch.backends.cpu.get_cpu_capability() in warnings[0]
    else:
        assert warnings == []


def test_mixed_precision_dtype_key(monkeypatch):
    def dtype(device, *opts):
        cfg = load_config([], ["TRAIN.MIXED_PRECISION", True, *opts])
        return precision.mixed_precision_dtype(cfg, device), cfg

    assert dtype(CPU)[0] == torch.bfloat16
    assert precision.make_grad_scaler(dtype(CPU)[1], CPU) is None
    assert precision.mixed_precision_dtype(load_config([], []), CPU) is None
    gpu = torch.device("cuda", 0)
    for supported, expected in ((True, torch.bfloat16), (False, torch.float16)):
        monkeypatch.setattr(
            torch.cuda,
            "is_bf16_supported",
            lambda **_: supported,  # noqa: B023
        )
        assert dtype(gpu)[0] == expected  # auto: bf16 where the GPU has it
    assert dtype(gpu, "TRAIN.MIXED_PRECISION_DTYPE", "bf16")[0] == torch.bfloat16
    opts = ("NUM_GPUS", 1, "TRAIN.MIXED_PRECISION_DTYPE", "fp16")
    assert dtype(gpu, *opts)[0] == torch.float16
    with pytest.raises(
        ValueError, match="TRAIN.MIXED_PRECISION_DTYPE.*fp16 needs a GPU"
    ):
        load_config([], ["TRAIN.MIXED_PRECISION", True, "NUM_GPUS", 0, *opts[2:]])


def test_cpu_has_bf16_answers_for_this_cpu():
    assert precision.cpu_has_bf16() in (True, False)


def test_cuda_rng_state_is_this_process_gpus_whatever_the_gpus_seen(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda: torch.full((4,), 7))
    state = rng.get_rng_state()
    assert state["cuda"].tolist() == [7] * 4  # one GPU's, not every visible one's
    restored = []
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda s: restored.append(s))
    rng.set_rng_state(state)
    assert [s.tolist() for s in restored] == [[7] * 4]
