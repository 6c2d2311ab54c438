"""Where a GPU decision's time goes, on a CUDA host (the figures of docs/gpu.md "What makes a GPU
decision fast" and "Decision speed").

For a transformer-encoder artifact (``scripts/transformer_artifact.py``'s): the p50 of an eager decision
and of its steps at batch 1 and 128 (128-token prompts); batch-128
tokenisation on 1-16 threads; the encoder with pooling, eager against a replayed CUDA graph, with
the fused BERT's C++ layer (native True) and its Python layer.  Prints each result and writes
proto.json to $OUT (default /tmp).

    OUT=DIR python scripts/gpu_decision_profile.py ARTIFACT
"""
import json, os, sys, time, statistics
from concurrent.futures import ThreadPoolExecutor
import numpy as np, torch
from litellm_proteus.predictor import ProteusPredictor
from proteus_train.bench.prompts import load_prompts, cut_prompts
from proteus_train.bench.measure import bench_candidates

OUT = os.environ.get("OUT", "/tmp")
res = {}
def t(fn, n=50, warm=5):
    for _ in range(warm): fn()
    s = []
    for _ in range(n):
        torch.cuda.synchronize(); a = time.perf_counter(); fn(); torch.cuda.synchronize(); s.append(time.perf_counter() - a)
    return round(statistics.median(s) * 1000, 3)

art = sys.argv[1]
p = ProteusPredictor(artifact=art, device="cuda", precision="bf16", memory_cache=0, cuda_graphs=False)  # eager: each step timed alone
enc = p.encoder
print("backend", enc.backend, "native", getattr(enc._runner, "native", None), "batch_size", enc.batch_size, flush=True)
prompts, _ = load_prompts(None)
pool = cut_prompts(prompts, enc.content_offsets, 128, 1024)
cands = bench_candidates(p)
for B in (1, 128):
    texts = pool[:B]
    ids = enc._token_ids(texts)
    emb = enc.encode(texts)
    tn = np.full(B, 0.5, np.float32)
    r = {
        "decide": t(lambda: p.decide(texts, [0.85] * B, [cands] * B), n=30),
        "token_ids": t(lambda: enc._token_ids(texts)),
        "embed_batch_all": t(lambda: enc._embed_batch(ids)),
        "encode": t(lambda: enc.encode(texts)),
        "heads_forward": t(lambda: p.network.forward(emb, tn)),
        "decide_embeddings": t(lambda: p.decide_embeddings(emb, [0.85] * B, [cands] * B)),
    }
    res[f"breakdown_b{B}"] = r
    print(B, r, flush=True)

# threaded tokenisation
tok = enc.tokenizer
texts = pool[:128]
for threads in (1, 2, 4, 8, 16):
    ex = ThreadPoolExecutor(threads)
    def run():
        chunks = [texts[i::threads] for i in range(threads)]
        list(ex.map(lambda c: tok(c, add_special_tokens=False, truncation=False, verbose=False)["input_ids"], chunks))
    res[f"tok128_threads{threads}"] = t(run, n=20)
    ex.shutdown()
print({k: v for k, v in res.items() if k.startswith("tok")}, flush=True)

# CUDA graph prototype on the runner (+ pooling)
runner = enc._runner
dev = "cuda"
def pooled(ids_t, mask_t):
    h = runner(ids_t, mask_t).float()
    m = mask_t.unsqueeze(-1).to(h.dtype)
    return torch.nn.functional.normalize((h * m).sum(1) / m.sum(1).clamp(min=1.0), dim=-1)
for native in (True, False):
    if hasattr(runner, "use_native"): runner.use_native(native)
    for B, L in ((1, 128), (1, 64), (32, 128), (128, 128), (128, 512)):
        ids_t = torch.randint(1000, 20000, (B, L), device=dev)
        mask_t = torch.ones(B, L, dtype=torch.long, device=dev); mask_t[:, L - 7:] = 0
        with torch.inference_mode():
            eager = t(lambda: pooled(ids_t, mask_t).cpu())
            s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3): pooled(ids_t, mask_t)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(g):
                    out = pooled(ids_t, mask_t)
                ok = True
            except Exception as e:
                ok = repr(e)[:200]
            if ok is True:
                host_ids = torch.randint(1000, 20000, (B, L)).pin_memory()
                def replay():
                    ids_t.copy_(host_ids, non_blocking=True); g.replay(); return out.cpu()
                graph = t(replay)
                err = float((pooled(ids_t, mask_t) - out).abs().max()) if True else None
            else:
                graph, err = None, None
        res[f"graph_native{native}_b{B}_l{L}"] = {"eager": eager, "graph": graph, "ok": ok, "err": err}
        print(native, B, L, res[f"graph_native{native}_b{B}_l{L}"], flush=True)

json.dump(res, open(f"{OUT}/proto.json", "w"), indent=1)
