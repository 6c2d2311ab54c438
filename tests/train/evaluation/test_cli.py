"""``proteus eval`` end to end: real loader, real encoder (with its on-disk cache), real files out."""

from __future__ import annotations

import importlib.util
import json

import pandas as pd
import pytest

from litellm_proteus.artifact import DataRecord
from litellm_proteus.cli import main
from litellm_proteus.encoder_transformer import resolve_precision
from proteus_train.evaluation.baselines import BASELINE_NAMES
from proteus_train.evaluation.plots import FIGURES

from .conftest import SYNTH_MODELS, write_synthetic_routerbench

FAST = ["--seeds", "1", "--bootstrap", "100", "--dynamic-queries", "200", "--window", "50", "--quiet"]


def read_outputs(out):
    metrics = json.loads((out / "metrics.json").read_text())
    report = (out / "report.md").read_text()
    for name in FIGURES:
        assert (out / name).stat().st_size > 10_000, name
    return metrics, report


def test_eval_cli_on_the_recorded_data(tmp_path, make_artifact):
    csv = write_synthetic_routerbench(tmp_path / "logs.csv", n=200)
    record = DataRecord(paths=[str(csv)], sha256="0" * 64, split_seed=0)  # a hash that cannot match: must warn
    artifact = make_artifact(SYNTH_MODELS, tau_range=(0.6, 0.75), tau_train_range=(0.55, 0.8), data=record)
    out, cache = tmp_path / "out", tmp_path / "cache"
    with pytest.warns(UserWarning, match="hash differs"):
        code = main(["eval", "--artifact", str(artifact), "--out", str(out), "--cache-dir", str(cache), *FAST])
    assert code == 0
    metrics, report = read_outputs(out)
    assert metrics["dataset"] == "logs"
    assert metrics["models"] == SYNTH_MODELS
    assert metrics["n_train"] + metrics["n_val"] + metrics["n_test"] == 200  # 70/15/15, no NaN rows
    assert metrics["n_test"] == 30
    assert set(metrics["routers"]) == {"PROTEUS", *BASELINE_NAMES}
    assert metrics["latency"]["encoder_ms_per_query"] > 0  # measured on the real encoder
    assert metrics["latency"]["encoder_precision"] == resolve_precision("auto", "cpu")  # the proxy's default
    assert metrics["routers"]["KNN"]["re"] is not None
    assert any("hash differs" in w for w in metrics["data"]["warnings"])
    assert "> Warning:" in report and "## Table 1" in report
    assert f"proteus eval --artifact {artifact} --out {out}" in report
    assert list((cache / "embeddings").glob("*.sqlite"))  # embeddings cached for the next run


