"""``proteus train``: routing logs in, artifact directory out.  Every TrainConfig field is a flag."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import typing

from .config import TrainConfig

def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per ``TrainConfig`` field, help and default from the field (``option`` in config.py)."""
    parser.add_argument("--out", required=True, metavar="DIR", help="artifact directory to write")
    hints = typing.get_type_hints(TrainConfig)
    for f in dataclasses.fields(TrainConfig):
        help_text, flag = f.metadata["help"].replace("%", "%%"), f.metadata["flag"]  # argparse formats help with %
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        if f.name == "data":
            parser.add_argument("--data", nargs="+", required=True, metavar="PATH", help=help_text)
        elif f.name == "tau_range":
            parser.add_argument(flag, nargs=2, type=float, metavar=("LO", "HI"), help=help_text)
        elif flag is not None and hints[f.name] is bool:  # a switch that turns a default-on part off
            parser.add_argument(flag, dest=f.name, action="store_false", help=help_text)
        elif flag is not None:
            parser.add_argument(flag, dest=f.name, type=float, metavar="G", help=help_text)
        elif hints[f.name] is bool:
            parser.add_argument(f"--{f.name.replace('_', '-')}", action=argparse.BooleanOptionalAction,
                                default=default, help=help_text)
        else:
            base = {int: int, float: float}.get(hints[f.name], str)
            parser.add_argument(f"--{f.name.replace('_', '-')}", type=base, default=default,
                                help=f"{help_text} (default: {default})")


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig) if hasattr(args, f.name)}
    values["tau_range"] = tuple(args.tau_range) if args.tau_range else None
    if values.get("cache_dir") == "":
        values["cache_dir"] = None
    return TrainConfig(**values)  # a value no run can use is a ValueError naming its flag: error: ..., exit 2


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    from .pipeline import train

    config = config_from_args(args)
    manifest = train(config, args.out)
    summary = {
        "out": args.out,
        "models": manifest.models,
        "tau_range": manifest.tau_range,
        "tau_train_range": manifest.tau_train_range,
        "split": manifest.data.split,
        "timings_s": manifest.training["timings_s"],
    }
    print(json.dumps(summary, indent=2))
    return 0
