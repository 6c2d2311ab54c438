"""``proteus simulate-log`` then ``proteus train --data DECISION_LOG [--init]`` end to end, on a
small synthetic full-information log (no shared data needed)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from litellm_proteus.artifact import DEFAULT_ARTIFACT_DIR, load_artifact, read_manifest
from proteus_train.data import load_logs

TINY = ["--steps", "40", "--perf-epochs", "4", "--oof-folds", "2", "--boost-steps", "10"]
SLOTS = read_manifest(DEFAULT_ARTIFACT_DIR).models  # the logging router is the bundled artifact
TEMPLATES = ["What is {a} plus {b}?", "Write a haiku about {a} cats.", "Sort the list {a}, {b}, 3 in Python."]


def write_wide_log(path, n=240, seed=0, accuracy=(0.85, 0.99)):
    """A full-information log over the bundled artifact's slots (accuracy from the cheapest slot to the
    dearest, costs 1e-5-1e-2).  By default every model is right 85-99 % of the time, so that a log of
    a few hundred labels can vouch for the bottom of the bundled artifact's tau range (0.78)."""
    rng = np.random.default_rng(seed)
    accuracy, cost = np.linspace(*accuracy, len(SLOTS)), np.geomspace(1e-5, 1e-2, len(SLOTS))
    rows = []
    for i in range(n):
        row = {"sample_id": f"s{i}", "prompt": TEMPLATES[i % 3].format(a=int(rng.integers(2, 99)), b=int(rng.integers(2, 99)))}
        for j, model in enumerate(SLOTS):
            row[model] = float(rng.random() < accuracy[j])
            row[f"{model}|total_cost"] = cost[j]
        rows.append(row)
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def train_process(data, out, *extra) -> subprocess.CompletedProcess:
    done = proteus("train", "--data", data, "--out", out, *TINY, "--cache-dir", out.parent / "cache", "--quiet", *extra)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def proteus(*args, cwd=None) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "litellm_proteus.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=600, cwd=cwd)
    return done


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    base = tmp_path_factory.mktemp("bandit")
    data = write_wide_log(base / "logs.csv")
    config = base / "config.yaml"
    config.write_text("router_settings:\n  routing_strategy_args:\n    tiers: {premium: 0.85, economy: 0.79}\n")
    logs = {}
    for name, rate in (("explore", "0.5"), ("greedy", "0")):
        done = proteus("simulate-log", "--data", data, "--split", "train", "--artifact", DEFAULT_ARTIFACT_DIR, "--config", config,
                       "--out", base / name, "--requests", "600", "--label-share", "0.5", "--exploration-rate", rate,
                       "--rotate", "500", "--cache-dir", base / "cache")
        assert done.returncode == 0, done.stderr[-3000:]
        logs[name] = json.loads(done.stdout)
    # the shadow log's models are right 95-99 % of the time: its shadow rows then bound the policy
    # above the bottom of the tau range
    sure = write_wide_log(base / "sure.csv", accuracy=(0.95, 0.99))
    done = proteus("simulate-log", "--data", sure, "--split", "train", "--artifact", DEFAULT_ARTIFACT_DIR, "--tiers",
                   "premium=0.85", "economy=0.79", "--out", base / "shadow", "--requests", "600", "--label-share", "0.5",
                   "--exploration-rate", "0", "--shadow-share", "0.5", "--cache-dir", base / "cache")
    assert done.returncode == 0, done.stderr[-3000:]
    logs["shadow"] = json.loads(done.stdout)
    # exploration and shadow rows together: a bandit log of this size alone vouches for no tau with
    # --init (its validation rows' own bound caps), so the training tests read this one
    done = proteus("simulate-log", "--data", sure, "--split", "train", "--artifact", DEFAULT_ARTIFACT_DIR, "--config", config,
                   "--out", base / "explore-shadow", "--requests", "600", "--label-share", "0.5", "--exploration-rate", "0.5",
                   "--shadow-share", "0.5", "--cache-dir", base / "cache")
    assert done.returncode == 0, done.stderr[-3000:]
    logs["explore-shadow"] = json.loads(done.stdout)
    return base, logs


