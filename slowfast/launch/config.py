"""The run's config as the tools load it: values, then the registries' names.

``load_run_config`` is ``slowfast.config.load_config`` with the name checks of
every registry (models, datasets, losses, optimizers, LR policies), so an
unknown name fails at load with one line and a did-you-mean hint, before any
work. The config layer itself knows no registry. The user's modules (IMPORTS
and ``--import``, ``launch/user_modules.py``) are imported first: they
register the names the checks then find.
"""

from typing import Iterable, Sequence

from fvcore.common.config import CfgNode

from slowfast.config import load_config
from slowfast.datasets.build import check_dataset_names
from slowfast.launch.user_modules import (
    check_imports,
    import_user_modules,
    with_imports,
)
from slowfast.models.build import check_model_name
from slowfast.solver.losses import check_loss_name
from slowfast.solver.lr_policy import check_lr_policy_name
from slowfast.solver.optimizer import check_optimizer_name

REGISTRY_CHECKS = (
    check_imports,  # first: the user's modules register names the others check
    check_model_name,
    check_dataset_names,
    check_loss_name,
    check_optimizer_name,
    check_lr_policy_name,
)


def load_run_config(
    cfg_files: Iterable[str] = (),
    opts: Sequence[str] = (),
    imports: Sequence[str] = (),
) -> CfgNode:
    """Loads, validates and freezes a config, names of registered parts included.

    Args:
        cfg_files: YAML files merged in order (later files win).
        opts: ``KEY VALUE`` overrides applied after all files.
        imports: modules given with ``--import``: imported before the config
            is read, and added to the end of its IMPORTS (so that every
            process of the run imports them too).

    Returns:
        CfgNode: the validated, frozen config.

    Raises:
        slowfast.config.ConfigError: a bad file, key, value or name, or a
            module that cannot be imported (one line).
    """
    import_user_modules(imports, "--import")
    cfg = load_config(cfg_files, opts, REGISTRY_CHECKS)
    return with_imports(cfg, imports)
