"""``proteus train`` wall time and peak memory at several multiples of a routing log's rows.

For each factor: the scaled log (``scripts/scale_data.py``, reused when already built), then one
``proteus train`` in a child process with a fresh embedding cache (every prompt is encoded; the
static table is shared from the usual cache so it is not distilled again).  Per run: wall seconds,
the child's peak RSS (``os.wait4``: the kernel's ru_maxrss of that process), the manifest's stage
timings and the load average before and after (the host may be shared).  Writes OUT_JSON and
prints a Markdown table:

    python scripts/train_scale.py --source ../shared/data/routerbench-partial --factors 1,10,100 \\
        --work runs/scale --json runs/scale/train_scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

from proteus_train.config import DEFAULT_CACHE_DIR

SCALE_DATA = Path(__file__).resolve().parent / "scale_data.py"


def scaled_data(source: Path, factor: int, work: Path) -> Path:
    out = work / "data" / f"{factor}x"
    summary = out / "scale.json"
    if summary.exists() and json.loads(summary.read_text()).get("factor") == factor:
        return out
    subprocess.run([sys.executable, str(SCALE_DATA), "--source", str(source), "--factor", str(factor), "--out", str(out)],
                   check=True)
    return out


def fresh_cache(work: Path, factor: int) -> Path:
    """An empty embedding cache; the distilled static table linked from the default cache."""
    cache = work / "cache" / f"{factor}x"
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    static = Path(DEFAULT_CACHE_DIR) / "static"
    if static.is_dir():
        (cache / "static").symlink_to(static.resolve(), target_is_directory=True)
    return cache


def timed_train(data: Path, artifact: Path, cache: Path, extra: list[str], log_path: Path) -> dict:
    command = [sys.executable, "-m", "litellm_proteus.cli", "train", "--data", str(data), "--out", str(artifact),
               "--cache-dir", str(cache), "--quiet", *extra]
    load_before = os.getloadavg()
    started = time.perf_counter()
    with log_path.open("w") as log:
        child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage (ru_maxrss: its peak RSS)
        child.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    code = child.returncode
    if code != 0:
        print(f"train_scale.py: error: proteus train exited {code} on {data}; see {log_path}", file=sys.stderr)
        raise SystemExit(2)
    manifest = json.loads((artifact / "manifest.json").read_text())
    return {
        "command": " ".join(command),
        "wall_s": round(wall, 1),
        "max_rss_mb": round(usage.ru_maxrss / 1024, 1),  # KiB on Linux
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "rows": manifest["data"]["n_rows"],
        "split": manifest["data"]["split"],
        "timings_s": manifest["training"]["timings_s"],
        "loadavg_before": [round(v, 2) for v in load_before],
        "loadavg_after": [round(v, 2) for v in os.getloadavg()],
    }


def markdown(runs: list[dict]) -> str:
    lines = ["| scale | rows | wall (s) | CPU (s) | peak RSS (MB) | load + encode | heads | PPO | total (manifest) | "
             "load avg (1 min, before / after) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        t = r["timings_s"]
        lines.append(
            f"| {r['factor']}x | {r['rows']:,} | {r['wall_s']} | {r['cpu_s']} | {r['max_rss_mb']:,.0f} | {t.get('encode_s', '')} | "
            f"{t.get('performance_head_s', '')} | {t.get('ppo_s', '')} | {t.get('total_s', '')} | "
            f"{r['loadavg_before'][0]} / {r['loadavg_after'][0]} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", required=True, type=Path, help="directory of RouterBench wide-format files")
    parser.add_argument("--factors", default="1,10,100", help="comma-separated row multiples (default 1,10,100)")
    parser.add_argument("--work", type=Path, default=Path("runs/scale"), help="data, caches and artifacts go here")
    parser.add_argument("--json", type=Path, default=None, help="results file (default WORK/train_scale.json)")
    parser.add_argument("train_args", nargs="*", help="extra proteus train flags, after --")
    parser.add_argument("--table-only", action="store_true", help="print the Markdown table of an existing --json")
    args = parser.parse_args(argv)
    if args.table_only:
        print(markdown(json.loads((args.json or args.work / "train_scale.json").read_text())["runs"]))
        return 0
    try:
        factors = [int(f) for f in args.factors.split(",") if f.strip()]
    except ValueError:
        parser.error(f"--factors takes comma-separated integers >= 1; got {args.factors!r}")
    if not factors or min(factors) < 1:
        parser.error(f"--factors takes comma-separated integers >= 1; got {args.factors!r}")
    runs = []
    for factor in factors:
        data = scaled_data(args.source.resolve(), factor, args.work)
        cache = fresh_cache(args.work, factor)
        artifact = args.work / "artifacts" / f"{factor}x"
        run = {"factor": factor, **timed_train(data, artifact, cache, args.train_args, args.work / f"train-{factor}x.log")}
        runs.append(run)
        print(f"[train_scale] {factor}x: {run['rows']} rows, {run['wall_s']} s, peak RSS {run['max_rss_mb']} MB", flush=True)
    result = {
        "host": {"cpus": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version()},
        "source": str(args.source),
        "embedding_cache": "cold (fresh per run); static table from the default cache",
        "runs": runs,
    }
    out = args.json or args.work / "train_scale.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(markdown(runs))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
