"""Install with ``pip install -e .`` (see INSTALL.md for the CPU/GPU torch note)."""

from setuptools import find_packages, setup

# What ``pip install .`` leaves out: the tests, the scripts, the configs and the
# workshop (benchmarks, checks, data preparation: ``workshop/``, which imports
# ``slowfast`` and runs from the checkout). tests/test_architecture.py reads it.
EXCLUDED = (
    "tests", "tests.*", "tools", "tools.*", "configs", "configs.*",
    "projects", "projects.*", "workshop", "workshop.*",
)  # fmt: skip

setup(
    name="slowfast",
    version="0.1.0",
    description="Video recognition models with multigrid training",
    python_requires=">=3.9",
    packages=find_packages(exclude=EXCLUDED),
    # torch is a range so that an installed build (CPU or CUDA) is kept as is.
    install_requires=[
        "torch>=2.3",  # torch.amp.GradScaler("cuda")
        "numpy",
        "fvcore>=0.1.5",
        "iopath>=0.1.9",
        "av>=10.0",
        "simplejson",
        "tensorboard",
        "yacs>=0.1.8",
        "scikit-learn",
        "matplotlib",
        "PyYAML",
        "Pillow",
        "simplejpeg>=1.6",
    ],
    extras_require={
        "dev": [
            "pytest>=7",
            "ruff",
            # tools/dev/check_types.py passes with this version (a newer one
            # may find new errors).
            "mypy==2.4.1",
            "submitit",
            "triton>=3.0; platform_system == 'Linux' and platform_machine == 'x86_64'",
        ],
        "slurm": ["submitit"],
    },
)