def test_simulated_log_is_rotated_jsonl_in_the_proxys_schema(logged):
    from litellm_proteus.decision_log import SCHEMA

    base, logs = logged
    files = sorted((base / "explore").glob("decisions-*.jsonl"))
    assert len(files) >= 2  # 600 decisions + outcomes + feedback at 500 records per file
    records = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    kinds = {r["type"] for r in records}
    assert kinds == {"decision", "outcome", "feedback"} and all(r["schema"] == SCHEMA for r in records)
    decisions = [r for r in records if r["type"] == "decision"]
    chosen = {d["call_id"]: d["candidates"][d["chosen"]]["deployment_id"] for d in decisions}
    assert all(r["deployment_id"] == chosen[r["call_id"]] for r in records if r["type"] == "outcome")
    # a deployment is named by its model, so logs of artifacts with other slot orders never share an id
    assert all(c["deployment_id"] == f"sim-{c['model']}" for r in records if r["type"] == "decision" for c in r["candidates"])
    assert len(decisions) == 600 and {d["tier"] for d in decisions} == {"premium", "economy"}
    # what the proxy logs for a request whose key's metadata names its tier: one key (hash) per tier
    from litellm_proteus.engine import TAU_SOURCES
    from litellm_proteus.tiers import hash_key

    assert {d["tau_source"] for d in decisions} == {"key_metadata"} and "key_metadata" in TAU_SOURCES
    assert all(d["key_hash"] == hash_key(f"sk-simulated-{d['tier']}") for d in decisions)
    assert all(d["state_key"] == f"tier:{d['tier']}@{d['tau']:.4g}" for d in decisions)
    explored = [d for d in decisions if d["propensity"] < 1]
    assert explored and logs["explore"]["explored"] > 0 and logs["greedy"]["explored"] == 0
    for d in explored:  # never below the policy's predicted accuracy
        chosen_p = d["candidates"][d["chosen"]]["p"]
        assert chosen_p >= min(c["p"] for c in d["candidates"])


def test_train_from_the_decision_log_with_init_records_provenance_and_support(logged):
    base, _ = logged
    done = train_process(base / "explore-shadow", base / "from-log", "--init", DEFAULT_ARTIFACT_DIR)
    manifest = read_manifest(base / "from-log")
    record = manifest.data.model_dump()
    assert record["source"] == "decision-log"
    prov = record["provenance"]
    assert prov["n_decisions"] == 600 and 0.4 < prov["label_share"] < 0.6 and prov["n_exploration_on"] > 0
    assert record["init"]["weights_sha256"] == read_manifest(DEFAULT_ARTIFACT_DIR).weights_sha256
    assert set(record["off_policy"]) >= {"unlabelled_models", "unsupported_tau", "explored_share"}
    assert manifest.models == read_manifest(DEFAULT_ARTIFACT_DIR).models and manifest.tau_train_range == read_manifest(DEFAULT_ARTIFACT_DIR).tau_train_range
    curve = manifest.metrics["off_policy_curve"]
    assert len(curve) == len(manifest.metrics["val_curve"]["policy_tau"]) and all("ci95" in point for point in curve)
    assert all("head_free_lower" in point for point in curve)  # every point's head-free bound is recorded
    load_artifact(base / "from-log")  # loads (hashes, bundled encoder)
    assert "dropped" in done.stderr  # unlabelled requests are counted, not silently used


def test_the_head_is_refitted_on_doubly_robust_targets_by_default(logged):
    base, _ = logged
    done_dr = train_process(base / "explore-shadow", base / "dr-art", "--init", DEFAULT_ARTIFACT_DIR)
    done_none = train_process(base / "explore-shadow", base / "none-art", "--init", DEFAULT_ARTIFACT_DIR,
                              "--propensity-weighting", "none")
    assert "doubly robust refit" in done_dr.stderr and "doubly robust refit" not in done_none.stderr
    assert read_manifest(base / "dr-art").training["config"]["propensity_weighting"] == "dr"
    dr, _ = load_artifact(base / "dr-art")
    plain, _ = load_artifact(base / "none-art")
    # same seed, same stage 1: the doubly robust refit is what separates the served heads
    assert not torch.allclose(dr.performance_head.weight, plain.performance_head.weight)


