"""The numpy runtime (static-table artifacts on the CPU) against the torch one: the same forward pass
on the same weights, the same embeddings, the same decisions (any difference a near-tie)."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

from litellm_proteus.artifact import DEFAULT_ARTIFACT_DIR
from litellm_proteus.forward_numpy import NumpyForward, gelu, softplus
from litellm_proteus.model import ProteusModel
from litellm_proteus.model_config import tensor_shapes
from litellm_proteus.predictor import Candidate, ProteusPredictor, mixing_draw

# A differing choice is accepted only where the torch path's two best scores are this close.
NEAR_TIE = 1e-6


def test_gelu_and_softplus_equal_torch():
    x = np.concatenate([np.linspace(-12, 12, 20001), [-1e4, -40.0, 0.0, 1e-8, 40.0, 1e4]]).astype(np.float32)
    expected = torch.nn.GELU()(torch.from_numpy(x)).numpy()
    assert np.abs(gelu(x) - expected).max() <= 1e-6
    expected = torch.nn.functional.softplus(torch.from_numpy(x)).numpy()
    assert np.abs(softplus(x) - expected).max() <= 1e-5 * np.abs(expected).max()


@pytest.mark.parametrize("fixed_gamma", [None, 3.0])
def test_numpy_forward_equals_the_torch_model(make_artifact, fixed_gamma):
    from litellm_proteus.artifact import load_artifact, save_artifact
    from litellm_proteus.model import ModelConfig

    overrides = {"architecture": ModelConfig(embed_dim=384, n_models=11, fixed_gamma=fixed_gamma)} if fixed_gamma else {}
    directory = make_artifact(seed=5, **overrides)
    model, _ = load_artifact(directory)
    with torch.no_grad():  # random init leaves the Beta head at zero: give it weights to get wrong
        for param in model.parameters():
            param.add_(0.3 * torch.randn_like(param))
    save_artifact(directory, model, load_artifact(directory)[1])
    network = NumpyForward(directory)
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(64, 384)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    tau_norm = rng.uniform(-0.2, 1.2, 64).astype(np.float32)
    with torch.inference_mode():
        z = model.embed(torch.from_numpy(emb))
        p = torch.sigmoid(model.performance_logits(z)).numpy()
        for lam in (1.0, 0.0, 3.5):
            mu = model.policy(z, torch.from_numpy(tau_norm), lam).mean.numpy()
            assert np.abs(network.policy_mean(network.embed(emb), tau_norm, lam) - mu).max() < 1e-5
    p_np, mu_np = network.forward(emb, tau_norm)
    assert p_np.dtype == mu_np.dtype == np.float32 and p_np.shape == (64, 11) and mu_np.shape == (64,)
    assert np.abs(p_np - p).max() < 1e-5 and np.abs(z.numpy() - network.embed(emb)).max() < 1e-5
    assert np.array_equal(network.boost, model.boost.detach().numpy())
    assert abs(float(network.gamma) - float(model.gamma.detach())) < 1e-6


def test_tensor_shapes_name_every_tensor_of_the_torch_model():
    from litellm_proteus.model import ModelConfig

    for critic in (True, False):
        config = ModelConfig(embed_dim=24, n_models=5, hidden_dim=16, use_critic=critic)
        own = {k: tuple(v.shape) for k, v in ProteusModel(config).state_dict().items()}
        assert tensor_shapes(config) == own


def test_numpy_and_torch_predictors_decide_alike_on_synthetic_requests(make_artifact):
    directory = make_artifact(seed=2)
    numpy_side = ProteusPredictor(directory, device="cpu", runtime="numpy")
    torch_side = ProteusPredictor(directory, device="cpu", runtime="torch")
    assert (numpy_side.network.runtime, torch_side.network.runtime) == ("numpy", "torch")
    rng = np.random.default_rng(1)
    emb = rng.normal(size=(300, 384)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    taus = rng.uniform(0.6, 0.97, 300).tolist()
    candidates = [[Candidate(int(s), float(10 ** rng.uniform(-6, -1))) for s in rng.integers(0, 11, 6)] for _ in range(300)]
    assert_same_decisions(numpy_side.decide_embeddings(emb, taus, candidates), torch_side.decide_embeddings(emb, taus, candidates))


def test_runtime_option_is_validated(make_artifact):
    with pytest.raises(ValueError, match=r"predictor_options.runtime must be one of \('auto', 'numpy', 'torch'\)"):
        ProteusPredictor(make_artifact(), device="cpu", runtime="onnx")
    with pytest.raises(ValueError, match="runtime 'numpy' runs on the CPU"):
        ProteusPredictor(make_artifact(), device="cuda", runtime="numpy")


def assert_same_decisions(numpy_decisions, torch_decisions) -> int:
    """Every choice equal, or the torch path's best two scores within NEAR_TIE; returns the ties."""
    ties = 0
    for ours, theirs in zip(numpy_decisions, torch_decisions, strict=True):
        assert ours.p == pytest.approx(theirs.p, abs=1e-5) and ours.mu == pytest.approx(theirs.mu, abs=1e-5)
        if ours.index != theirs.index:
            gap = abs(theirs.scores[theirs.index] - theirs.scores[ours.index])
            assert gap < NEAR_TIE, f"choice differs by a score gap of {gap:.2e} (tau {theirs.tau_requested})"
            ties += 1
    return ties


