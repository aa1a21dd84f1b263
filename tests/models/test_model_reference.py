"""Full-size models against the reference: params, state-dict keys, FLOPs.

The reference's numbers and state-dict key lists are facts kept in this
repository (``tests/data/reference``, copied from the reference material), so
these tests run on any checkout: the models are built from our own configs
(``configs/``) where we ship one for a reference config, and from the
reference's YAML files in ``../shared/reference/configs`` for the others
(those tests skip, saying so, where that folder is absent).

Params and state dicts are checked for every reference config. fvcore FLOP
counting runs a full-size forward pass, so by default it covers every model
family (C2D, I3D, I3D-NL, Slow, SlowFast 8x8 and 4x16, SlowFast-NL) but skips
the three 64-frame SlowFast 16x8 configs (~11 s each on one core, the same
layers at twice the frames) and the stepwise multigrid config (SlowFast 8x8 at
224); set SLOWFAST_FULL_FLOPS=1 to count those too.
"""

import ast
import json
import os

import pytest
import torch

from slowfast.config import load_config
from slowfast.models import build_model
from slowfast.models.model_stats import gflops, params_count
from tests.conftest import REPO_ROOT

# Parameter counts and GFLOPs of one test view of the reference models
# (as in tests/data/reference/model_reference.json; a test checks they agree).
REFERENCE = {
    "Kinetics/SLOWFAST_8x8_R50.yaml": (34566488, 66.07, (32, 256)),
    "Kinetics/I3D_8x8_R50.yaml": (28043472, 37.28, (8, 256)),
    "Kinetics/I3D_NLN_8x8_R50.yaml": (35401936, 49.10, (8, 256)),
    "Kinetics/C2D_8x8_R50.yaml": (24327632, 25.63, (8, 256)),
    "Kinetics/SLOW_8x8_R50.yaml": (32454096, 54.75, (8, 256)),
    "Kinetics/SLOWFAST_4x16_R50.yaml": (34480216, 36.34, (32, 256)),
    "Kinetics/SLOWFAST_NLN_8x8_R50.yaml": (41838680, 99.51, (32, 256)),
    "SSv2/SLOWFAST_16x8_R50.yaml": (34045558, 132.13, (64, 256)),
    "Charades/SLOWFAST_16x8_R50.yaml": (34006373, 132.13, (64, 256)),
    "Kinetics/SLOWFAST_8x8_R50_stepwise_multigrid.yaml": (34566488, 50.58, (32, 224)),
    "Charades/SLOWFAST_16x8_R50_multigrid.yaml": (34006373, 132.13, (64, 256)),
}
SLOW_FLOPS = {
    "Kinetics/SLOWFAST_8x8_R50_stepwise_multigrid.yaml",  # = SLOWFAST_8x8 at 224.
    "SSv2/SLOWFAST_16x8_R50.yaml",
    "Charades/SLOWFAST_16x8_R50.yaml",
    "Charades/SLOWFAST_16x8_R50_multigrid.yaml",
}
FULL_FLOPS = os.environ.get("SLOWFAST_FULL_FLOPS", "") == "1"


DATA = os.path.join(REPO_ROOT, "tests", "data", "reference")
REPO_CONFIGS = os.path.join(os.path.dirname(DATA), "..", "..", "configs")


def _ours(key):
    """Our own config for a reference config key, or None when we ship none."""
    path = os.path.normpath(os.path.join(REPO_CONFIGS, key))
    return path if os.path.isfile(path) else None


OURS = sorted(key for key in REFERENCE if _ours(key))
REFERENCE_ONLY = sorted(key for key in REFERENCE if not _ours(key))


def _config(reference_dir, key):
    if _ours(key):
        return load_config([_ours(key)])
    path = os.path.join(reference_dir(), "configs", key.replace("/", "_"))
    return load_config([path])


@pytest.fixture
def reference_configs(request):
    """A callable giving the reference folder (skips, saying why, when absent)."""
    return lambda: request.getfixturevalue("reference_dir")


def _read_state_dict_txt(path):
    entries = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, shape = line.split(" ", 1)
            entries.append((key, tuple(ast.literal_eval(shape))))
    return entries


def test_pinned_numbers_match_reference_json():
    with open(os.path.join(DATA, "model_reference.json")) as f:
        models = json.load(f)["models"]
    assert set(models) == set(REFERENCE)
    for key, entry in models.items():
        params, flops, shape = REFERENCE[key]
        assert entry["params"] == params, key
        assert entry["gflops_per_view"] == pytest.approx(flops, abs=1e-9), key
        assert tuple(entry["input"]) == shape, key


@pytest.mark.parametrize("key", OURS + REFERENCE_ONLY)
def test_param_count_equals_reference(reference_configs, key):
    cfg = _config(reference_configs, key)
    model = build_model(cfg)
    assert params_count(model) == REFERENCE[key][0]
    assert model.head.projection.out_features == cfg.MODEL.NUM_CLASSES


@pytest.mark.parametrize("name", ["SLOWFAST_8x8_R50", "I3D_8x8_R50", "I3D_NLN_8x8_R50"])
def test_state_dict_equals_reference(name):
    expected = _read_state_dict_txt(os.path.join(DATA, f"{name}.state_dict.txt"))
    model = build_model(load_config([_ours(f"Kinetics/{name}.yaml")]))
    ours = [(k, tuple(v.shape)) for k, v in model.state_dict().items()]
    missing = sorted(set(expected) - set(ours))
    extra = sorted(set(ours) - set(expected))
    assert not missing and not extra, f"missing {missing[:5]}, extra {extra[:5]}"
    assert ours == expected  # Same order too.


def _flop_params():
    for key in OURS + REFERENCE_ONLY:
        marks = []
        if key in SLOW_FLOPS and not FULL_FLOPS:
            marks.append(
                pytest.mark.skip(reason="64-frame FLOP count; SLOWFAST_FULL_FLOPS=1")
            )
        yield pytest.param(key, marks=marks)


@pytest.mark.parametrize("key", _flop_params())
@pytest.mark.slow
def test_gflops_within_one_percent(reference_configs, key):
    _, expected, (frames, crop) = REFERENCE[key]
    cfg = _config(reference_configs, key)
    model = build_model(cfg)
    model.train()
    measured = gflops(model, cfg, frames, crop)
    assert measured == pytest.approx(expected, rel=0.01)
    assert model.training  # Mode restored.


def test_gflops_counts_the_test_view_only():
    # Linear in the number of frames for C2D (2D convs): a check that the count
    # follows the given input shape rather than the config's.
    cfg = load_config([_ours("Kinetics/C2D_8x8_R50.yaml")])
    model = build_model(cfg)
    with torch.no_grad():
        g4 = gflops(model, cfg, 4, 128)
        g8 = gflops(model, cfg, 8, 128)
    head = 2048 * 400 / 1e9
    assert (g8 - head) == pytest.approx(2 * (g4 - head), rel=1e-6)
