"""What the decision log costs: ``python -m proteus_train.bench.decision_log --out OUT``.

- ``submit_us``: time of ``DecisionLogWriter.submit`` (what a routed request pays: one queue put),
  p50/p99 over ``--records`` decision records submitted at a steady pace;
- ``drain_records_per_s``: how many records per second the writer thread empties into the JSONL
  files (and Redis, with ``--redis-url``) when the queue is filled in a burst;
- ``bytes_per_decision``: mean size of one decision line (3 candidates, prompt not logged).

Prints the figures and writes ``OUT/decision_log_bench.json``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from litellm_proteus.config import DecisionLogSettings, RedisSettings
from litellm_proteus.decision_log import DecisionLogWriter, LoggedCandidate, decision_record, log_files, redis_client


def sample_decision(i: int) -> dict:
    return decision_record(
        call_id=f"bench-{i:08d}-0000-0000-000000000000", key_hash="f" * 64, tier="standard", tau_source="default",
        state_key="tier:standard", tau=0.82, tau_requested=None, tau_effective=0.82, delta=0.0, mu=0.41,
        model_group="proteus-auto",
        candidates=[LoggedCandidate(f"deployment-{k}", k, f"model-{k}", 1e-4 * (k + 1), 0.6 + 0.1 * k) for k in range(3)],
        chosen=1, propensity=1.0, prompt=f"prompt {i}", artifact="a" * 64, log_prompt=False,
    )


def measure(records: int, directory: Path, redis_url: str | None) -> dict:
    settings = DecisionLogSettings(
        dir=str(directory), queue_size=records + 1, redis_stream="proteus:bench" if redis_url else None,
    )
    client = redis_client(RedisSettings(url=redis_url, timeout_ms=1000)) if redis_url else None
    writer = DecisionLogWriter(settings, client)
    items = [sample_decision(i) for i in range(records)]
    submit_ns = []
    for item in items:  # steady pace: the writer keeps up, as on a proxy
        start = time.perf_counter_ns()
        writer.submit(item)
        submit_ns.append(time.perf_counter_ns() - start)
        if len(submit_ns) % 64 == 0:
            time.sleep(0.001)
    writer.flush(timeout=120)
    burst = [sample_decision(records + i) for i in range(records)]
    start = time.perf_counter()
    for item in burst:
        writer.submit(item)
    writer.flush(timeout=300)
    drain_s = time.perf_counter() - start
    writer.close()
    size = sum(p.stat().st_size for p in log_files(directory))
    us = np.array(submit_ns) / 1000.0
    return {
        "records": records,
        "redis": bool(redis_url),
        "submit_us": {"p50": float(np.percentile(us, 50)), "p99": float(np.percentile(us, 99))},
        "drain_records_per_s": records / drain_s,
        "bytes_per_decision": size / (2 * records),
        "dropped": writer.dropped,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--redis-url", default=None, help="also XADD to a stream on this Redis")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out) as scratch:
        result = measure(args.records, Path(scratch), args.redis_url)
    print(
        f"submit p50 {result['submit_us']['p50']:.1f} us, p99 {result['submit_us']['p99']:.1f} us; "
        f"writer drains {result['drain_records_per_s']:,.0f} records/s; {result['bytes_per_decision']:.0f} bytes/decision"
        + (" (files + Redis stream)" if result["redis"] else " (files)")
    )
    (out / "decision_log_bench.json").write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
