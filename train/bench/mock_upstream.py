"""A loopback OpenAI-compatible upstream that answers every chat completion after a fixed delay.

Run as ``python -m proteus_train.bench.mock_upstream --port P --delay 1.0``; it serves
``POST /v1/chat/completions`` (and ``/chat/completions``) plus ``GET /health`` on 127.0.0.1 only.
A separate process, so its work never shares a GIL with the load generator or the proxy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

from aiohttp import web


def completion(model: str) -> dict:
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
    }


def build_app(delay_s: float) -> web.Application:
    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        await asyncio.sleep(delay_s)
        return web.json_response(completion(str(body.get("model", "mock"))))

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/chat/completions", chat)
    app.router.add_get("/health", health)
    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay", type=float, default=1.0, help="seconds before each answer")
    parser.add_argument("--nice", type=int, default=0, help="run this many niceness steps below normal priority")
    args = parser.parse_args(argv)
    if args.nice:
        os.nice(args.nice)
    print(json.dumps({"listening": args.port, "delay_s": args.delay}), flush=True)
    web.run_app(build_app(args.delay), host="127.0.0.1", port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