def test_without_exploration_the_trainer_warns_and_promises_nothing_the_log_cannot_vouch_for(logged):
    base, _ = logged
    out = base / "greedy-art"
    done = proteus("train", "--data", base / "greedy", "--out", out, *TINY, "--cache-dir", base / "cache", "--quiet",
                   "--init", DEFAULT_ARTIFACT_DIR)
    assert "OffPolicySupportWarning" in done.stderr and "no exploration" in done.stderr
    # the retrained policy leaves the logged choices, and the log saw nothing else: no tau to promise
    assert done.returncode == 2 and "error: the decision log vouches for no operating point" in done.stderr
    assert "and no operating point is supported" in done.stderr and "No artifact was written" in done.stderr
    assert "Traceback" not in done.stderr and not (out / "manifest.json").exists()


def test_shadow_rows_load_as_full_information_rows_beside_the_decisions(logged):
    base, logs = logged
    files = sorted((base / "shadow").glob("shadow-*.jsonl"))
    rows = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    assert len(rows) == logs["shadow"]["shadow_rows"] and 240 < len(rows) < 360
    assert all(set(SLOTS) <= set(r) and {r["eval_name"] for r in rows} <= {"premium", "economy"} for r in rows)
    # the decision records are those of the same log without shadow rows (the shadow draw has its own stream)
    greedy = [json.loads(line)["call_id"] for f in sorted((base / "greedy").glob("decisions-*.jsonl")) for line in f.read_text().splitlines()]
    shadow = [json.loads(line)["call_id"] for f in sorted((base / "shadow").glob("decisions-*.jsonl")) for line in f.read_text().splitlines()]
    assert sorted(greedy) == sorted(shadow)
    log = load_logs([base / "shadow"])
    full = log.logged_choice < 0
    assert full.sum() == len(rows) and np.isnan(log.propensity[full]).all() and np.isfinite(log.scores[full]).all()
    assert (np.isfinite(log.scores[~full]).sum(axis=1) == 1).all()  # bandit rows: the chosen slot only
    assert log.provenance["n_shadow_rows"] == len(rows) and set(log.split) <= {"train", "val"}
    assert set(log.logged_tau[full].tolist()) <= {0.85, 0.79} and log.task is not None


def test_train_with_shadow_rows_counts_them_and_labels_every_model(logged):
    base, _ = logged
    train_process(base / "shadow", base / "shadow-art", "--init", DEFAULT_ARTIFACT_DIR)
    record = read_manifest(base / "shadow-art").data.model_dump()
    assert record["provenance"]["n_shadow_rows"] > 240
    assert record["off_policy"]["unlabelled_models"] == []  # shadow rows observe every slot, propensity-free
    done = proteus("eval", "--artifact", base / "shadow-art", "--log", base / "shadow", "--out", base / "promo-shadow",
                   "--cache-dir", base / "cache")
    assert done.returncode in (0, 3), done.stderr[-3000:]
    report = json.loads((base / "promo-shadow" / "promotion.json").read_text())
    assert done.returncode == (0 if report["promote"] else 3)  # the exit status is the verdict
    assert set(report["states"]) == {"tier:premium@0.85", "tier:economy@0.79"}  # a log with shadow rows: per state


def test_bad_flags_end_with_an_error(logged):
    base, _ = logged
    done = proteus("simulate-log", "--data", base / "logs.csv", "--config", base / "config.yaml", "--out", base / "x",
                   "--label-share", "1.5")
    assert done.returncode == 2 and "error: --label-share must lie in [0, 1]; got 1.5" in done.stderr
    done = proteus("simulate-log", "--data", base / "logs.csv", "--tiers", "premium=1.5", "--out", base / "x")
    assert done.returncode == 2 and "error: --tiers: 'premium=1.5' is not NAME=TAU with TAU in (0, 1]" in done.stderr
    done = proteus("train", "--data", base / "explore", "--out", base / "y", "--propensity-weighting", "snips")
    assert done.returncode == 2 and "--propensity-weighting must be one of ['dr', 'ips', 'none']" in done.stderr
    done = proteus("train", "--data", base / "explore", "--out", base / "y", "--validation-share", "1")
    assert done.returncode == 2 and "error: --validation-share must be a number in (0, 1); got 1.0" in done.stderr


