"""kiwi's predictions against training steps measured on a real GPU: kiwi's `gpt` preset model trained with
plain PyTorch 2.11 on one NVIDIA H200 (bench/gpu_step_bench.py; the measurements are in bench/measurements/,
docs/fidelity.md "One GPU"). Each row is replayed by kiwi plan's simulator here, on the H200's datasheet."""
import importlib.util
import json
import os
import statistics

import pytest

import kiwi  # noqa: F401  (the extension the bench calls through kiwi.cli)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _bench():
    spec = importlib.util.spec_from_file_location("gpu_step_bench", os.path.join(ROOT, "bench", "gpu_step_bench.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MEASUREMENTS = os.path.join(ROOT, "bench", "measurements")


def _rows(name, profile=None):
    with open(os.path.join(MEASUREMENTS, name)) as f:
        return _bench().compare_rows(json.load(f), profile and os.path.join(MEASUREMENTS, profile))


@pytest.fixture(scope="module")
def rows():
    return _rows("h200-gpt-steps.json")


def test_every_measured_configuration_is_predicted(rows):
    assert len(rows) == 20
    assert {r["dtype"] for r in rows} == {"f32", "bf16"}
    assert all(r["predicted_seconds"] > 0 and r["predicted_tensor_bytes"] > 0 for r in rows)


def test_step_times_within_15_percent_on_average(rows):
    errors = [abs(r["time_error"]) for r in rows]
    assert statistics.mean(errors) <= 0.15, errors


def test_misaligned_lm_head_is_priced_at_the_fallback_rate(rows):
    # bf16 with a 50,257-word vocabulary: cuBLAS leaves the tensor cores for the LM head (three GEMMs,
    # about half the step at batch 8). Priced as aligned, these rows were predicted 37-62% too fast.
    bf16 = [r["time_error"] for r in rows if r["dtype"] == "bf16" and r["layers"] == 4 and r["batch"] >= 4]
    assert len(bf16) == 6
    assert statistics.mean(bf16) > -0.35, bf16


def test_peak_tensor_memory_within_7_percent_on_average_and_never_far_below(rows):
    # kiwi's peak counts the backward's transients (the loss's gradients: two logits-sized tensors in
    # PyTorch's cross entropy); without them it was 11% off on average and 23% below at batch 16.
    errors = [r["tensor_error"] for r in rows]
    assert statistics.mean(abs(e) for e in errors) <= 0.07, errors
    assert min(errors) >= -0.15, errors


def test_an_h100_too():
    # The same bench's --quick rows on an H100 (80 GB HBM3, 3.35 TB/s): the H100's datasheet, same model.
    h100 = _rows("h100-gpt-steps.json")
    assert len(h100) == 8
    assert statistics.mean(abs(r["time_error"]) for r in h100) <= 0.15
    assert statistics.mean(abs(r["tensor_error"]) for r in h100) <= 0.07
    assert min(r["tensor_error"] for r in h100) >= 0.0  # upper bounds at batch 4 and 16


def test_device_bound_rows_on_two_h200s_with_the_first_ones_profile():
    # The same bench on a second H200 a month later (17 of the 20 rows): the rows at batch 4 and above
    # ran within 0.5% of the first machine's; with the first machine's `kiwi profile` both sets are
    # predicted within 10% on average (7.0% and 7.9%; the datasheet: 15.1% and 14.7%).
    second = _rows("h200-gpt-steps-2026-11-27.json", "h200-profile.json")
    first = _rows("h200-gpt-steps.json", "h200-profile.json")
    assert len(second) == 17
    for rows in (first, second):
        bound = [r["time_error"] for r in rows if r["batch"] >= 4]
        assert len(bound) >= 12
        assert statistics.mean(abs(e) for e in bound) <= 0.10, bound


@pytest.fixture(scope="module")
def fused():
    # bench/gpu_step_bench.py measure --fused: the bf16 rows with F.scaled_dot_product_attention (cuDNN's
    # FlashAttention kernels on the H200), the materialized batch-8 rows again, and sequences of 4096.
    return _rows("h200-gpt-fused-steps.json")


def test_fused_attention_rows_within_15_percent_on_average(fused):
    rows = [r for r in fused if r["attention"] == "fused"]
    assert len(rows) == 12 and len(fused) == 16
    assert statistics.mean(abs(r["time_error"]) for r in rows) <= 0.15


def test_the_devices_profile_prices_fused_attention_rows_within_10_percent():
    # `kiwi profile --device cuda` on the same H200 (h200-profile.json: GEMMs and attention timed on the
    # device with CUDA events): its GEMM and FlashAttention rates in place of the datasheet's 0.75 and 0.6.
    rows = [r for r in _rows("h200-gpt-fused-steps.json", "h200-profile.json") if r["attention"] == "fused"]
    assert statistics.mean(abs(r["time_error"]) for r in rows) <= 0.10


def test_fused_attention_memory_has_no_score_matrices(fused):
    # Peak tensors are upper bounds within 10% (batch 1 aside: fp32 gradients of the master weights).
    rows = [r for r in fused if r["attention"] == "fused" and r["batch"] > 1]
    assert all(0.0 <= r["tensor_error"] <= 0.10 for r in rows), [r["tensor_error"] for r in rows]
    # At a sequence of 4096 the materialized scores, softmax and dropout mask dominate the peak; fused, the
    # model needs about a third, measured and predicted.
    long = {(r["attention"], r["checkpointed"]): r for r in fused if r["seq"] == 4096}
    measured = long["fused", False]["peak_allocated_bytes"] / long["materialized", False]["peak_allocated_bytes"]
    predicted = (long["fused", False]["predicted_tensor_bytes"]
                 / long["materialized", False]["predicted_tensor_bytes"])
    assert measured < 0.4 and predicted < 0.4
    assert predicted == pytest.approx(measured, rel=0.1)


def test_the_op_level_peak_of_the_f32_batch_8_step(rows):
    # kiwi graph's checkpoint-all peak (the op-level simulator the rematerialization and joint solvers
    # share) of the measured model against its peak allocated bytes: 12.96 GiB of 13.03 with the loss's
    # backward as PyTorch's two kernels and Adam's states resident all step (10.28 GiB with neither).
    measured = next(r for r in rows if r["dtype"] == "f32" and r["batch"] == 8 and not r["checkpointed"])
    run = kiwi.cli("graph", "--model", "gpt", "--batch", "8", "--json")
    assert run.returncode == 0, run.stderr
    predicted = run.json()["checkpoint_all_peak_bytes"]
    assert predicted == pytest.approx(measured["peak_allocated_bytes"], rel=0.02)


def test_hf_llama_plans_peak_on_the_h200_as_kiwi_counts(tmp_path):
    """scripts/gpu_check.sh's Llama (bf16, 32,000 words) run by kiwi.torch.parallel on one H200 (docs/distributed.md,
    "On GPUs"): kiwi's peak within 11% below the measured in every run, where it was 6-24% below before kiwi
    counted HuggingFace's fp32 loss (and the runs held their 0.1-2 GiB of bf16 logits, which the runner no
    longer does)."""
    from kiwi.torch.distributed.plan import parse_plan
    from kiwi.torch.parallel.job import predicted
    with open(os.path.join(MEASUREMENTS, "h200-gpu-check-2026-12-04.json")) as f:
        check = json.load(f)
    for name in ("config", "cluster"):
        with open(tmp_path / f"{name}.json", "w") as f:
            json.dump(check[name], f)
    errors = {}
    for command, run in check["runs"].items():
        plan = dict(run["plan"], hf_config=str(tmp_path / "config.json"), cluster=str(tmp_path / "cluster.json"))
        kiwi_now = predicted(parse_plan(plan, command), None, os.path.join(MEASUREMENTS, "h200-profile.json"))
        measured = run["peak_memory_bytes"]
        errors[command] = kiwi_now["stages"][0]["peak_memory_bytes"] / measured - 1
        printed = run["kiwi_printed"]["stages"][0]["peak_memory_bytes"] / measured - 1
        assert printed < errors[command]  # the count the run printed (no fp32 loss) was further below
    assert len(errors) == 4 and all(-0.11 < e < 0 for e in errors.values()), errors
