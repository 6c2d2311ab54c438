import json
from pathlib import Path

import pytest
import torch

from litellm_proteus.artifact import (
    DEFAULT_ARTIFACT_DIR,
    MANIFEST_FILE,
    WEIGHTS_FILE,
    ArtifactError,
    load_artifact,
    read_manifest,
)
from litellm_proteus.encoder import STATIC_TABLE_FILE


def test_round_trip_preserves_weights_and_manifest(make_artifact):
    directory = make_artifact(["a", "b", "c"], seed=3)
    model, manifest = load_artifact(directory)
    assert manifest.models == ["a", "b", "c"]
    assert manifest.weights_sha256
    torch.manual_seed(0)
    emb = torch.randn(2, 384)
    model2, _ = load_artifact(directory)
    assert torch.equal(model.route(emb, 0.5, torch.zeros(2, 3)).scores, model2.route(emb, 0.5, torch.zeros(2, 3)).scores)


def test_missing_directory_and_files(tmp_path, make_artifact):
    with pytest.raises(ArtifactError, match="does not exist"):
        load_artifact(tmp_path / "nope")
    a_file = tmp_path / "manifest.json"
    a_file.write_text("{}")
    with pytest.raises(ArtifactError, match="is a file, not a directory"):
        load_artifact(a_file)
    directory = make_artifact(["a", "b"])
    (directory / WEIGHTS_FILE).unlink()
    with pytest.raises(ArtifactError, match=WEIGHTS_FILE):
        load_artifact(directory)


def test_corrupt_weights_detected_by_hash(make_artifact):
    directory = make_artifact(["a", "b"])
    data = bytearray((directory / WEIGHTS_FILE).read_bytes())
    data[-10] ^= 0xFF
    (directory / WEIGHTS_FILE).write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="weights_sha256"):
        load_artifact(directory)


def _edit_manifest(directory, **changes):
    path = directory / MANIFEST_FILE
    raw = json.loads(path.read_text())
    for key, value in changes.items():
        raw[key] = value
    path.write_text(json.dumps(raw))


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"models": ["a", "b", "c"]}, "n_models"),
        ({"models": ["a", "a"]}, "unique"),
        ({"tau_range": [0.9, 0.8]}, "tau_range"),
        ({"format_version": 99}, "format_version"),
        ({"cost_normalization": {"space": "usd", "low": 0, "high": 1}}, "space"),
        ({"calibration": {"frontier_policy_tau": [0.8], "frontier_accuracy": [], "frontier_cost_usd": []}}, "frontier_"),
        (
            {"calibration": {"frontier_policy_tau": [0.7, 0.8], "frontier_accuracy": [0.8, 0.8], "frontier_cost_usd": [1, 2]}},
            "frontier_accuracy must be strictly increasing",
        ),
        # NaN passes every order check (a comparison with it is False): refused as a value
        ({"calibration": {"margin": float("nan")}}, "calibration.margin"),
        ({"calibration": {"requested": [0.8, float("nan")], "policy_tau": [0.8, 0.9]}}, "calibration.requested"),
        ({"avg_output_tokens": {"a": float("nan")}}, "avg_output_tokens"),
        ({"avg_output_tokens": {"a": -5.0}}, "avg_input_tokens / avg_output_tokens / avg_cost_usd must be >= 0; negative for"),
        ({"avg_cost_usd": {"a": -1e-3}}, r"avg_cost_usd must be >= 0; negative for \['a'\]"),
        ({"avg_output_tokens": {"a": 5.0, "z": 9e9}}, r"name models that are no slot: \['z'\]"),
        ({"p_calibration": {"slots": [{"method": "isotonic", "x": [0.1, 0.9], "y": [0.2, 1.4]},
                                      {"method": "identity"}], "fitted_on": "validation"}},
         r"isotonic calibration y must lie in \[0, 1\]"),
    ],
)
def test_manifest_mismatch_names_the_field(make_artifact, changes, field):
    directory = make_artifact(["a", "b"])
    _edit_manifest(directory, **changes)
    with pytest.raises(ArtifactError, match=field):
        load_artifact(directory)


