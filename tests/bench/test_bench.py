"""benchmarks.speed at a tiny size: real models, the real train step, real timing, real JSON; no speed
targets asserted."""

import json
import math
import subprocess
import sys

import pytest
import torch
from helpers import ROOT
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.speed import common, decode, runner, sweep, trees
from benchmarks.speed import models as bench_models
from models import MODELS, build_model
from platform.training.loss import loss_sums, teacher_forcing, to_source

TINY = dict(size="tiny", tokens=64, length=8, vocab=50, warmup=0, steps=1, rounds=2, decode_sentences=2,
            decode_length=5, tree_batch=4, tree_dim=8)


@pytest.fixture(autouse=True)
def one_thread():
    """As the CLI on a CPU: two OpenMP threads on a shared 2-core machine stall each other."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def positive(value) -> bool:
    return isinstance(value, float) and math.isfinite(value) and value > 0


def test_models_section_times_every_model_and_the_torch_reference():
    result = bench_models.bench_models(common.make_settings("cpu", **TINY))
    assert set(result["models"]) == set(MODELS)
    for name, entry in result["models"].items():
        assert positive(entry["tokens_per_s"]) and len(entry["tokens_per_s_rounds"]) == 2, name
        assert entry["params"] > 0 and math.isfinite(entry["last_loss"]), name
        assert positive(entry["ratio_vs_transformer"]) and positive(entry["ratio_vs_reference"]), name
    assert result["models"]["transformer"]["ratio_vs_transformer"] == 1.0
    assert "mfu" not in result["models"]["seq2seq"]  # MFU only where the FLOP count applies
    assert result["models"]["transformer"]["mfu"] is None  # a CPU has no known peak
    reference = result["reference"]
    assert positive(reference["torch_nn_transformer_tokens_per_s"]) and reference["ratio_vs_reference"] == 1.0
    assert result["batch"] == {"sentences": 8, "length": 8, "target_tokens": 64}


def test_reference_matches_the_baseline_in_size_and_mfu_follows_peak_flops():
    settings = common.make_settings("cpu", **TINY, models=("transformer",), peak_flops=1e12)
    result = bench_models.bench_models(settings)
    baseline = result["models"]["transformer"]
    # same dimensions, embeddings and tied projection: only nn.Transformer's final norms and
    # packed key bias differ
    assert abs(result["reference"]["params"] - baseline["params"]) < 0.01 * baseline["params"]
    assert baseline["mfu"] == pytest.approx(baseline["achieved_flops_per_s"] / 1e12)
    assert 0 < baseline["mfu"] < 1


def test_flop_formula_agrees_with_torchs_flop_counter():
    """On the math attention path every matmul is an aten op FlopCounterMode counts."""
    config = bench_models.model_config("transformer", "tiny")
    model = build_model(config, 50, 50)
    batch = bench_models.random_batch(3, 7, 50, "cpu")
    counter = FlopCounterMode(display=False)
    tgt_in, tgt_out = teacher_forcing(batch)
    with sdpa_kernel(SDPBackend.MATH), counter:
        loss_sums(model(to_source(batch), tgt_in), batch, tgt_out, 0.1, config).token_loss.backward()
    expected = bench_models.transformer_train_flops(config, 3, 7, 7, 50)
    assert counter.get_total_flops() == pytest.approx(expected, rel=0.02)


def test_decoding_with_and_without_the_cache_gives_the_same_hypotheses():
    result = decode.bench_decode(common.make_settings("cpu", **TINY))
    for name in ("transformer", "dbsa"):
        entry = result[name]
        assert entry["same_hypotheses"] is True
        assert positive(entry["incremental_sentences_per_s"]) and positive(entry["full_recompute_sentences_per_s"])
        assert positive(entry["speedup"])
    assert result["beam"] == 4 and result["max_output_length"] == 17


def test_tree_section_reports_batched_and_per_sentence_times():
    result = trees.bench_trees(common.make_settings("cpu", **TINY))
    for name in ("tree_gru", "tree_lstm", "gumbel_tree_lstm"):
        entry = result[name]
        assert positive(entry["batched_ms"]) and positive(entry["per_sentence_ms"]) and positive(entry["speedup"])
        assert entry["met"] == (entry["speedup"] >= 5.0)


def test_targets_compare_per_round_ratios_and_leave_unmeasured_ones_open():
    report = {"models": {"transformer": {"tokens_per_s_rounds": [100.0, 50.0]},
                         "dbsa": {"tokens_per_s_rounds": [80.0, 45.0]},
                         "deprel": {"tokens_per_s_rounds": [50.0, 20.0]}},
              "reference": {"tokens_per_s_rounds": [100.0, 60.0]},
              "trees": {"tree_gru": {"speedup": 7.0, "met": True}, "batch": 4}}
    targets = runner.evaluate_targets(report, common.make_settings("cpu"))
    assert targets["dbsa_vs_transformer"] == {"target": 0.85, "measured": pytest.approx(0.85), "met": True}
    assert targets["deprel_vs_transformer"]["met"] is False  # median of 0.5 and 0.4
    assert targets["transformer_vs_torch_nn_transformer"]["measured"] == pytest.approx((1.0 + 50 / 60) / 2)
    assert targets["transformer_rel_vs_transformer"]["met"] is None  # not timed
    assert targets["tree_gru_batched_vs_loop"]["met"] is True
    assert targets["transformer_bf16_mfu"]["met"] is None  # only on a GPU


def test_sections_and_settings_are_checked():
    assert runner.select_sections(None, skip_ray=True) == ["models", "decode", "trees"]
    assert runner.select_sections("trees,sweep", skip_ray=False) == ["trees", "sweep"]
    with pytest.raises(ValueError, match="unknown section"):
        runner.select_sections("models,speed", skip_ray=False)
    with pytest.raises(ValueError, match="unknown model"):
        common.make_settings("cpu", models=("transformer", "lstm"))
    assert common.make_settings("cpu", quick=True, tokens=100).tokens == 100  # explicit values win over --quick
    assert common.make_settings("cuda").bf16 and common.make_settings("cuda").size == "paper"


def test_cli_without_ray_mlflow_optuna_writes_the_json_and_skips_the_ray_sections(tmp_path):
    """With torch and ``models/`` alone: those imports fail, the model sections (the real train step) still run."""
    out = tmp_path / "bench.json"
    script = (
        "import sys\n"
        "for name in ('ray', 'mlflow', 'optuna', 'pyarrow', 'sacrebleu', 'sacremoses', 'yaml', 'sentencepiece'):\n"
        "    sys.modules[name] = None  # import fails: as if not installed\n"
        "from benchmarks.speed import runner\n"
        f"sys.exit(runner.main(['--device', 'cpu', '--quick', '--size', 'tiny', '--tokens', '64', '--length', '8',"
        f" '--vocab', '50', '--models', 'transformer,dbsa', '--only', 'models,ddp,sweep', '--out', {str(out)!r}]))\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "torch.nn.Transformer" in result.stdout and "ray not installed" in result.stdout

    def no_nan(constant):
        raise AssertionError(f"not strict JSON: {constant}")

    report = json.loads(out.read_text(), parse_constant=no_nan)
    assert set(report["models"]) == {"transformer", "dbsa"}
    assert report["reference"]["torch_nn_transformer_tokens_per_s"] > 0
    assert report["ddp"] == {"skipped": "ray not installed"} and report["sweep"] == {"skipped": "ray not installed"}
    assert report["device"]["type"] == "cpu" and report["device"]["threads"] == 1
    assert report["config"]["size"] == "tiny" and report["sections"] == ["models", "ddp", "sweep"]
    assert report["targets"]["dbsa_vs_transformer"]["measured"] > 0


def test_sweep_timings_come_from_the_trials_mlflow_runs(tmp_path):
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    experiment = client.create_experiment("bench-sweep")
    parent = client.create_run(experiment, start_time=1_000_000, tags={"sweep_parent": "s"})
    for trial, opened, ready in (("a", 1_010_000, 1_014_000), ("b", 1_011_000, 1_017_000)):
        run = client.create_run(experiment, start_time=opened, tags={"trial_id": trial})
        client.log_batch(run.info.run_id, metrics=[Metric("num_parameters", 123.0, ready, 0)])
        client.set_terminated(run.info.run_id, end_time=ready + 20_000)
    client.set_terminated(parent.info.run_id)
    timings = sweep.sweep_timings(uri, "bench-sweep", started=1_000.0, finished=1_050.0)
    assert timings["num_trials"] == 2
    assert timings["tune_start_to_first_trial_run_s"] == pytest.approx(10.0)
    assert timings["tune_start_to_first_step_s"] == pytest.approx(14.0)
    assert timings["median_trial_startup_s"] == pytest.approx(5.0)  # 4 s and 6 s
    assert timings["sweep_wall_s"] == pytest.approx(50.0)
    spans = [t["duration_s"] for t in timings["trials"]]  # from the runs' recorded start/end times
    assert spans == [pytest.approx(24.0), pytest.approx(26.0)]


def test_full_recompute_decoder_matches_the_cached_step_on_one_prefix():
    model = build_model(bench_models.model_config("dbsa", "tiny"), 50, 50).eval()
    src = bench_models.random_source(2, 6, 50, torch.Generator().manual_seed(0))
    tokens = torch.tensor([[2, 7, 9], [2, 11, 4]])
    with torch.no_grad():
        encoded = model.encode(src)
        cached, full = model.start_state(encoded), decode.FullRecompute(model)
        prefix = full.start_state(encoded)
        for t in range(tokens.shape[1]):
            expected, cached = model.step(encoded, cached, tokens[:, t])
            got, prefix = full.step(encoded, prefix, tokens[:, t])
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert prefix.tolist() == tokens.tolist()
