"""Send the accuracy target tau with each request, using the plain OpenAI SDK.

    # with the proxy from config.example.yaml running on 127.0.0.1:4000:
    python examples/client_tau.py "What is 17*23?" --tau 0.79 0.82 0.85

tau travels in the request's ``metadata`` (``extra_body`` keeps the SDK from type-checking it; a
numeric string such as ``metadata={"tau": "0.9"}`` in the SDK's own ``metadata`` argument works
too).  The proxy answers with the routing decision in ``x-proteus-*`` headers.
"""

from __future__ import annotations

import argparse
import os

from openai import OpenAI


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("prompt")
    parser.add_argument("--tau", type=float, nargs="+", default=[0.79, 0.82, 0.85])
    parser.add_argument("--base-url", default=os.environ.get("PROTEUS_PROXY_URL", "http://127.0.0.1:4000"))
    parser.add_argument("--api-key", default=os.environ.get("LITELLM_MASTER_KEY"), help="default: $LITELLM_MASTER_KEY")
    parser.add_argument("--model", default="proteus-auto")
    args = parser.parse_args()
    if not args.api_key:
        parser.error("pass --api-key or set LITELLM_MASTER_KEY")

    client = OpenAI(base_url=args.base_url, api_key=args.api_key)
    print(f"{'tau':>5}  {'tau used':>8}  {'source':<13} {'mu':>6}  {'model (trained slot)':<30} answer")
    moved = False  # any row routed at another tau than asked
    for tau in args.tau:
        raw = client.chat.completions.with_raw_response.create(
            model=args.model,
            messages=[{"role": "user", "content": args.prompt}],
            extra_body={"metadata": {"tau": tau}},
        )
        answer = raw.parse().choices[0].message.content or ""
        h = raw.headers
        marked = bool(h.get("x-proteus-tau-clamped") or h.get("x-proteus-tau-capped"))
        moved = moved or marked
        used = h.get("x-proteus-tau", "?") + ("*" if marked else "")
        print(
            f"{tau:>5g}  {used:>8}  {h.get('x-proteus-tau-source', '?'):<13} {h.get('x-proteus-mu', '?'):>6}  "
            f"{h.get('x-proteus-model', '?'):<30} {answer[:60]!r}"
        )
    if moved:
        print("* clamped to the artifact's trained range, or capped at the key's tier")


if __name__ == "__main__":
    main()
