#!/usr/bin/env python3
"""Runs a job from a config: ``python tools/run_net.py --cfg FILE [KEY VALUE ...]``.

Arguments follow the reference (see ``slowfast.utils.parser``). A bad config
is reported as one ``error: ...`` line on stderr with exit status 2.

The job trains when TRAIN.ENABLE, then tests when TEST.ENABLE, each stage
launched on every process through ``slowfast.utils.distributed.launch_job``
(NUM_GPUS processes per machine, or NUM_CPU_PROCS when NUM_GPUS is 0). With
neither stage enabled it logs the model's parameters and FLOPs.
"""

import logging
import sys
from typing import Optional, Sequence

from fvcore.common.config import CfgNode

from slowfast.config import ConfigError
from slowfast.utils.logging import setup_logging
from slowfast.utils.parser import load_config_from_args, parse_args

logger = logging.getLogger("slowfast.tools.run_net")

EXIT_CONFIG_ERROR = 2


def _one_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return "; ".join(lines) or type(err).__name__


def model_info(cfg: CfgNode) -> None:
    """Builds the model and, when LOG_MODEL_INFO, logs its params and FLOPs.

    Args:
        cfg: the run's frozen config.
    """
    # Imported here so that --help and config errors answer without the
    # model code (and torch) being loaded.
    from slowfast.models import build_model
    from slowfast.utils.model_stats import log_model_info

    model = build_model(cfg)
    if cfg.LOG_MODEL_INFO:
        log_model_info(model, cfg)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parses the command line, loads the config and runs the enabled stages.

    Args:
        argv: arguments without the program name; None reads sys.argv.

    Returns:
        int: the exit status (0: success, 2: bad config).
    """
    args = parse_args(argv)
    try:
        cfg = load_config_from_args(args)
    except ConfigError as err:
        print(f"error: {_one_line(err)}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    setup_logging(cfg.OUTPUT_DIR, rank=0)
    logger.info("Config files: %s; overrides: %s", args.cfg_files, args.opts)

    if not (cfg.TRAIN.ENABLE or cfg.TEST.ENABLE):
        model_info(cfg)
        return 0
    from slowfast.engine.tester import test
    from slowfast.engine.trainer import train
    from slowfast.utils.distributed import launch_job

    if cfg.TRAIN.ENABLE:
        launch_job(cfg, args.init_method, train)
    if cfg.TEST.ENABLE:
        launch_job(cfg, args.init_method, test)
    return 0


if __name__ == "__main__":
    sys.exit(main())
