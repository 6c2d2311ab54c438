"""A small end-to-end ``proteus train`` on routing logs written in the wide format."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from litellm_proteus.artifact import load_artifact

TOPICS = {
    "arithmetic": "What is {a} plus {b}? Answer with a number.",
    "poetry": "Write a short poem about the colour {c} and the number {a}.",
    "code": "Write a Python function that returns the {a}th Fibonacci number modulo {b}.",
}
MODELS = {"big-model": (0.9, 2e-3), "mid-model": (0.75, 4e-4), "small-model": (0.55, 5e-5)}


def write_logs(path, n=150, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        topic = list(TOPICS)[i % 3]
        prompt = TOPICS[topic].format(a=int(rng.integers(2, 99)), b=int(rng.integers(2, 99)), c=["red", "blue"][i % 2])
        row = {"sample_id": f"s{i}", "prompt": str([prompt]), "eval_name": topic}
        for model, (acc, cost) in MODELS.items():
            bonus = 0.3 if (topic == "arithmetic" and model != "small-model") else 0.0
            row[model] = float(rng.random() < min(acc + bonus, 1.0))
            row[f"{model}|total_cost"] = cost * (1 + 0.1 * rng.random())
            row[f"{model}|model_response"] = "the answer is " + "x" * int(rng.integers(4, 40))
        rows.append(row)
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def train_process(data, out, *extra, quiet=True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "litellm_proteus.cli", "train", "--data", str(data), "--out", str(out),
           "--steps", "60", "--perf-epochs", "5", "--oof-folds", "2", "--boost-steps", "20",
           "--cache-dir", str(out.parent / "cache"), *extra, *(["--quiet"] if quiet else [])]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def run_train(data, out, *extra):
    return json.loads(train_process(data, out, *extra).stdout)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    base = tmp_path_factory.mktemp("train")
    data = write_logs(base / "logs.csv")
    summary = run_train(data, base / "a", "--seed", "3")
    return base, data, summary


def test_train_writes_a_loadable_artifact_with_full_manifest(trained):
    base, data, summary = trained
    model, manifest = load_artifact(base / "a")
    assert manifest.models == list(MODELS)
    # by default a static table distilled from all-MiniLM-L6-v2, bundled in the artifact
    assert manifest.encoder.static_from == "all-MiniLM-L6-v2" and manifest.encoder.bundled
    assert manifest.encoder.embed_dim == 384
    assert manifest.data.paths == [str(data.resolve())] and len(manifest.data.sha256) == 64
    assert sum(manifest.data.split.values()) == 150 and manifest.data.split_method.startswith("random:70/15/15")
    lo, hi = manifest.tau_range
    tlo, thi = manifest.tau_train_range
    assert tlo <= lo < hi <= thi
    assert manifest.training["config"]["steps"] == 60 and manifest.training["config"]["dual_lr"] == 0.4
    assert set(manifest.avg_output_tokens) == set(MODELS)
    # each slot's mean cost per request on the training rows (output tokens measured from the responses)
    assert set(manifest.avg_cost_usd) == set(MODELS)
    assert all(cost <= manifest.avg_cost_usd[m] <= 1.1 * cost for m, (_, cost) in MODELS.items())
    assert summary["tau_range"] == list(manifest.tau_range)
    assert 2.0 <= float(model.gamma) <= 8.0
    # the validation cost frontier the runtime mixes: cheapest first, accuracy rising, costs rising
    cal = manifest.calibration
    assert len(cal.frontier_policy_tau) >= 1
    assert all(b > a for a, b in zip(cal.frontier_accuracy, cal.frontier_accuracy[1:]))
    assert all(b > a for a, b in zip(cal.frontier_cost_usd, cal.frontier_cost_usd[1:]))
    assert set(cal.frontier_policy_tau) <= set(manifest.metrics["val_curve"]["policy_tau"])


def test_training_is_deterministic_for_a_seed(trained):
    base, data, _ = trained
    run_train(data, base / "b", "--seed", "3")
    first = json.loads((base / "a" / "manifest.json").read_text())
    second = json.loads((base / "b" / "manifest.json").read_text())
    (model_a, _), (model_b, _) = load_artifact(base / "a"), load_artifact(base / "b")
    for name, tensor in model_a.state_dict().items():
        assert torch.equal(tensor, model_b.state_dict()[name]), name
    assert first["weights_sha256"] == second["weights_sha256"]  # byte-identical files too
    assert first["calibration"] == second["calibration"] and first["tau_range"] == second["tau_range"]


def test_ablation_flags_reach_the_artifact(trained):
    base, data, _ = trained
    run_train(data, base / "c", "--no-critic", "--fixed-gamma", "3.0", "--no-lambda", "--no-mix-operating-points")
    model, manifest = load_artifact(base / "c")
    assert model.critic is None and float(model.gamma) == 3.0
    assert manifest.training["config"]["use_lambda"] is False
    assert manifest.calibration.frontier_policy_tau == [] and manifest.calibration.requested


def test_bad_tau_range_is_refused(trained, tmp_path):
    base, data, _ = trained
    done = subprocess.run(
        [sys.executable, "-m", "litellm_proteus.cli", "train", "--data", str(data), "--out", str(tmp_path / "x"),
         "--tau-range", "0.9", "0.8"], capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 2 and "error: --tau-range" in done.stderr and "Traceback" not in done.stderr


def test_artifacts_are_readable_by_other_users(trained):
    base, _, _ = trained
    assert (base / "a" / "model.safetensors").stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize(
    "flags, fragment",
    [
        (["--steps", "0"], "--steps must be an integer >= 1; got 0"),
        (["--lr", "-1"], "--lr must be a number > 0; got -1.0"),
        (["--oof-folds", "1"], "--oof-folds must be an integer >= 2"),
        (["--truncation", "middle"], "--truncation must be one of ['head', 'tail', 'head_tail']"),
    ],
)
def test_flags_out_of_range_are_refused_before_any_work(trained, tmp_path, flags, fragment):
    _, data, _ = trained
    done = subprocess.run(
        [sys.executable, "-m", "litellm_proteus.cli", "train", "--data", str(data), "--out", str(tmp_path / "x"), *flags],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 2 and fragment in done.stderr and "Traceback" not in done.stderr


def test_flags_whose_zero_means_none_accept_zero():
    from proteus_train.config import TrainConfig

    config = TrainConfig(calibration_clusters=0, boost_steps=0, finetune_epochs=0)  # 0 = no clusters / boosts / fine-tuning
    assert (config.calibration_clusters, config.boost_steps, config.finetune_epochs) == (0, 0, 0)
    with pytest.raises(ValueError, match="--calibration-clusters must be an integer >= 0; got -1"):
        TrainConfig(calibration_clusters=-1)


def test_bad_logs_are_an_error_message_not_a_traceback(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    one_model = tmp_path / "one.csv"
    pd.DataFrame({"prompt": ["a", "b"], "m": [1.0, 0.0], "m|total_cost": [0.1, 0.1]}).to_csv(one_model, index=False)
    negative = write_logs(tmp_path / "negative.csv", n=30)
    frame = pd.read_csv(negative)
    frame.loc[3, "mid-model|total_cost"] = -1.0
    frame.to_csv(negative, index=False)
    for path, fragment in (
        (empty, "empty.csv: empty file"),
        (one_model, "found 1 model(s) ['m']; routing needs at least 2"),
        (negative, "cost of model 'mid-model' must be a number >= 0 (USD per call) or empty for unknown; row 3 has -1"),
        (tmp_path / "missing.csv", "routing log path not found"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "litellm_proteus.cli", "train", "--data", str(path), "--out", str(tmp_path / "x")],
            capture_output=True, text=True, timeout=120,
        )
        assert done.returncode == 2, done.stderr[-2000:]
        assert "error: " in done.stderr and fragment in done.stderr and "Traceback" not in done.stderr


def test_help_lists_the_paper_flags():
    done = subprocess.run([sys.executable, "-m", "litellm_proteus.cli", "train", "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0
    for flag in ("--no-lambda", "--fixed-gamma", "--no-critic", "--dual-lr", "--session-batches", "--tau-range", "--encoder", "--finetune-encoder"):
        assert flag in done.stdout


def test_logs_without_costs_train_with_a_user_price_table(tmp_path, tiny_bert):
    rows = [{"prompt": f"Question {i}: what is {i} times {i + 1}?", "model-a": bool(i % 3), "model-b": bool(i % 2)}
            for i in range(120)]
    pd.DataFrame(rows).to_csv(tmp_path / "evals.csv", index=False)
    missing = subprocess.run(
        [sys.executable, "-m", "litellm_proteus.cli", "train", "--data", str(tmp_path / "evals.csv"), "--out",
         str(tmp_path / "x"), "--format", "routellm", "--steps", "5"], capture_output=True, text=True, timeout=300,
    )
    assert missing.returncode != 0 and "model-a" in missing.stderr  # no price: the model is named
    (tmp_path / "prices.yaml").write_text("model-a: [10.0, 30.0]\nmodel-b: [0.6, 0.6]\n")
    run_train(tmp_path / "evals.csv", tmp_path / "out", "--format", "routellm", "--prices", str(tmp_path / "prices.yaml"),
              "--encoder", str(tiny_bert), "--no-calibration")  # a tiny encoder and no tau calibration: this test is about prices
    _, manifest = load_artifact(tmp_path / "out")
    assert manifest.models == ["model-a", "model-b"]
    assert manifest.data.model_extra["prices"] == {"model-a": [10.0, 30.0], "model-b": [0.6, 0.6]}


def test_finetune_encoder_ships_the_tuned_encoder_in_the_artifact(trained):
    from litellm_proteus.predictor import Candidate, ProteusPredictor

    base, data, _ = trained
    done = train_process(data, base / "ft", "--finetune-encoder", "--finetune-epochs", "1", quiet=False)
    assert "fine-tuning the encoder" in done.stderr  # the slow step shows progress
    _, manifest = load_artifact(base / "ft")
    assert manifest.encoder.bundled and (base / "ft" / manifest.encoder.name / "config.json").is_file()
    predictor = ProteusPredictor(base / "ft", device="cpu")
    tuned = predictor.encoder.encode(["What is 3 plus 4? Answer with a number."])
    from litellm_proteus.encoder import open_encoder

    frozen = open_encoder(device="cpu").encode(["What is 3 plus 4? Answer with a number."])
    assert not np.allclose(tuned, frozen, atol=1e-4)  # the weights really moved
    decision = predictor.decide(["What is 3 plus 4?"], [0.8], [[Candidate(0, 1e-3), Candidate(2, 1e-5)]])[0]
    assert decision.model in MODELS


def test_static_encoder_ships_the_token_table_in_the_artifact_and_can_be_turned_off(trained, tiny_bert):
    from litellm_proteus.encoder import STATIC_TABLE_FILE
    from litellm_proteus.predictor import Candidate, ProteusPredictor

    base, data, _ = trained
    summary = run_train(data, base / "static", "--static-encoder", "--encoder", str(tiny_bert))
    _, manifest = load_artifact(base / "static")
    assert manifest.encoder.bundled and manifest.encoder.static_from == str(tiny_bert)
    assert manifest.encoder.embed_dim == 16 and (base / "static" / manifest.encoder.name / STATIC_TABLE_FILE).is_file()
    assert summary["tau_range"][0] < summary["tau_range"][1]
    predictor = ProteusPredictor(base / "static", device="cpu")
    assert predictor.encoder.backend == "static"
    decision = predictor.decide(["What is 3 plus 4?"], [0.8], [[Candidate(0, 1e-3), Candidate(2, 1e-5)]])[0]
    assert decision.model in MODELS
    run_train(data, base / "transformer", "--no-static-encoder", "--encoder", str(tiny_bert))
    _, manifest = load_artifact(base / "transformer")
    assert (manifest.encoder.name, manifest.encoder.bundled, manifest.encoder.static_from) == (str(tiny_bert), False, None)
    assert ProteusPredictor(base / "transformer", device="cpu").encoder.backend in ("hf", "fused")


def test_every_train_config_field_is_a_documented_flag():
    import argparse
    import dataclasses

    from proteus_train.cli import add_arguments
    from proteus_train.config import TrainConfig

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    by_dest = {action.dest: action for action in parser._actions}
    for f in dataclasses.fields(TrainConfig):
        assert f.metadata.get("help"), f"TrainConfig.{f.name} has no help"
        assert f.name in by_dest and by_dest[f.name].help, f"TrainConfig.{f.name} is not a documented flag"


def test_format_help_names_every_loadable_format():
    import dataclasses

    from proteus_train.config import TrainConfig
    from proteus_train.data.common import FORMATS

    help_text = next(f.metadata["help"] for f in dataclasses.fields(TrainConfig) if f.name == "format")
    assert [name for name in FORMATS if name not in help_text] == []


def test_train_stores_the_reference_p_and_calibrate_p_restores_it_alone(trained, tmp_path):
    import shutil

    from litellm_proteus.artifact import MANIFEST_FILE, read_manifest

    base, data, _ = trained
    cal = read_manifest(base / "a").calibration
    assert len(cal.requested_p_ref) == len(cal.requested) > 0
    assert len(cal.frontier_p_ref) == len(cal.frontier_policy_tau) > 0
    assert all(0.0 <= p <= 1.0 for p in cal.requested_p_ref + cal.frontier_p_ref)
    # an artifact without the reference (as trained before it existed) gets it back, p_calibration untouched
    copy = tmp_path / "copy"
    shutil.copytree(base / "a", copy)
    manifest = json.loads((copy / MANIFEST_FILE).read_text())
    del manifest["calibration"]["requested_p_ref"], manifest["calibration"]["frontier_p_ref"]
    (copy / MANIFEST_FILE).write_text(json.dumps(manifest))
    assert read_manifest(copy).calibration.frontier_p_ref == []
    done = subprocess.run([sys.executable, "-m", "litellm_proteus.cli", "calibrate-p", "--artifact", str(copy),
                           "--reference-only", "--quiet"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    restored = read_manifest(copy)
    assert restored.calibration.frontier_p_ref == pytest.approx(cal.frontier_p_ref, abs=1e-4)
    assert restored.calibration.requested_p_ref == pytest.approx(cal.requested_p_ref, abs=1e-4)
    assert restored.p_calibration == read_manifest(base / "a").p_calibration


def test_replay_degrade_and_fixed_deltas_report_per_tier(trained, tmp_path):
    base, _, _ = trained
    cmd = [sys.executable, "-m", "litellm_proteus.cli", "replay", "--artifact", str(base / "a"), "--out", str(tmp_path),
           "--length", "300", "--shift-at", "100", "--window", "50", "--label-delay", "20", "--scenarios", "degrade",
           "--labels", "0", "1", "--fixed-deltas", "-0.01", "0.01", "--quiet"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    body = metrics["scenarios"]["degrade"]
    assert body["shift_at"] == 100 and (tmp_path / "replay_degrade.png").exists()
    for tier in body["tiers"].values():
        assert tier["degraded"]["model"] in MODELS and tier["degraded"]["drop"] == 0.15
        assert 0 < tier["degraded"]["static_share"] <= 1 and 0.0 <= tier["p_ref"] <= 1.0
        assert set(tier["fixed_delta"]) == {"-0.01", "0.01"}
        assert all(isinstance(tier[label]["cost_vs_static"], float) for label in ("labels 0", "labels 1"))


def test_calibration_measures_on_at_most_calibration_rows_per_part(trained):
    base, data, summary = trained
    manifest = json.loads((base / "a" / "manifest.json").read_text())
    split = manifest["data"]["split"]
    # below the cap every validation and out-of-fold training row is used
    assert manifest["metrics"]["calibration_rows"] == {"val": split["val"], "out_of_fold": split["train"]}
    capped = base / "capped"
    run_train(data, capped, "--seed", "3", "--calibration-rows", "12", "--perf-epoch-rows", "40")
    metrics = json.loads((capped / "manifest.json").read_text())["metrics"]
    assert metrics["calibration_rows"] == {"val": 12, "out_of_fold": 12}
    assert load_artifact(capped)[1].tau_range[0] <= load_artifact(capped)[1].tau_range[1]
    capped_manifest = json.loads((capped / "manifest.json").read_text())
    assert capped_manifest["training"]["config"]["perf_epoch_rows"] == 40
    # the margin counts the rows calibration measured on: 12 per part widen it
    assert capped_manifest["calibration"]["margin"] >= manifest["calibration"]["margin"]


def _train_main(tmp_path, capsys, *flags, data=None):
    """``proteus train`` in this process: (exit status, stderr)."""
    from litellm_proteus.cli import main

    if data is None:
        data = tmp_path / "logs.csv"
        if not data.exists():
            write_logs(data, n=30)
    status = main(["train", "--data", str(data), "--out", str(tmp_path / "art"), "--steps", "100", "--quiet", *flags])
    return status, capsys.readouterr().err


@pytest.mark.parametrize("lo_hi", [["0.9", "0.8"], ["0.8", "0.8"], ["0", "0.5"], ["0.5", "1.5"], ["nan", "0.9"]])
def test_a_tau_range_out_of_order_or_bounds_is_an_error_naming_the_flag(tmp_path, capsys, lo_hi):
    status, err = _train_main(tmp_path, capsys, "--tau-range", *lo_hi)
    assert status == 2 and "error: --tau-range LO HI must satisfy 0 < LO < HI <= 1" in err and "Traceback" not in err
    assert not (tmp_path / "art").exists()


@pytest.mark.parametrize("seed", ["-1", str(2**32)])
def test_a_seed_numpy_cannot_take_is_an_error_naming_the_flag_and_range(tmp_path, capsys, seed):
    status, err = _train_main(tmp_path, capsys, "--seed", seed)
    assert status == 2 and f"error: --seed must be an integer from 0 to 4294967295 (2**32 - 1); got {seed}" in err


def test_the_seed_range_ends_are_accepted():
    from proteus_train.config import TrainConfig

    assert TrainConfig(seed=0).seed == 0 and TrainConfig(seed=2**32 - 1).seed == 2**32 - 1
    with pytest.raises(ValueError, match="--seed must be an integer"):
        TrainConfig(seed=1.5)


def test_an_out_path_that_is_a_file_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    import proteus_train.pipeline as pipeline

    def no_work(config):
        raise AssertionError("the data was loaded before --out was checked")

    monkeypatch.setattr(pipeline, "load_training_data", no_work)
    write_logs(tmp_path / "logs.csv", n=30)
    a_file = tmp_path / "art"
    a_file.write_text("not a directory")
    status, err = _train_main(tmp_path, capsys)
    assert status == 2 and f"error: --out '{a_file}' is a file, not a directory" in err
    assert a_file.read_text() == "not a directory"
    from litellm_proteus.cli import main

    status = main(["train", "--data", str(tmp_path / "logs.csv"), "--out", str(a_file / "sub"), "--quiet"])
    assert status == 2 and f"lies under '{a_file}', which is a file" in capsys.readouterr().err
    # a folder with files but no artifact: training would write over them (its encoder folder replaced)
    project = tmp_path / "project"
    (project / "encoder").mkdir(parents=True)
    (project / "encoder" / "notes.txt").write_text("keep")
    status = main(["train", "--data", str(tmp_path / "logs.csv"), "--out", str(project), "--quiet"])
    assert status == 2 and f"--out '{project}' holds files but no PROTEUS artifact (manifest.json)" in capsys.readouterr().err
    assert (project / "encoder" / "notes.txt").read_text() == "keep"


def test_a_tau_range_no_operating_point_reaches_is_an_error_and_writes_no_artifact(tmp_path):
    data = write_logs(tmp_path / "logs.csv", n=150)
    out = tmp_path / "art"
    cmd = [sys.executable, "-m", "litellm_proteus.cli", "train", "--data", str(data), "--out", str(out),
           "--steps", "60", "--perf-epochs", "5", "--oof-folds", "2", "--boost-steps", "20",
           "--cache-dir", str(tmp_path / "cache"), "--quiet", "--tau-range", "0.97", "0.99"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "error: the declared tau range cannot be met: the best operating point reaches validation accuracy" in done.stderr
    assert "under the bottom of --tau-range [0.9700, 0.9900]" in done.stderr
    assert "pass a lower --tau-range, LO at most" in done.stderr and "leave --tau-range out" in done.stderr
    assert "No artifact was written" in done.stderr and not out.exists()


def test_a_derived_tau_range_small_data_cannot_keep_is_written_with_a_warning_naming_the_lo(tmp_path):
    data = write_logs(tmp_path / "logs.csv", n=150)
    out = tmp_path / "art"
    cmd = [sys.executable, "-m", "litellm_proteus.cli", "train", "--data", str(data), "--out", str(out),
           "--steps", "60", "--perf-epochs", "5", "--oof-folds", "2", "--boost-steps", "20",
           "--cache-dir", str(tmp_path / "cache"), "--calibration-z", "6"]  # a margin no operating point clears
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the declared tau range cannot be met" in done.stderr and "pass --tau-range with LO at most" in done.stderr
    assert "which its validation rows cannot vouch for" in done.stderr and (out / "manifest.json").exists()


def test_a_log_with_fewer_training_rows_than_the_batch_size_is_refused_before_any_encoding(tmp_path, capsys, monkeypatch):
    import proteus_train.pipeline as pipeline

    class Encoded(Exception):
        pass

    def no_encoding(*args, **kwargs):
        raise Encoded

    monkeypatch.setattr(pipeline, "training_encoder", no_encoding)
    write_logs(tmp_path / "logs.csv", n=40)  # 28 training rows
    status, err = _train_main(tmp_path, capsys)
    assert status == 2 and "Traceback" not in err
    assert "error: --batch-size 32 is more than the 28 training rows of this log" in err
    assert "Pass --batch-size 28 or less" in err and not (tmp_path / "art").exists()
    with pytest.raises(Encoded):  # a batch the rows can fill passes the check
        _train_main(tmp_path, capsys, "--batch-size", "28")


def test_a_run_that_fails_while_writing_leaves_the_artifact_it_replaces_whole(tmp_path, monkeypatch):
    """Retraining into the folder a proxy serves: until the new artifact is complete the old one is
    untouched, and no staging folder is left behind."""
    import shutil
    from pathlib import Path

    import proteus_train.pipeline as pipeline
    from litellm_proteus.artifact import DEFAULT_ARTIFACT_DIR, load_artifact

    served = shutil.copytree(DEFAULT_ARTIFACT_DIR, tmp_path / "served")
    before = (served / "manifest.json").read_bytes()
    model, manifest = load_artifact(served)

    def dies_midway(directory, *args):
        (Path(directory) / "model.safetensors").write_bytes(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(pipeline, "save_artifact", dies_midway)
    with pytest.raises(OSError, match="disk full"):
        pipeline.write_artifact(served, model, manifest, served / "encoder")
    assert (served / "manifest.json").read_bytes() == before and load_artifact(served)[1].models == manifest.models
    assert sorted(p.name for p in tmp_path.iterdir()) == ["served"]
    monkeypatch.undo()
    pipeline.write_artifact(served, model, manifest, DEFAULT_ARTIFACT_DIR / "encoder")  # a whole run replaces it
    assert load_artifact(served)[1].models == manifest.models
    assert sorted(p.name for p in tmp_path.iterdir()) == ["served"]


@pytest.mark.parametrize("flags, fragment", [
    (["--calibration-step", "0.5"], "--calibration-step must be a number in (0, 0.05]; got 0.5"),
    (["--selection-temperature", "1e-300"], "--selection-temperature must be a number in [0.0001, 10]; got 1e-300"),
    (["--lambda-init", "1e308"], "--lambda-init must be <= --lambda-max (20); got 1e+308"),
    (["--lambda-max", "1e308", "--lambda-init", "1e308"], "--lambda-max must be a number in (0, 10000]; got 1e+308"),
])
def test_flags_past_what_training_can_compute_are_refused_naming_the_flag(tmp_path, capsys, flags, fragment):
    status, err = _train_main(tmp_path, capsys, *flags)
    assert status == 2 and f"error: {fragment}" in err and "Traceback" not in err
    assert not (tmp_path / "art").exists()


def test_the_bounded_training_flags_accept_their_defaults_and_ends():
    from proteus_train.config import TrainConfig

    TrainConfig()
    TrainConfig(calibration_step=0.05, selection_temperature=1e-4, lambda_max=1e4, lambda_init=1e4)
    TrainConfig(selection_temperature=10.0, lambda_init=0.0)