def test_eval_with_a_log_prints_a_verdict_per_tier(logged):
    base, _ = logged
    if not (base / "from-log").exists():
        train_process(base / "explore-shadow", base / "from-log", "--init", DEFAULT_ARTIFACT_DIR)
    done = proteus("eval", "--artifact", base / "from-log", "--log", base / "greedy", "--out", base / "promo",
                   "--cache-dir", base / "cache")
    assert done.returncode in (0, 3), done.stderr[-3000:]
    report = json.loads((base / "promo" / "promotion.json").read_text())
    assert set(report["states"]) == {"tier:premium@0.85", "tier:economy@0.79"}
    assert isinstance(report["promote"], bool) and report["reasons"]
    assert done.returncode == (0 if report["promote"] else 3)
    for pair in report["states"].values():  # accuracy intervals stay in [0, 1]
        for side in pair.values():
            assert 0.0 <= side["ci95"][0] <= side["ci95"][1] <= 1.0
    assert "**Verdict: " in done.stdout and "overlaps" in report["warning"]  # both logs cover the same simulated hours
    done = proteus("eval", "--artifact", base / "from-log", "--baseline-artifact", DEFAULT_ARTIFACT_DIR, "--out", base / "x")
    assert done.returncode == 2 and "error: --baseline-artifact needs --log" in done.stderr
    # without --log the evaluation would carve a test split out of the rows the artifact trained on
    done = proteus("eval", "--artifact", base / "from-log", "--out", base / "y", "--cache-dir", base / "cache")
    assert done.returncode == 2 and "a decision log is not full-information test data" in done.stderr
    assert "--log LATER_DECISION_LOG" in done.stderr and "Traceback" not in done.stderr


def test_simulate_log_refuses_a_non_empty_out_and_force_replaces_the_simulated_files(logged, tmp_path):
    base, _ = logged
    out = tmp_path / "sim"
    common = ["simulate-log", "--data", base / "logs.csv", "--config", base / "config.yaml", "--out", out,
              "--requests", "50", "--cache-dir", base / "cache"]
    assert proteus(*common, "--seed", "1").returncode == 0
    first = sorted(p.name for p in out.iterdir())
    (out / "notes.txt").write_text("kept")
    done = proteus(*common, "--seed", "2")
    assert done.returncode == 2 and f"--out {out} is not empty" in done.stderr and "--force" in done.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(first + ["notes.txt"])  # nothing written
    assert ".proteus-simulate-log" in first  # the folder says who wrote it
    done = proteus(*common, "--seed", "2", "--force")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["deleted_files"] == len(first) - 1  # its JSONL files; the marker is rewritten
    assert (out / "notes.txt").read_text() == "kept"  # only the files simulate-log writes are deleted
    records = [json.loads(line) for p in out.glob("decisions-*.jsonl") for line in p.read_text().splitlines()]
    decisions = [r for r in records if r["type"] == "decision"]
    assert len(decisions) == 50 and {r["call_id"].split("-")[1] for r in records} == {"2"}  # the second run only