@pytest.mark.parametrize("part, field, value, message", [
    ("encoder", "pooling", "cls", "pooling"),
    ("architecture", "gamma_min", 9.0, r"gamma_min \(9.0\) must be > 0 and below gamma_max \(8.0\)"),
    ("architecture", "gamma_min", -1.0, r"gamma_min \(-1.0\) must be > 0"),
    ("architecture", "gamma_max", float("inf"), "gamma_max"),
])
def test_a_nested_field_no_runtime_can_serve_is_refused_naming_it(make_artifact, part, field, value, message):
    directory = make_artifact(["a", "b"])
    raw = json.loads((directory / MANIFEST_FILE).read_text())
    _edit_manifest(directory, **{part: {**raw[part], field: value}})
    with pytest.raises(ArtifactError, match=message):
        load_artifact(directory)


def test_tensor_shape_mismatch_is_reported(make_artifact):
    directory = make_artifact(["a", "b"])
    raw = json.loads((directory / MANIFEST_FILE).read_text())
    raw["architecture"]["hidden_dim"] = 128
    (directory / MANIFEST_FILE).write_text(json.dumps(raw))
    with pytest.raises(ArtifactError, match="shape"):
        load_artifact(directory)


def test_expected_models_and_encoder(make_artifact):
    directory = make_artifact(["a", "b"])
    with pytest.raises(ArtifactError, match="expected"):
        load_artifact(directory, expected_models=["b", "a"])
    with pytest.raises(ArtifactError, match="encoder"):
        load_artifact(directory, expected_encoder="microsoft/deberta-v3-small")


def test_invalid_json(make_artifact):
    directory = make_artifact(["a", "b"])
    (directory / MANIFEST_FILE).write_text("{not json")
    with pytest.raises(ArtifactError, match="JSON"):
        read_manifest(directory)


@pytest.mark.skipif(not (DEFAULT_ARTIFACT_DIR / MANIFEST_FILE).exists(), reason="default artifact not built")
def test_bundled_default_artifact_loads():
    model, manifest = load_artifact()
    assert len(manifest.models) == 11 and "gpt-4-1106-preview" in manifest.models
    # a static token table distilled from all-MiniLM-L6-v2 travels inside the artifact
    assert manifest.encoder.bundled and manifest.encoder.static_from == "all-MiniLM-L6-v2"
    assert manifest.encoder.embed_dim == 384
    lo, hi = manifest.tau_range
    assert 0 < lo < hi <= 1
    assert (DEFAULT_ARTIFACT_DIR / WEIGHTS_FILE).stat().st_size < 10 * 1024 * 1024
    table = DEFAULT_ARTIFACT_DIR / manifest.encoder.name / STATIC_TABLE_FILE
    assert table.stat().st_size < 30 * 1024 * 1024  # fp16, 30,522 x 384


@pytest.fixture
def bundled_copy(tmp_path):
    """The bundled default artifact, copied so that tests may break it."""
    import shutil

    return Path(shutil.copytree(DEFAULT_ARTIFACT_DIR, tmp_path / "artifact"))


def test_the_bundled_encoders_files_are_recorded_and_checked(bundled_copy):
    manifest = read_manifest(bundled_copy)
    assert {"tokenizer.json", STATIC_TABLE_FILE} <= set(manifest.encoder.files_sha256)
    load_artifact(bundled_copy)
    (bundled_copy / "encoder" / "tokenizer.json").unlink()  # would load as a 5-token stub vocabulary
    with pytest.raises(ArtifactError, match=r"tokenizer.json: missing \(listed in manifest encoder.files_sha256\)"):
        load_artifact(bundled_copy)


def test_a_changed_or_missing_encoder_is_named(bundled_copy):
    config = bundled_copy / "encoder" / "tokenizer_config.json"
    config.write_text(config.read_text().replace("true", "false"))
    with pytest.raises(ArtifactError, match="tokenizer_config.json: content hash does not match"):
        load_artifact(bundled_copy)
    import shutil

    shutil.rmtree(bundled_copy / "encoder")
    with pytest.raises(ArtifactError, match="bundled encoder folder 'encoder' is missing"):
        load_artifact(bundled_copy)