SERVING_IMPORTS = """
import json, sys
TRAINING_ONLY = ("pandas", "pyarrow", "scipy", "matplotlib", "tqdm", "proteus_train")  # the [train] extra's
import litellm_proteus.router_strategy, litellm_proteus.predictor, litellm_proteus.tiers, litellm_proteus.engine
from litellm_proteus.predictor import Candidate, ProteusPredictor
predictor = ProteusPredictor(sys.argv[1], device="cpu")  # auto would pick CUDA on a GPU host
decision = predictor.decide(["What is 2 + 2?"], [0.8], [[Candidate(0, 1e-4), Candidate(1, 1e-3)]])[0]
print(json.dumps({"torch": "torch" in sys.modules, "transformers": "transformers" in sys.modules,
                  "training_stack": sorted(m for m in TRAINING_ONLY if m in sys.modules),
                  "runtime": predictor.network.runtime, "model": decision.model}))
"""


@pytest.mark.parametrize("artifact", ["default", "zeroeval-2024"])
def test_serving_a_static_artifact_imports_neither_torch_nor_transformers(artifact):
    directory = DEFAULT_ARTIFACT_DIR if artifact == "default" else DEFAULT_ARTIFACT_DIR.parent / "artifacts" / artifact
    out = subprocess.run([sys.executable, "-c", SERVING_IMPORTS, str(directory)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["runtime"] == "numpy" and result["model"]
    assert not result["torch"] and not result["transformers"] and result["training_stack"] == []


def real_prompts(shared_data) -> list[str]:
    """RouterBench-partial (all), ZeroEval (all) and MMLU (the first 4,500): 10,489 prompts."""
    from proteus_train.data.load import load_logs

    with warnings.catch_warnings():  # RouterBench-partial's duplicated ids are reported, and dropped
        warnings.simplefilter("ignore")
        routerbench = load_logs([shared_data / "routerbench-partial"]).prompts
    zeroeval = load_logs([shared_data / "zeroeval"]).prompts
    mmlu = load_logs([shared_data / "routellm-evals" / "mmlu"]).prompts[:4500]
    return list(routerbench) + list(zeroeval) + list(mmlu)


@pytest.mark.shared_data
def test_numpy_path_decides_like_the_torch_path_on_real_prompts(shared_data):
    from transformers import AutoTokenizer

    prompts = real_prompts(shared_data)
    assert len(prompts) >= 10_000
    numpy_side = ProteusPredictor(DEFAULT_ARTIFACT_DIR, device="cpu", memory_cache=0)
    torch_side = ProteusPredictor(DEFAULT_ARTIFACT_DIR, device="cpu", runtime="torch", memory_cache=0)
    assert (numpy_side.network.runtime, numpy_side.encoder.backend) == ("numpy", "static")
    embeddings = numpy_side.encoder.encode(prompts)

    # The embeddings against the torch static encoder's recipe: transformers' tokenizer, the tail
    # of the ids, torch's embedding_bag mean and L2 normalisation.
    encoder_dir = DEFAULT_ARTIFACT_DIR / numpy_side.manifest.encoder.name
    tokenizer = AutoTokenizer.from_pretrained(str(encoder_dir), local_files_only=True)
    table = torch.from_numpy(numpy_side.encoder.static_table.astype(np.float32))
    budget = numpy_side.encoder.max_tokens - 2  # [CLS], [SEP]
    rows = [ids[-budget:] or [101, 102] for ids in tokenizer(prompts, add_special_tokens=False, verbose=False)["input_ids"]]
    flat = torch.tensor([i for ids in rows for i in ids])
    offsets = torch.tensor([0] + [len(ids) for ids in rows[:-1]]).cumsum(0)
    reference = torch.nn.functional.normalize(torch.nn.functional.embedding_bag(flat, table, offsets, mode="mean"), dim=-1)
    assert np.abs(embeddings - reference.numpy()).max() < 1e-5

    lo, hi = numpy_side.manifest.tau_range
    rng = np.random.default_rng(0)
    costs = numpy_side.costs
    slot_costs = 10 ** rng.uniform(np.log10(costs.low), np.log10(costs.high), len(numpy_side.models))
    candidates = [[Candidate(slot, float(c)) for slot, c in enumerate(slot_costs)]] * len(prompts)
    draws = [mixing_draw(p) for p in prompts]
    ties = 0
    for tau in np.linspace(lo - 0.02, hi + 0.02, 9):  # the declared range and both clamps
        taus = [float(tau)] * len(prompts)
        ties += assert_same_decisions(
            numpy_side.decide_embeddings(embeddings, taus, candidates, draws),
            torch_side.decide_embeddings(embeddings, taus, candidates, draws),
        )
    print(f"{len(prompts)} prompts x 9 taus: {ties} choices differ, all near-ties (score gap < {NEAR_TIE})")
    assert ties <= 9 * len(prompts) // 1000  # near-ties are rare