def test_simulate_log_refuses_a_non_empty_out_before_reading_the_data(tmp_path, capsys):
    from litellm_proteus.cli import main

    (tmp_path / "decisions-20260101T000000-1-0.jsonl").write_text("{}\n")
    argv = ["simulate-log", "--data", str(tmp_path / "missing.csv"), "--tiers", "a=0.8", "--out", str(tmp_path)]
    assert main(argv) == 2 and f"--out {tmp_path} is not empty (1 decision-log / shadow files, 0 other entries)" in capsys.readouterr().err
    # --force on a folder simulate-log did not write (a proxy's own log): refused, nothing deleted
    assert main(argv + ["--force"]) == 2 and "deletes only a folder simulate-log wrote" in capsys.readouterr().err
    assert (tmp_path / "decisions-20260101T000000-1-0.jsonl").read_text() == "{}\n"
    (tmp_path / ".proteus-simulate-log").write_text("")  # simulate-log's own marker is no "other entry"
    assert main(argv) == 2 and "(1 decision-log / shadow files, 0 other entries)" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert main(["simulate-log", "--data", "d", "--tiers", "a=0.8", "--out", str(tmp_path / "file")]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err


@pytest.mark.parametrize("flags, message", [
    (["--delay-s", "-1"], "--delay-s must be a number >= 0 (seconds); got -1.0"),
    (["--delay-s", "nan"], "--delay-s must be a number >= 0 (seconds); got nan"),
    (["--interval-s", "-1"], "--interval-s must be a number >= 0 (seconds); got -1.0"),
    (["--rotate", "0"], "--rotate must be an integer >= 1; got 0"),
    (["--seed", "-1"], "--seed must be an integer >= 0; got -1"),
    (["--requests", "-2"], "--requests must be an integer >= 0; got -2"),
    (["--label-share", "1.5"], "--label-share must lie in [0, 1]; got 1.5"),
    (["--start-ts", "1e18"], "--start-ts + --requests x --interval-s + --delay-s reaches 1e+18, past 9999-12-31"),
    (["--tiers", "premium=0.8", "premium=0.9"], "--tiers: tier 'premium' is given twice (premium=0.8 and premium=0.9)"),
])
def test_simulate_log_refuses_a_bad_flag_by_name_before_reading_or_writing_anything(tmp_path, capsys, flags, message):
    from litellm_proteus.cli import main

    out = tmp_path / "out"
    argv = ["simulate-log", "--data", str(tmp_path / "missing.csv"), "--out", str(out)]
    argv += flags if flags[0] == "--tiers" else ["--tiers", "premium=0.8", *flags]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"error: {message}" in err and "Traceback" not in err
    assert not out.exists()  # nothing created: a corrected rerun needs no --force


@pytest.mark.parametrize("tiers, fragment", [
    ("{premium: 1.7, economy: 0.79}", "routing_strategy_args.tiers: tier 'premium': tau must be a number in (0, 1]; got 1.7"),
    ("{premium: abc}", "routing_strategy_args.tiers.premium: Input should be a valid number"),
    ("{premium: true}", "routing_strategy_args.tiers.premium: Input should be a valid number"),
    ("[0.8]", "routing_strategy_args.tiers: Input should be a valid dictionary"),
    ("{premium: 0.8}\n    default_tier: gold", "default_tier 'gold' is not a tier; allowed: ['premium']"),
])
def test_simulate_log_validates_config_tiers_as_the_proxy_does(tmp_path, capsys, tiers, fragment):
    from litellm_proteus.cli import main

    config = tmp_path / "config.yaml"
    config.write_text(f"router_settings:\n  routing_strategy_args:\n    tiers: {tiers}\n")
    out = tmp_path / "out"
    assert main(["simulate-log", "--data", str(tmp_path / "missing.csv"), "--config", str(config), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--config {config}: router_settings." in err and fragment in err and "(0, 1]" in err
    assert not out.exists()


def test_config_tiers_reads_the_proxy_example_config():
    from pathlib import Path

    from proteus_train.simulate_log import config_tiers

    example = Path(__file__).parents[3] / "config.example.yaml"
    assert config_tiers(example) == {"premium": 0.85, "standard": 0.82, "economy": 0.79}


def test_the_policy_trained_on_a_decision_log_never_sees_a_label_and_every_calibration_row_bounds_it(logged, monkeypatch):
    """PPO scores every slot with the out-of-fold head on a decision log, so its reward uses no
    training label, and the head-free bounds are taken over training and validation rows; a
    full-information log trains PPO on its labels."""
    from proteus_train import pipeline
    from proteus_train.config import TrainConfig

    base, _ = logged
    seen: list[np.ndarray] = []
    bounds: list[bool] = []
    train_policy, calibration = pipeline.train_policy, pipeline.off_policy_calibration

    def recording_policy(model, emb, scores, *args, **kwargs):
        seen.append(np.asarray(scores))
        return train_policy(model, emb, scores, *args, **kwargs)

    def recording_calibration(*args, **kwargs):
        bounds.append(kwargs["validation_cap"])
        return calibration(*args, **kwargs)

    monkeypatch.setattr(pipeline, "train_policy", recording_policy)
    monkeypatch.setattr(pipeline, "off_policy_calibration", recording_calibration)
    tiny = dict(steps=40, perf_epochs=4, oof_folds=2, boost_steps=10, cache_dir=str(base / "cache"), progress=False)
    pipeline.train(TrainConfig(data=[str(base / "explore-shadow")], **tiny), base / "label-blind")
    assert np.isnan(seen[-1]).all() and bounds == [False]  # log alone: no label, every calibration row
    curve = read_manifest(base / "label-blind").metrics["off_policy_curve"]
    assert all(point["full_information_rows"] > 0 for point in curve)
    pipeline.train(TrainConfig(data=[str(base / "explore-shadow")], init=DEFAULT_ARTIFACT_DIR, **tiny), base / "label-blind-init")
    assert np.isnan(seen[-1]).all() and bounds == [False, True]  # --init: capped by the validation rows too
    pipeline.train(TrainConfig(data=[str(base / "logs.csv")], **tiny), base / "full-information")
    assert np.isfinite(seen[-1]).all()  # every model's outcome of every training row


def test_shadow_rows_load_with_the_probability_each_score_was_drawn(tmp_path):
    """The served model: 1; the others: call_share (or, on a row without it, the share of its other
    candidates it scored); a row without served: 1 everywhere.  A bad call_share is an error naming it."""
    from litellm_proteus.shadow_rows import shadow_row

    models = ["a", "b", "c"]
    costs = {m: 0.001 for m in models}
    rows = [shadow_row(call_id="c0", prompt="q0", tier="t", tau=0.8, models=models, scores={"a": 1.0, "b": 0.0},
                       costs=costs, served="a", call_share=0.5, ts=1.0),
            shadow_row(call_id="c1", prompt="q1", tier="t", tau=0.8, models=models, scores={"b": 1.0, "c": 1.0},
                       costs=costs, served="b", call_share=0.5, ts=2.0)]
    older = shadow_row(call_id="c2", prompt="q2", tier="t", tau=0.8, models=models, scores={"c": 1.0, "a": 0.0},
                       costs=costs, served="c", call_share=1.0, ts=3.0)
    del older["call_share"]  # a row written without the field: 1 of its 2 other candidates scored
    unknown = shadow_row(call_id="c3", prompt="q3", tier="t", tau=0.8, models=models, scores={"a": 1.0, "b": 1.0, "c": 0.0},
                         costs=costs, served="a", call_share=1.0, ts=4.0)
    del unknown["served"], unknown["call_share"]
    (tmp_path / "shadow-20260101T000000-1-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows + [older, unknown]))
    log = load_logs([tmp_path])
    order = [log.sample_ids.index(f"shadow:c{i}") for i in range(4)]
    inclusion = log.inclusion[order][:, [log.models.index(m) for m in models]]
    assert inclusion.tolist() == [[1.0, 0.5, 0.5], [0.5, 1.0, 0.5], [0.5, 0.5, 1.0], [1.0, 1.0, 1.0]]
    bad = dict(rows[0], call_share=0.0, shadow_of="c9", sample_id="shadow:c9")
    (tmp_path / "shadow-20260101T000000-1-1.jsonl").write_text(json.dumps(bad) + "\n")
    with pytest.raises(ValueError, match=r"field 'call_share' must lie in \(0, 1\]; got 0"):
        load_logs([tmp_path])


def test_init_fixes_the_architecture_and_refuses_a_flag_it_would_ignore():
    """With --init the initial artifact's weights fix the architecture: the run and its record take
    the artifact's values, and a flag set to another one is an error naming it, not ignored."""
    from proteus_train.config import TrainConfig
    from proteus_train.pipeline import init_architecture

    architecture = read_manifest(DEFAULT_ARTIFACT_DIR).architecture.model_copy(
        update={"hidden_dim": 128, "selection_temperature": 0.1})
    taken = init_architecture(TrainConfig(init="A"), architecture)
    assert taken == {"hidden_dim": 128, "use_critic": architecture.use_critic, "fixed_gamma": architecture.fixed_gamma,
                     "selection_temperature": 0.1}
    assert init_architecture(TrainConfig(init="A", hidden_dim=128), architecture)["hidden_dim"] == 128  # agreeing: fine
    with pytest.raises(ValueError, match=r"--init A: the initial artifact fixes the architecture; leave out --no-critic "
                                         r"False \(the artifact's: True\), --fixed-gamma 3\.0 \(the artifact's: None\)"):
        init_architecture(TrainConfig(init="A", use_critic=False, fixed_gamma=3.0), architecture)
