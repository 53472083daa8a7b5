"""The kiwi package over the C++ core: graphs, the remat planners, the simulator, plans, the CLI."""
import json
import os

import pytest

import kiwi


def mlp_forward(batch: int = 8, hidden: int = 16) -> dict:
    """x[8,16] -> matmul W1 -> relu -> matmul W2 -> cross entropy with labels."""
    nodes = [
        {"id": 0, "name": "x", "kind": "input", "dtype": "f32", "shape": [batch, hidden]},
        {"id": 1, "name": "w1", "kind": "parameter", "dtype": "f32", "shape": [hidden, hidden]},
        {"id": 2, "name": "h", "kind": "matmul", "op": "matmul", "dtype": "f32", "shape": [batch, hidden],
         "inputs": [0, 1]},
        {"id": 3, "name": "a", "kind": "elementwise", "op": "relu", "dtype": "f32", "shape": [batch, hidden],
         "inputs": [2]},
        {"id": 4, "name": "w2", "kind": "parameter", "dtype": "f32", "shape": [hidden, 4]},
        {"id": 5, "name": "logits", "kind": "matmul", "op": "matmul", "dtype": "f32", "shape": [batch, 4],
         "inputs": [3, 4]},
        {"id": 6, "name": "labels", "kind": "input", "dtype": "i64", "shape": [batch]},
        {"id": 7, "name": "loss", "kind": "loss", "op": "cross_entropy", "dtype": "f32", "shape": [],
         "inputs": [5, 6]},
    ]
    return {"kiwi_graph_version": 1, "name": "mlp", "nodes": nodes}


def test_version_and_names():
    assert kiwi.__version__.count(".") == 2
    assert {"auto", "ilp", "heuristic", "checkpoint-all"} <= set(kiwi.remat_solvers())
    assert "v100-nvlink-8" in kiwi.cluster_presets()


def test_sizes():
    assert kiwi.parse_bytes("1GiB") == 1 << 30
    assert kiwi.parse_bytes("16GB") == 16 * 10 ** 9
    assert kiwi.parse_bytes(123) == 123
    assert kiwi.format_bytes(512 << 20) == "512 MiB"
    with pytest.raises(kiwi.BadInputError, match="budget"):
        kiwi.parse_bytes("lots", "budget")
    # the C++ core counts bytes in int64: larger numbers are refused, not passed on as 301 digits
    assert kiwi.parse_bytes((1 << 63) - 1) == (1 << 63) - 1
    for bad in (1 << 63, 1e300, float("inf"), float("nan"), -1, -0.5):
        with pytest.raises(kiwi.BadInputError, match=r"budget: must be in \[0, 2\^63 - 1\] bytes"):
            kiwi.parse_bytes(bad, "budget")


def test_load_graph_refuses_endless_and_broken_files(tmp_path):
    if os.path.exists("/dev/zero"):  # read until bad_alloc before: now stops at the 1 GiB limit
        with pytest.raises(kiwi.BadInputError, match="larger than 1 GiB"):
            kiwi.load_graph("/dev/zero")
    broken = tmp_path / "g.json.gz"
    broken.write_bytes(b"\x1f\x8b" + b"not gzip at all")
    with pytest.raises(kiwi.BadInputError, match="corrupt gzip data"):
        kiwi.load_graph(str(broken))
    latin = tmp_path / "g.json"
    latin.write_bytes(b'{"name": "\xff"}')
    with pytest.raises(kiwi.BadInputError, match="not UTF-8"):
        kiwi.load_graph(str(latin))


def test_training_graph_reads_what_gradients_need():
    t = kiwi.build_training_graph(mlp_forward(), optimizer="adam")
    by_name = {n["name"]: n for n in t["nodes"]}
    # d(a W2)/dW2 reads a (node 3); relu's gradient reads relu's output; Adam adds m and v per weight.
    assert by_name["w2.grad"]["inputs"] == [3, by_name["logits.grad"]["id"]]
    assert by_name["h.grad"]["op"] == "relu_grad" and 3 in by_name["h.grad"]["inputs"]
    assert sum(n["kind"] == "optimizer_state" for n in t["nodes"]) == 4
    assert t["nodes"][-1]["kind"] == "optimizer"


def test_graph_errors_name_the_field():
    g = mlp_forward()
    g["nodes"][2]["shape"] = [8, 15]  # the matmul's output shape is wrong
    with pytest.raises(kiwi.BadInputError, match=r"node 2 'h'.*output.shape"):
        kiwi.parse_graph(g)
    with pytest.raises(kiwi.BadInputError, match="no loss"):
        kiwi.build_training_graph({"kiwi_graph_version": 1, "nodes": mlp_forward()["nodes"][:6]})
    with pytest.raises(kiwi.BadInputError, match="optimizer"):
        kiwi.build_training_graph(mlp_forward(), optimizer="lion")


