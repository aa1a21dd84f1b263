"""Command-line arguments of ``tools/run_net.py`` (the reference's CLI).

Accepted forms (freely combined; options must come before the overrides):

    --cfg a.yaml --cfg b.yaml          # merged in order, later files win
    --cfg a.yaml b.yaml                # the reference's form (also --cfg_files)
    --init_method tcp://host:9999 --num_shards 2 --shard_id 0
    --import my_project.my_model       # your own module, in every process
    --opts KEY VALUE ...               # the reference's override flag
    KEY VALUE ...                      # trailing overrides
"""

import argparse
import os
from typing import List, Optional, Sequence

from fvcore.common.config import CfgNode

_CFG_SUFFIXES = (".yaml", ".yml")


def add_cfg_argument(
    parser: argparse.ArgumentParser, help_text: str, required: bool = False
) -> None:
    """Adds ``--cfg`` (also ``--cfg_files``): config files, collected in order
    in ``cfg_files``.

    Args:
        parser: the tool's parser.
        help_text: the option's help.
        required: whether a config file must be given.
    """
    parser.add_argument(
        "--cfg",
        "--cfg_files",
        dest="cfg_files",
        action="append",
        default=[],
        required=required,
        metavar="FILE",
        help=help_text,
    )


def add_debug_argument(parser: argparse.ArgumentParser, help_text: str) -> None:
    """Adds ``--debug``: show tracebacks too (default: SLOWFAST_DEBUG set, not 0).

    Args:
        parser: the tool's parser.
        help_text: the option's help.
    """
    parser.add_argument(
        "--debug",
        action="store_true",
        default=os.environ.get("SLOWFAST_DEBUG", "") not in ("", "0"),
        help=help_text,
    )


def build_parser() -> argparse.ArgumentParser:
    """Returns the argument parser of ``tools/run_net.py``."""
    parser = argparse.ArgumentParser(
        description="Train, test or inspect a video model (slowfast).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n", 1)[1],
    )
    add_cfg_argument(parser, "config file; repeat to merge several in order")
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="a module of your own (registered models, datasets, ...) that every "
        "process imports before the config's names are checked: its dotted name, "
        "importable from PYTHONPATH or the current directory; repeat for several; "
        "added to the config's IMPORTS (docs/EXTENDING.md)",
    )
    parser.add_argument(
        "--init_method",
        default="tcp://localhost:9999",
        help="torch.distributed rendezvous URL shared by all machines",
    )
    parser.add_argument(
        "--num_shards",
        type=int,
        default=None,
        help="number of machines (overrides NUM_SHARDS)",
    )
    parser.add_argument(
        "--shard_id",
        type=int,
        default=None,
        help="index of this machine (overrides SHARD_ID)",
    )
    parser.add_argument(
        "--launcher",
        choices=("auto", "plain", "torchrun", "srun"),
        default="auto",
        help="how the job was started (default: detected from the environment: "
        "torchrun's or srun's variables, else plain: spawn the processes here)",
    )
    add_debug_argument(
        parser, "show tracebacks of set-up errors too (or SLOWFAST_DEBUG=1)"
    )
    parser.add_argument(
        "--opts",
        dest="flag_opts",
        nargs=argparse.REMAINDER,
        default=[],
        metavar="KEY VALUE",
        help="config overrides as KEY VALUE pairs (everything after --opts)",
    )
    parser.add_argument(
        "opts",
        nargs=argparse.REMAINDER,
        metavar="KEY VALUE",
        help="config overrides as KEY VALUE pairs",
    )
    return parser


def reject_options_among_overrides(
    parser: argparse.ArgumentParser, opts: Sequence[str]
) -> None:
    """Exits with one line when an option follows the KEY VALUE overrides.

    Args:
        parser: the tool's parser (its ``error`` prints usage and exits 2).
        opts: the trailing tokens read as overrides.
    """
    stray = [token for token in opts if str(token).startswith("--")]
    if stray:
        parser.error(
            f"option {stray[0]} must come before the KEY VALUE overrides "
            "(everything after the first override is read as overrides)"
        )


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parses the command line.

    Args:
        argv: the arguments (without the program name); None reads sys.argv.

    Returns:
        argparse.Namespace: ``cfg_files`` and ``imports`` (lists), ``init_method``,
        ``num_shards`` and ``shard_id`` (None when not given) and ``opts``
        (the flat list of KEY VALUE overrides, trailing ones first).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    trailing: List[str] = list(args.opts or [])
    # The reference's "--cfg a.yaml b.yaml": extra files land in the trailing list.
    while trailing and trailing[0].endswith(_CFG_SUFFIXES):
        args.cfg_files.append(trailing.pop(0))
    opts = [token for token in trailing + list(args.flag_opts) if token != "--opts"]
    reject_options_among_overrides(parser, opts)
    args.opts = opts
    del args.flag_opts
    return args


def load_config_from_args(args: argparse.Namespace) -> CfgNode:
    """Builds the run's frozen config from parsed arguments.

    ``--num_shards`` and ``--shard_id`` are applied as the last overrides of
    NUM_SHARDS and SHARD_ID, so they are validated like any other value.
    ``--import`` modules are imported first and added to IMPORTS.

    Args:
        args: the result of ``parse_args``.

    Returns:
        CfgNode: the validated, frozen config.

    Raises:
        slowfast.config.ConfigError: a bad file, key or value (one line).
    """
    # Imported here: --help and argument errors answer without the model code.
    from slowfast.launch.config import load_run_config

    opts = list(args.opts)
    if args.num_shards is not None:
        opts += ["NUM_SHARDS", str(args.num_shards)]
    if args.shard_id is not None:
        opts += ["SHARD_ID", str(args.shard_id)]
    return load_run_config(args.cfg_files, opts, getattr(args, "imports", []))
