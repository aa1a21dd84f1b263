"""Extension points at work: registered models, LR policies and stateful hooks."""

import glob
import json
import os

import pytest
import torch

from slowfast.checkpoint.load import load_checkpoint
from slowfast.engine import trainer as trainer_module
from slowfast.engine.loop import HookBase
from slowfast.models import build_model

from .test_training_runs import DEMO, _cfg, _opts


class ToyVideoNet(torch.nn.Module):
    """A model registered from outside the package: pooled pixels -> classes."""

    def __init__(self, cfg):
        super().__init__()
        self.fc = torch.nn.Linear(3, cfg.MODEL.NUM_CLASSES)

    def forward(self, inputs):
        return self.fc(inputs[0].mean(dim=(2, 3, 4)))


def halving(epoch, *, base_lr, max_epoch):
    """An LR policy registered from outside the package: halves every epoch."""
    return base_lr * 0.5 ** int(epoch)


def test_model_and_lr_policy_registered_from_outside_train_through_run_net(
    demo_data, tmp_path
):
    from slowfast.models import MODEL_REGISTRY
    from slowfast.solver import LR_POLICY_REGISTRY
    from tests.helpers.tool_utils import load_tool

    if "ToyVideoNet" not in MODEL_REGISTRY:
        MODEL_REGISTRY.register(ToyVideoNet)
    if "halving" not in LR_POLICY_REGISTRY:
        LR_POLICY_REGISTRY.register(halving)
    out = tmp_path / "toy"
    extra = [
        "MODEL.MODEL_NAME", "ToyVideoNet", "SOLVER.LR_POLICY", "halving",
        "SOLVER.BASE_LR", "0.4", "SOLVER.WARMUP_EPOCHS", "0.0",
        "SOLVER.MAX_EPOCH", "3", "TEST.ENABLE", "False", "BN.USE_PRECISE_STATS",
        "False", "TRAIN.BATCH_SIZE", "2", "SOLVER.STEPS", "[]",
    ]  # fmt: skip
    argv = ["--cfg", os.path.join(DEMO, "Kinetics_I3D_tiny.yaml")]
    argv += _opts(demo_data / "kinetics", out, extra)
    assert load_tool("run_net.py").main(argv) == 0
    stats = [
        json.loads(line) for line in (out / "json_stats.log").read_text().splitlines()
    ]
    lrs = [s["lr"] for s in stats if s["_type"] == "train_epoch"]
    assert lrs == [0.4, 0.2, 0.1]
    assert any(s["_type"] == "val_epoch" for s in stats)
    saved = torch.load(glob.glob(str(out / "checkpoints" / "*.pyth"))[-1])
    assert set(saved["model_state"]) == {"fc.weight", "fc.bias"}
    # It does not describe its width: on CPU it runs contiguous, where the
    # default config's ResNet (64 wide) runs channels-last.
    from slowfast.config import load_config
    from slowfast.models import describe_model
    from slowfast.models.memory_format import choose_channels_last

    cfg = load_config(opts=["MODEL.MODEL_NAME", "ToyVideoNet", "NUM_GPUS", "0"])
    assert not choose_channels_last(cfg, describe_model(cfg))
    resnet = load_config(opts=["NUM_GPUS", "0"])
    assert choose_channels_last(resnet, describe_model(resnet))  # its ResNet


class FixedShapeNet(ToyVideoNet):
    """A registered model that takes one clip shape only."""

    @classmethod
    def describe(cls, cfg):
        from slowfast.models import ModelInfo

        return ModelInfo(varying_shapes=False)


def test_multigrid_refuses_a_model_of_one_shape_before_any_work(tmp_path):
    from slowfast.models import MODEL_REGISTRY
    from slowfast.utils.distributed import RunContext

    if "FixedShapeNet" not in MODEL_REGISTRY:
        MODEL_REGISTRY.register(FixedShapeNet)
    cfg = _cfg(
        "Kinetics_I3D_tiny_multigrid.yaml",
        tmp_path,
        tmp_path / "out",
        ["MODEL.MODEL_NAME", "FixedShapeNet"],
    )
    with pytest.raises(ValueError, match="FixedShapeNet.*takes clips of one shape"):
        trainer_module.Trainer(cfg, RunContext())
    assert not (tmp_path / "out" / "config.yaml").exists()


class OwnNormNet(ToyVideoNet):
    """A registered model with an attribute of the name build_model adds."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.input_norm = torch.nn.Identity()


def test_build_model_refuses_a_model_with_its_own_input_norm(tmp_path):
    from slowfast.models import MODEL_REGISTRY

    if "OwnNormNet" not in MODEL_REGISTRY:
        MODEL_REGISTRY.register(OwnNormNet)
    cfg = _cfg(
        "Kinetics_I3D_tiny.yaml", tmp_path, tmp_path / "out",
        ["MODEL.MODEL_NAME", "OwnNormNet"],
    )  # fmt: skip
    with pytest.raises(ValueError, match="OwnNormNet has an attribute 'input_norm'"):
        build_model(cfg)


class _StepCounter(HookBase):
    """A hook with state: counts steps over the whole run."""

    def __init__(self):
        self.steps = 0

    def after_step(self, state):
        self.steps += 1

    def state_dict(self):
        return {"steps": self.steps}

    def load_state_dict(self, state):
        self.steps = state["steps"]


def test_hook_state_is_checkpointed_and_restored_on_resume(demo_data, tmp_path):
    from slowfast.utils.distributed import RunContext

    class CountingTrainer(trainer_module.Trainer):
        def build_hooks(self):
            self.counter = _StepCounter()
            return super().build_hooks() + [self.counter]

    out = tmp_path / "run"
    extra = ["SOLVER.MAX_EPOCH", "2", "SOLVER.STEPS", "[0]", "SOLVER.LRS", "[1]",
             "TRAIN.CHECKPOINT_PERIOD", "1", "TRAIN.EVAL_PERIOD", "10",
             "BN.USE_PRECISE_STATS", "False", "TRAIN.BATCH_SIZE", "2"]  # fmt: skip
    cfg = _cfg("Kinetics_I3D_tiny.yaml", demo_data / "kinetics", out, extra)
    whole = CountingTrainer(cfg, RunContext())
    whole.train()
    assert whole.counter.steps == 2 * whole._iters(0)
    first = load_checkpoint(str(out / "checkpoints/checkpoint_epoch_00001.pyth"),
                               build_model(cfg))  # fmt: skip
    assert first["hook_states"] == {"_StepCounter": {"steps": whole._iters(0)}}
    os.remove(out / "checkpoints" / "checkpoint_epoch_00002.pyth")  # killed here
    resumed = CountingTrainer(cfg, RunContext())
    assert resumed.start_epoch == 1
    resumed.train()
    assert resumed.counter.steps == whole.counter.steps
    lines = [json.loads(s) for s in (out / "json_stats.log").read_text().splitlines()]
    kinds = [line["_type"] for line in lines]
    at = kinds.index("resume")  # marks the replayed epoch's lines
    assert lines[at]["epoch"] == 1 and lines[at]["checkpoint"].endswith("00001.pyth")
    assert [line["epoch"] for line in lines[at:] if line["_type"] == "train_epoch"] == [
        "2/2"
    ]
