"""`kiwi profile`: measures this machine with PyTorch; its file changes kiwi's predictions."""
import json
import os
import re
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import kiwi  # noqa: E402
import kiwi.torch as kt  # noqa: E402
from kiwi import profile as kp  # noqa: E402


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One real run of `kiwi profile` (the C++ command, which runs the Python one) on the small grid with
    2 gloo processes."""
    out = tmp_path_factory.mktemp("profile") / "cpu2.json"
    run = kiwi.cli("profile", "--grid", "small", "--processes", "2", "--out", str(out))
    assert run.returncode == 0, run.stderr
    # progress lines, each with the time the profile has run
    assert re.search(r"^kiwi profile: \[ *\d+\.\d s\] gemm f32", run.stderr, re.MULTILINE), run.stderr
    assert re.search(r"^kiwi profile: \[ *\d+\.\d s\] wrote ", run.stderr, re.MULTILINE), run.stderr
    return out, json.loads(out.read_text())


def test_the_python_command_takes_profile():
    run = subprocess.run([sys.executable, "-m", "kiwi", "profile", "--help"], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert "--processes" in run.stdout and "--grid" in run.stdout


def test_profiles_a_machine_where_kiwi_cannot_be_imported(tmp_path):
    # A GPU machine with torch alone: bench/gpu_step_bench.py loads profile.py by its path, and every
    # measurement must run without `import kiwi` (the memory-bound ops once imported the runtime's loss
    # from kiwi.torch.distributed, and the H200's profile would have died after its GEMMs).
    out = tmp_path / "torch-only.json"
    code = ("import importlib.util, sys; sys.modules['kiwi'] = None; "  # `import kiwi` raises ImportError
            f"spec = importlib.util.spec_from_file_location('p', {kp.__file__!r}); "
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
            f"sys.exit(m.main(['--grid', 'small', '--quiet', '--out', {str(out)!r}]))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    device = json.loads(out.read_text())["device"]
    assert device["op_bandwidth_gbps"]["vocab_parallel_cross_entropy"] > 0
    assert "reference_step" not in device  # timed by kiwi's runtime, which is not there: the chain's time stands
    assert "runner_op_time" not in device  # nor kiwi.torch's runner


def test_the_file_has_every_measurement(measured):
    _, doc = measured
    device = doc["device"]
    assert doc["kiwi_profile_version"] == 1 and doc["unit"] == "s"
    assert device["overhead"] == "additive" and device["kernel_time"] > 0 and device["memory_bandwidth_gbps"] > 0
    shapes = kp.gemm_shapes(kp.GRIDS["small"])
    assert len(device["gemm"]) == 3 * len(shapes)  # forward and both gradients per shape
    assert {g["op"] for g in device["gemm"]} == {"matmul", "matmul_grad_a", "matmul_grad_b"}
    assert {c["op"] for c in device["conv"]} == {f"conv2d{d}{g}" for d in ("", "_depthwise")
                                                 for g in ("", "_grad_x", "_grad_w")}
    assert all(g["time"] > 0 for g in device["gemm"] + device["conv"])
    assert {"relu", "gelu_grad", "max_pool", "layernorm", "adam", "fused_adam", "cross_entropy", "nll_loss_grad",
            "cross_entropy_grad"} <= set(device["op_bandwidth_gbps"])  # torch 2.13 has a fused CPU Adam
    assert set(device["optimizer_time_per_tensor"]) == {"adam", "fused_adam", "sgd"}
    # The small GPT's training pass kiwi calibrates its per-op time from: a few hundred ops, each at least
    # the chain's time.
    reference = dict(device["reference_step"])
    assert reference.pop("time") > 100 * device["kernel_time"]
    assert reference == kp.REFERENCE_STEP
    # kiwi.torch's runner on a small captured GPT: its per-op time beyond the ops' work, more than the
    # chain's bare op (the runner finds each op's arguments and replays views in Python).
    assert device["runner_op_time"] > device["kernel_time"]
    # The ops a CPU runs well below its copy bandwidth, measured apart.
    assert {"safe_softmax", "log_softmax", "tanh", "tanh_grad", "silu", "silu_grad", "exp"} <= set(
        device["op_bandwidth_gbps"])
    # Fused attention: each shape forward and backward, causal or not, with and without dropout.
    shapes = kp.attention_shapes(kp.GRIDS["small"], "cpu")
    assert len(device["attention"]) == 8 * len(shapes) > 0
    assert {(a["op"], a["causal"], a["dropout"]) for a in device["attention"]} == {
        (op, c, p) for op in ("attention", "attention_grad") for c in (False, True) for p in (0.0, kp.ATTENTION_DROPOUT)}
    assert all(a["time"] > 0 for a in device["attention"])
    ops = {(c["op"], c["devices"]) for c in doc["collectives"]}
    assert ops == {("all_reduce", 2), ("all_gather", 2), ("reduce_scatter", 2), ("send_recv", 2)}
    sizes = sorted(c["bytes"] for c in doc["collectives"] if c["op"] == "all_reduce")
    assert sizes == kp.GRIDS["small"]["collective_bytes"]


def test_the_default_grid_times_language_model_heads():
    """GEMMs as wide as a vocabulary (n = 32768) beside the square grid, each shape once."""
    shapes = kp.gemm_shapes(kp.GRIDS["default"])
    assert len(shapes) == len(set(shapes))
    heads = [s for s in shapes if s[1] == 32768]
    assert (64, 32768, 64) in heads and all(2 * m * n * k <= kp.GRIDS["default"]["flop_cap"] for m, n, k in heads)
    assert not [s for s in kp.gemm_shapes(kp.GRIDS["small"]) if s[1] > 1024]


def test_collectives_are_timed_after_compute(monkeypatch):
    """On a CPU each timed call follows a spell of compute, as in a training step; the spell is not
    timed."""
    calls = []
    monkeypatch.setattr(kp, "_busy", lambda seconds: calls.append(("busy", seconds)))
    seconds = kp._collective_seconds(lambda: calls.append(("call", 0)), 1 << 10, "cpu")
    assert seconds < kp.COMPUTE_BETWEEN_COLLECTIVES
    timed = calls[1:]  # the first call warms up
    assert timed[0::2] == [("busy", kp.COMPUTE_BETWEEN_COLLECTIVES)] * (len(timed) // 2)
    assert timed[1::2] == [("call", 0)] * (len(timed) // 2) and len(timed) == 2 * 40 * kp.BATCHES


def test_kernels_never_read_what_earlier_kernels_wrote(monkeypatch):
    """GEMMs write their outputs apart from the operands later kernels read: fed back, the values grew
    to inf and NaN over the grid, and a CPU ran the memory-bound ops on them up to 3x slower."""
    monkeypatch.setattr(kp, "POOL_BYTES", 1 << 20)
    pool = kp.OperandPool(torch.device("cpu"))
    kernels = kp._gemm_kernels(pool, 32, 48, 16, torch.float32)
    before = pool.pools[torch.float32].clone()
    for _ in range(3):
        for _, _, calls in kernels:
            for call in calls:
                call()
    assert torch.equal(pool.pools[torch.float32], before)
    # The outputs are in the second buffer, each the product of its set's operands.
    x, w, dy, y, dx, dw = pool.sets([(32, 16), (48, 16), (32, 48), (32, 48), (32, 16), (48, 16)], torch.float32,
                                    written=(3, 4, 5))[-1]
    scratch = pool.scratch[torch.float32].untyped_storage().data_ptr()
    assert all(t.untyped_storage().data_ptr() == scratch for t in (y, dx, dw))
    assert torch.allclose(y, x @ w.t(), atol=1e-4) and torch.allclose(dx, dy @ w, atol=1e-4)
    assert torch.allclose(dw, dy.t() @ x, atol=1e-4)


def test_a_profile_changes_the_predictions(measured, cnn):
    path, _ = measured
    model, x, y = cnn
    plain = kt.capture(model, (x,), labels=y)
    profiled = kt.capture(model, (x,), labels=y, profile=str(path))
    assert profiled.summary()["compute_cost"] != plain.summary()["compute_cost"]
    # The C++ reader accepts the file as written: the same numbers through a path and as a dict.
    assert kiwi.graph_summary(profiled.graph, profiled.cluster, json.loads(path.read_text())) == profiled.summary()


def test_a_measured_shape_is_priced_at_its_measured_time(transformer):
    """Every matmul of the graph given a sample of exactly its shape: kiwi's time for it is the sample's."""
    model, ids, y = transformer
    cap = kt.capture(model, (ids,), labels=y)
    samples, want = {}, {}
    for n in cap.graph["nodes"]:
        if n["kind"] == "matmul" and n["op"] == "matmul":
            m = 1
            for d in n["shape"][:-1]:
                m *= d
            shape = (m, n["shape"][-1], round(n["flops"] / (2 * m * n["shape"][-1])))
            samples.setdefault(shape, 1e-3 * (len(samples) + 1))
            want[n["id"]] = samples[shape]
    assert len(samples) >= 2
    gemm = [{"op": "matmul", "m": m, "n": n, "k": k, "dtype": "f32", "time": t} for (m, n, k), t in samples.items()]
    profile = {"kiwi_profile_version": 1, "unit": "s", "device": {"kernel_time": 0.0, "gemm": gemm}}
    costs = kiwi.graph_summary(cap.graph, cap.cluster, profile)["node_costs"]
    for node_id, seconds in want.items():
        assert costs[node_id] == pytest.approx(seconds, rel=1e-9)


def test_bad_arguments_exit_2_with_one_line(tmp_path, capsys):
    for argv, message in [
        (["--grid", "huge", "--out", str(tmp_path / "p.json")], "invalid choice"),
        (["--dtypes", "f8", "--out", str(tmp_path / "p.json")], "--dtypes: unknown dtype 'f8'"),
        (["--processes", "0", "--out", str(tmp_path / "p.json")], "--processes: must be at least 1"),
        (["--device", "tpu", "--out", str(tmp_path / "p.json")], "--device: must be cpu or cuda"),
        (["--out", str(tmp_path / "missing" / "p.json")], "directory"),
    ]:
        try:
            code = kp.main(argv)
        except SystemExit as e:  # argparse's own errors
            code = e.code
        assert code == 2, argv
        assert message in capsys.readouterr().err
    assert not os.listdir(tmp_path)  # nothing half-written


def test_a_bad_profile_file_is_named(tmp_path, cnn):
    model, x, y = cnn
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"kiwi_profile_version": 1, "unit": "s", "device": {"gemm": [{"m": 1}]}}))
    with pytest.raises(kiwi.BadInputError, match="bad.json: device.gemm\\[0\\]"):
        kt.capture(model, (x,), labels=y, profile=str(bad)).summary()


def _small_capture(profile):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    return kt.capture_joint(model, (x,), labels=y, workspaces="none", profile=profile)


def test_a_generic_capture_pays_the_runners_per_op_time(tmp_path):
    """A profile's runner_op_time is what each priced op of a generic capture pays (kiwi.torch gives it
    to the loader as op_time); an op_time the file gives itself stands; a path is read the same."""
    device = {"kernel_time": 1e-6, "memory_bandwidth_gbps": 10, "overhead": "additive"}
    doc = {"kiwi_profile_version": 1, "unit": "s", "device": device}

    def costs(profile):
        cap = _small_capture(profile)
        return kiwi.graph_summary(cap.graph, cap.cluster, cap.profile)["node_costs"]

    plain = costs(doc)
    runner = costs(dict(doc, device=dict(device, runner_op_time=1e-4)))
    paid = [r - p for p, r in zip(plain, runner) if p > 0]
    assert paid and all(d == pytest.approx(1e-4 - 1e-6) for d in paid)
    assert costs(dict(doc, device=dict(device, runner_op_time=1e-4, op_time=3e-6))) == pytest.approx(
        [c + 2e-6 if c > 0 else 0 for c in plain])
    path = tmp_path / "runner.json"
    path.write_text(json.dumps(dict(doc, device=dict(device, runner_op_time=1e-4))))
    assert costs(str(path)) == pytest.approx(runner)
    from kiwi.torch.costs import runner_profile
    assert runner_profile(str(tmp_path / "missing.json")) == str(tmp_path / "missing.json")  # the loader names it


def test_an_executors_per_op_time_is_calibrated_from_one_timed_step():
    """kiwi.calibrated_op_seconds: (the step's time - its ops' priced work) / the ops that pay a per-op
    time, as `kiwi profile` calibrates kiwi.torch's runner."""
    device = {"kernel_time": 1e-6, "memory_bandwidth_gbps": 10, "overhead": "additive"}
    cap = _small_capture(None)

    def total(op_time):
        profile = {"kiwi_profile_version": 1, "unit": "s", "device": dict(device, op_time=op_time)}
        return kiwi.graph_summary(cap.graph, cap.cluster, profile)["compute_cost"], profile

    work, profile = total(0.0)
    ops = total(1.0)[0] - work
    assert ops == pytest.approx(round(ops)) and ops > 5
    assert kiwi.calibrated_op_seconds(cap.graph, work + ops * 7e-6, cap.cluster, profile) == pytest.approx(7e-6)
    assert kiwi.calibrated_op_seconds(cap.graph, work / 2, cap.cluster, profile) == 0.0  # no slower than its work
    with pytest.raises(kiwi.BadInputError, match="must be positive"):
        kiwi.calibrated_op_seconds(cap.graph, 0.0, cap.cluster, profile)
