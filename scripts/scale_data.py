"""A RouterBench wide-format log scaled to FACTOR times its rows, every prompt distinct.

Replica 0 is the source row as it is; replica k >= 1 prefixes the prompt's first turn with an
instruction preamble drawn from a fixed list and the replica number, e.g.
``"Please answer the following. (request 7)\\n\\n<original first turn>"``: the task and its answer
are unchanged, so the outcome (score), cost and response columns are copied from the source row.
``sample_id`` becomes ``<id>#<k>`` so the loader's duplicate-id policy treats replicas as distinct
queries (and duplicated source ids stay duplicated within a replica, cleaned exactly as at 1x).

Splits: each output row carries a ``split`` column set to the split its source row gets in
``proteus train`` at 1x (``load_logs`` + ``assign_splits`` with the same seed: the source's
train/test files, validation carved from train).  A replica of a test row is a test row, so no
test prompt's variant is ever trained on; the 1x set written here routes exactly like the source.

Rows are streamed to CSV one replica at a time, one output file per source file (same names, so the
loader concatenates them in the same order).  Deterministic: same source, factor and seed give the
same bytes.  Output goes under runs/ (git-ignored), never into the repository:

    python scripts/scale_data.py --source ../shared/data/routerbench-partial --factor 10 --out runs/scale/data/10x
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from proteus_train.data import assign_splits, load_logs
from proteus_train.data.common import prompt_text, read_table, resolve_files, split_from_name

PREAMBLES = (
    "Please answer the following.",
    "Here is a task for you.",
    "Respond to the request below.",
    "Read carefully, then answer.",
    "Task:",
    "Question for you:",
    "Work through this one.",
    "Your turn:",
)


def variant_prompt(cell: object, replica: int) -> object:
    """The prompt cell of replica ``replica``: the source cell itself for replica 0, otherwise its
    routed text (``prompt_text``: turns joined as the loader joins them) after a preamble and the
    replica number."""
    if replica == 0 or not isinstance(cell, str):
        return cell
    return f"{PREAMBLES[(replica - 1) % len(PREAMBLES)]} (request {replica})\n\n" + prompt_text(cell)


def source_splits(source: Path, seed: int) -> dict[str, str]:
    """sample_id -> the split ``proteus train`` gives that row at 1x (same loader, same seed)."""
    log = assign_splits(load_logs([source]), seed=seed)
    if log.sample_ids is None:
        raise ValueError(f"{source}: the source needs a 'sample_id' column (replica ids are derived from it)")
    return dict(zip(log.sample_ids, log.split.tolist()))


def write_scaled(source: Path, factor: int, out: Path, seed: int = 0) -> dict:
    """Write ``factor`` replicas of every file under ``source`` to ``out``; returns a summary."""
    if factor < 1:
        raise ValueError(f"factor must be >= 1; got {factor}")
    splits = source_splits(source, seed)
    out.mkdir(parents=True, exist_ok=True)
    rows = 0
    files = []
    for path, _ in resolve_files([source]):
        frame = read_table(path)
        if "sample_id" not in frame.columns or "prompt" not in frame.columns:
            raise ValueError(f"{path}: expected 'sample_id' and 'prompt' columns (RouterBench wide format)")
        ids = frame["sample_id"].astype(str)
        fallback = split_from_name(path) or "train"  # rows the loader drops (no observed score) keep their file's split
        frame = frame.assign(split=[splits.get(i, fallback) for i in ids])
        target = out / path.relative_to(source.resolve()).with_suffix(".csv")
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("w", encoding="utf-8", newline="") as handle:
            for replica in range(factor):
                part = frame.copy()
                part["prompt"] = [variant_prompt(c, replica) for c in frame["prompt"]]
                if replica:
                    part["sample_id"] = ids + f"#{replica}"
                part.to_csv(handle, index=False, header=replica == 0)
        rows += factor * len(frame)
        files.append(target.name)
    summary = {"source": str(source), "factor": factor, "seed": seed, "rows": rows, "files": files}
    (out / "scale.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", required=True, type=Path, help="directory of RouterBench wide-format files")
    parser.add_argument("--factor", required=True, type=int, help="replicas per source row (1 = the source itself)")
    parser.add_argument("--out", required=True, type=Path, help="output directory (put it under runs/)")
    parser.add_argument("--seed", type=int, default=0, help="the seed proteus train will use (its split draw)")
    args = parser.parse_args(argv)
    if args.factor < 1:
        parser.error(f"--factor must be an integer >= 1; got {args.factor}")
    if not args.source.is_dir():
        parser.error(f"--source must be a directory of routing-log files; got {args.source}")
    summary = write_scaled(args.source.resolve(), args.factor, args.out, args.seed)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