def test_eval_cli_bad_input(tmp_path, make_artifact, capsys):
    with pytest.raises(SystemExit):
        main(["eval", "--out", str(tmp_path), "--ablation", "no-equals-sign"])
    assert "--ablation takes NAME=DIR" in capsys.readouterr().err
    artifact = make_artifact(SYNTH_MODELS, data=DataRecord(paths=[str(tmp_path / "gone.csv")]))
    assert main(["eval", "--artifact", str(artifact), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "--data" in err and "Traceback" not in err
    bare = make_artifact(SYNTH_MODELS, seed=1)
    assert main(["eval", "--artifact", str(bare), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "manifest.data.paths is empty" in capsys.readouterr().err
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    assert main(["eval", "--artifact", str(bare), "--out", str(a_file / "report")]) == 2
    assert f"error: --out {a_file / 'report'}: lies under '{a_file}', which is a file" in capsys.readouterr().err
    for flag, value in (("--tau-step", "0"), ("--tau-step", "nan"), ("--llm-latency-s", "inf"), ("--headline-tau", "1.5")):
        assert main(["eval", "--artifact", str(bare), "--out", str(tmp_path / "o"), flag, value]) == 2
        assert capsys.readouterr().err.startswith(f"error: {flag} must be")


def test_eval_rejects_data_without_the_artifacts_models(tmp_path, make_artifact, capsys, monkeypatch):
    csv = write_synthetic_routerbench(tmp_path / "logs.csv", n=60)
    artifact = make_artifact(["tiny", "small", "gpt-9"])
    args = ["eval", "--artifact", str(artifact), "--data", str(csv), "--out", str(tmp_path / "o"), "--cache-dir", "", "--quiet"]
    assert main(args) == 2
    assert "lacks models the artifact routes to: ['gpt-9']" in capsys.readouterr().err
    monkeypatch.setenv("PROTEUS_DEBUG", "1")  # the traceback, for developers
    with pytest.raises(ValueError, match="lacks models the artifact routes to"):
        main(args)


@pytest.mark.skipif(importlib.util.find_spec("proteus_train.cli") is None, reason="the trainer (train.cli) is not there yet")
def test_train_then_eval(tmp_path, tiny_bert):
    """The CI pipeline: a short real training run on a small log, then its evaluation with an ablation."""
    csv = write_synthetic_routerbench(tmp_path / "logs.csv", n=200)
    cache = str(tmp_path / "cache")
    train = ["--data", str(csv), "--steps", "30", "--perf-epochs", "5", "--oof-folds", "2", "--quiet", "--cache-dir", cache,
             "--encoder", str(tiny_bert)]  # distilling a tiny BERT takes a second, MiniLM twenty
    assert main(["train", *train, "--out", str(tmp_path / "full")]) == 0
    assert main(["train", *train, "--out", str(tmp_path / "nocritic"), "--no-critic"]) == 0
    out = tmp_path / "eval"
    code = main(["eval", "--artifact", str(tmp_path / "full"), "--out", str(out), "--cache-dir", cache,
                 "--ablation", f"NoCritic={tmp_path / 'nocritic'}", "--precision", "fp32", *FAST])
    assert code == 0
    metrics, report = read_outputs(out)
    assert metrics["latency"]["encoder_precision"] == "fp32"
    assert len(list((tmp_path / "cache" / "embeddings").glob("*.sqlite"))) == 1  # fp32: training's cache, reused
    assert metrics["data"]["warnings"] == []  # same data, same hash, same split as recorded
    manifest = json.loads((tmp_path / "full" / "manifest.json").read_text())
    assert metrics["tau_range"] == manifest["tau_range"]
    assert metrics["n_test"] == manifest["data"]["split"]["test"]
    assert "NoCritic" in metrics["ablations"] and "NoCritic" in report.split("## Table 4")[1]
    # the artifact mixes frontier points, so the same artifact without mixing is scored beside it
    assert manifest["calibration"]["frontier_policy_tau"]
    assert "No-Mixing" in metrics["ablations"] and "No-Mixing" in report.split("## Table 4")[1]
    mixed = metrics["baselines_mixed_per_tau"]
    assert set(mixed) == {"Calibrated-Threshold", "OmniRouter-Style"}
    assert all([r["tau"] for r in rows] == [r["tau"] for r in metrics["per_tau"]] for rows in mixed.values())
    assert "Calibrated-Threshold + mixing" in report.split("## Table 2")[1].split("## Table 4")[0]
    no_mixing = metrics["ablations"]["No-Mixing"]
    assert f"{no_mixing['delta_mean_cost_pct']:+.0f}% cost" in report.split("## Table 4")[1]


@pytest.mark.shared_data
def test_eval_on_a_slice_of_routerbench(tmp_path, shared_data, make_artifact):
    """Real RouterBench rows (list-string prompts, file-named splits) through the real loader."""
    source = shared_data / "routerbench-partial"
    data = tmp_path / "rb"
    data.mkdir()
    pd.read_csv(source / "arc_challenge_train.csv").head(40).to_csv(data / "arc_challenge_train.csv", index=False)
    pd.read_csv(source / "arc_challenge_test.csv").head(20).to_csv(data / "arc_challenge_test.csv", index=False)
    artifact = make_artifact(data=DataRecord(paths=[str(data)], split_seed=0))
    out = tmp_path / "out"
    assert main(["eval", "--artifact", str(artifact), "--out", str(out), "--cache-dir", str(tmp_path / "c"), *FAST]) == 0
    metrics, _ = read_outputs(out)
    assert metrics["dataset"] == "rb"
    assert metrics["n_test"] + metrics["n_test_excluded"] == 20  # the test file's rows
    assert len(metrics["models"]) == 11


def test_a_report_is_named_after_its_data_not_after_its_first_split_file(tmp_path):
    from types import SimpleNamespace

    from proteus_train.evaluation.inputs import dataset_name

    folder = tmp_path / "zeroeval"
    folder.mkdir()
    splits = [folder / f"{name}.jsonl" for name in ("train", "val", "test")]
    for path in splits:
        path.write_text("")
    other = tmp_path / "mmlu.csv"
    other.write_text("")
    manifest = SimpleNamespace(data=SimpleNamespace(source="routerbench"))
    assert dataset_name(manifest, [str(p) for p in splits]) == "zeroeval"  # a dataset's split files
    assert dataset_name(manifest, [str(folder)]) == "zeroeval"
    assert dataset_name(manifest, [str(splits[2])]) == "test"  # one file: its stem
    assert dataset_name(manifest, [str(splits[0]), str(other)]) == "train+mmlu"
    assert dataset_name(manifest, []) == "routerbench"  # the artifact's own data


@pytest.mark.parametrize("seed", ["-1", str(2**32)])
def test_a_seed_numpy_and_torch_cannot_take_is_an_error_naming_the_flag_before_any_work(tmp_path, capsys, monkeypatch, seed):
    import proteus_train.evaluation.inputs as inputs

    monkeypatch.setattr(inputs, "load_inputs", lambda *a, **k: pytest.fail("loaded the data before checking --seed"))
    assert main(["eval", "--out", str(tmp_path / "o"), "--seed", seed, "--quiet"]) == 2
    assert f"error: --seed must be an integer from 0 to 4294967295 (2**32 - 1); got {seed}" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