def test_remat_schedule_replays_in_the_simulator():
    t = kiwi.build_training_graph(mlp_forward(batch=64, hidden=64), optimizer="sgd")
    summary = kiwi.graph_summary(t)
    peak = summary["checkpoint_all_peak_bytes"]
    assert summary["memory_lower_bound_bytes"] <= peak
    full = kiwi.solve_remat(t, peak, "checkpoint-all")
    assert full.feasible and full.peak_memory_bytes == peak
    sim = kiwi.simulate(t, kiwi.make_plan(full.schedule))
    assert sim["peak_memory_bytes"] == full.peak_memory_bytes
    assert sim["iteration_seconds"] == pytest.approx(full.compute_cost)
    assert len(sim["timeline"]) == len(full.schedule)
    assert max(sim["timeline"]) == peak


def test_infeasible_budget_names_the_smallest():
    t = kiwi.build_training_graph(mlp_forward(), optimizer="adam")
    with pytest.raises(kiwi.InfeasibleError, match="smallest budget kiwi can satisfy"):
        kiwi.solve_remat(t, 100, "heuristic")
    r = kiwi.solve_remat(t, 100, "heuristic", check=False)
    assert not r.feasible and r.smallest_known_budget_bytes > 100
    with pytest.raises(kiwi.BadInputError, match="solver"):
        kiwi.solve_remat(t, 100, "magic")
    assert issubclass(kiwi.InfeasibleError, kiwi.KiwiError)


def test_time_limits_must_be_positive_seconds():
    """Issue 18, item 12: -1, 0 and NaN were accepted; inf means no limit (clamped, no overflow)."""
    t = kiwi.build_training_graph(mlp_forward(batch=64, hidden=64), optimizer="sgd")
    peak = kiwi.graph_summary(t)["checkpoint_all_peak_bytes"]
    for bad in (-1, 0, float("nan"), "60"):
        with pytest.raises(kiwi.BadInputError, match="time_limit: must be a positive number of seconds"):
            kiwi.solve_remat(t, peak, "heuristic", time_limit=bad)
    assert kiwi.solve_remat(t, peak, "heuristic", time_limit=float("inf")).feasible
    for bad in (-1, 1.5, True, "2"):  # a negative count raised TimeLimitError after 0.02 s
        with pytest.raises(kiwi.BadInputError, match="threads: must be an integer >= 0"):
            kiwi.solve_remat(t, peak, "ilp", threads=bad)


def test_keep_set_schedule_drops_and_recomputes():
    t = kiwi.build_training_graph(mlp_forward(batch=64, hidden=64), optimizer="none")
    keep = [True] * len(t["nodes"])
    all_kept = kiwi.keep_set_schedule(t, keep)
    keep[3] = False  # the relu output: recomputed for the backward pass, from h (freed: no gradient reads it)
    dropped = kiwi.keep_set_schedule(t, keep)
    computes = [s["node"] for s in dropped["schedule"] if s["op"] == "compute"]
    assert computes.count(3) == 2 and computes.count(2) == 2 and computes.count(0) == 1
    assert dropped["compute_cost"] > all_kept["compute_cost"]
    with pytest.raises(kiwi.BadInputError, match="keep"):
        kiwi.keep_set_schedule(t, [True])


def test_plans_round_trip(tmp_path):
    t = kiwi.build_training_graph(mlp_forward(), optimizer="sgd")
    r = kiwi.solve_remat(t, kiwi.graph_summary(t)["checkpoint_all_peak_bytes"], "checkpoint-all")
    plan = kiwi.make_plan(r.schedule, graph="mlp", solver="test", peak_memory_bytes=r.peak_memory_bytes)
    path = tmp_path / "plan.json"
    kiwi.write_plan(plan, str(path))
    back = kiwi.read_plan(str(path))
    assert back["operator"]["schedule"] == plan["operator"]["schedule"]
    assert back["claims"]["peak_memory_bytes"] == r.peak_memory_bytes
    bad = dict(plan, operator={"schedule": [{"op": "run", "node": 0}]})
    with pytest.raises(kiwi.BadInputError, match=r"schedule\[0\].op"):
        kiwi.write_plan(bad, str(tmp_path / "bad.json"))
    assert not (tmp_path / "bad.json").exists()


def test_cli_in_process(tmp_path):
    r = kiwi.cli("graph", "--model", "mlp", "--json")
    assert r.returncode == 0
    assert r.json()["nodes"] > 0
    path = tmp_path / "g.json"
    path.write_text(json.dumps(kiwi.build_training_graph(mlp_forward())))
    r = kiwi.cli("remat", str(path), "--budget", "1", "--solver", "heuristic", "--json")
    assert r.returncode == 3 and "smallest budget" in r.stderr
    assert kiwi.cli("remat", str(tmp_path / "missing.json"), "--budget", "1GiB").returncode == 2


def test_import_error_names_the_build_step(tmp_path):
    """The pure-Python files without the extension: `import kiwi` says how to build it."""
    import os
    import shutil
    import subprocess
    import sys
    shutil.copytree(os.path.dirname(kiwi.__file__), tmp_path / "kiwi",
                    ignore=shutil.ignore_patterns("_kiwi*", "__pycache__"))
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", "import kiwi"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode != 0
    assert "kiwi._kiwi is not built" in r.stderr and "pip install ." in r.stderr and "scripts/setup.sh" in r.stderr