def test_save_artifact_records_a_bundled_encoder_already_in_place(tmp_path, build_random_artifact):
    from litellm_proteus.artifact import EncoderSpec, file_sha256, save_artifact

    model, manifest = build_random_artifact(["a", "b"], encoder=EncoderSpec(name="encoder", embed_dim=384, bundled=True))
    (tmp_path / "out" / "encoder" / "sub").mkdir(parents=True)
    (tmp_path / "out" / "encoder" / "vocab.txt").write_text("x\n")
    (tmp_path / "out" / "encoder" / "sub" / "table.bin").write_bytes(b"\x00\x01")
    saved = read_manifest(save_artifact(tmp_path / "out", model, manifest))
    assert saved.encoder.files_sha256 == {
        "sub/table.bin": file_sha256(tmp_path / "out" / "encoder" / "sub" / "table.bin"),
        "vocab.txt": file_sha256(tmp_path / "out" / "encoder" / "vocab.txt"),
    }


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"high": -1}, "cost_normalization.low must be <= cost_normalization.high"),
        ({"low": 0.01, "high": 0.001}, "cost_normalization.low must be <= cost_normalization.high"),
        ({"high": float("inf")}, "cost_normalization.low/high must be finite numbers"),
        ({"low": None}, "cost_normalization.low must be a number; got None"),
        ({"high": "lots"}, "cost_normalization.high must be a number; got 'lots'"),
        ({"low": 0.0, "high": 0.001}, r"cost_normalization.low must be > 0 in usd_per_call space"),
        ({"momentum": 1.5}, r"cost_normalization.momentum must lie in \[0, 1\)"),
        ({"lower_percentile": 95.0, "upper_percentile": 5.0}, "lower_percentile and upper_percentile"),
        ({"scale": 2.0}, r"cost_normalization has unknown field\(s\) \['scale'\]"),
    ],
)
def test_a_corrupted_cost_normalization_is_refused_naming_the_field(make_artifact, changes, message):
    from litellm_proteus.predictor import ProteusPredictor

    directory = make_artifact(["a", "b"])
    norm = {"space": "usd_per_call", "low": 4.6e-05, "high": 3e-03, "lower_percentile": 5.0, "upper_percentile": 95.0,
            "momentum": 0.9}
    _edit_manifest(directory, cost_normalization=norm)
    assert read_manifest(directory).cost_normalizer.high == 3e-03  # the intact bounds load
    _edit_manifest(directory, cost_normalization={**norm, **changes})
    with pytest.raises(ArtifactError, match=message):
        read_manifest(directory)
    with pytest.raises(ArtifactError, match=message):
        ProteusPredictor(directory, device="cpu")


def test_equal_cost_bounds_load_and_normalise_every_cost_to_zero(make_artifact):
    directory = make_artifact(["a", "b"])
    _edit_manifest(directory, cost_normalization={"space": "usd_per_call", "low": 0.001, "high": 0.001})
    assert read_manifest(directory).cost_normalizer.normalize([0.001, 0.002]).tolist() == [0.0, 1.0]


def test_the_bundled_artifacts_cost_normalization_loads():
    bundled = [DEFAULT_ARTIFACT_DIR, *sorted(p for p in (Path(DEFAULT_ARTIFACT_DIR).parent / "artifacts").iterdir() if p.is_dir())]
    assert len(bundled) >= 2
    for directory in bundled:
        norm = read_manifest(directory).cost_normalizer
        assert 0 < norm.low < norm.high


def test_weights_holding_nan_are_never_saved_nor_loaded(make_artifact, tmp_path):
    """The manifest refuses NaN; so do the weights: a NaN weight makes every score NaN, and a decision
    an argmax over NaN.  Checked by both loaders (torch and numpy) and when an artifact is saved."""
    from safetensors.torch import load_file, save_file

    from litellm_proteus.artifact import file_sha256, load_artifact_arrays, save_artifact

    directory = make_artifact(["a", "b"])
    model, manifest = load_artifact(directory)
    with torch.no_grad():
        model.performance_head.weight[0, 0] = float("nan")
    with pytest.raises(ArtifactError, match=r"tensors \['performance_head.weight'\] hold NaN or infinite values"):
        save_artifact(tmp_path / "out", model, manifest)
    assert not (tmp_path / "out" / WEIGHTS_FILE).exists()
    state = load_file(str(directory / WEIGHTS_FILE))
    state["gamma_raw"] = torch.tensor(float("inf"))
    save_file(state, str(directory / WEIGHTS_FILE), metadata={"format": "proteus-v1"})
    raw = json.loads((directory / MANIFEST_FILE).read_text())
    raw["weights_sha256"] = file_sha256(directory / WEIGHTS_FILE)  # a file that is whole, only its values are bad
    (directory / MANIFEST_FILE).write_text(json.dumps(raw))
    for load in (load_artifact, load_artifact_arrays):
        with pytest.raises(ArtifactError, match=r"tensors \['gamma_raw'\] hold NaN or infinite values"):
            load(directory)
