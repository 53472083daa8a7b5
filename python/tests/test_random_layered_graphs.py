"""bench/random_layered_graphs.py: generated graphs have the published graphs' structure, and kiwi reads
them with the peak their order has."""
import importlib.util
import json
import math
import os
import statistics

import pytest

import kiwi

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _generator():
    spec = importlib.util.spec_from_file_location("random_layered_graphs",
                                                  os.path.join(ROOT, "bench", "random_layered_graphs.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _layers(graph):
    return {int(v): -xy[1] for v, xy in graph["graph"]["pos"].items()}


def _order_peak(graph):
    """Checkpoint-all peak of graph.order: each output lives from its node until its last consumer."""
    order = graph["graph"]["order"]
    at = {v: i for i, v in enumerate(order)}
    size = {node["name"]: node["out_cost"] for node in graph["nodes"]}
    last = dict(at)
    for link in graph["links"]:
        last[link["0"]] = max(last[link["0"]], at[link["1"]])
    freed = [0] * len(order)
    for v, i in last.items():
        freed[i] += size[v]
    live = peak = 0
    for i, v in enumerate(order):
        live += size[v]
        peak = max(peak, live)
        live -= freed[i]
    return peak


@pytest.mark.parametrize("n", [100, 500, 1000])
def test_structure_follows_the_published_graphs(n):
    gen = _generator()
    graph = gen.generate(n, seed=1)
    layer = _layers(graph)
    last = max(layer.values())
    edges = [(link["0"], link["1"]) for link in graph["links"]]
    assert sorted(node["name"] for node in graph["nodes"]) == list(range(n))
    assert all(layer[u] < layer[v] for u, v in edges)  # a DAG, layered
    assert len(set(edges)) == len(edges)
    order = graph["graph"]["order"]
    at = {v: i for i, v in enumerate(order)}
    assert sorted(order) == list(range(n)) and all(at[u] < at[v] for u, v in edges)
    assert sorted(v for u, v in edges if u == 0) == sorted(v for v in layer if layer[v] == 1)
    assert sorted(u for u, v in edges if v == 1) == sorted(v for v in layer if layer[v] == last - 1)
    for v in range(2, n):  # every interior node fed from the layer before and feeding the layer after
        assert any(layer[u] == layer[v] - 1 for u, w in edges if w == v)
        assert any(layer[w] == layer[v] + 1 for u, w in edges if u == v)
    skips = [(u, v) for u, v in edges if layer[v] - layer[u] >= 2]
    assert all(u > 1 and v > 1 for u, v in skips)
    assert len(skips) / len(edges) == pytest.approx(gen.SCD, abs=0.01)
    widths = [sum(1 for v in layer if layer[v] == k) for k in range(1, last)]
    assert statistics.mean(widths) == pytest.approx(2 * gen.default_width(n) * math.sqrt(n), rel=0.25)
    if n >= 500:  # ed + about 1 / width between consecutive layers, as published (0.25-0.26 at these sizes)
        consecutive = sum(1 for u, v in edges if u > 1 and v > 1 and layer[v] == layer[u] + 1)
        pairs = sum(a * b for a, b in zip(widths, widths[1:]))
        assert 0.22 <= consecutive / pairs <= 0.30
    durations = [node["duration"] for node in graph["nodes"]]
    assert durations[0] == durations[1] == 0 and all(1 <= d <= 1000 for d in durations[2:])
    assert all(10 <= node["out_cost"] <= 7400 for node in graph["nodes"])


def test_seeds_repeat_and_differ():
    gen = _generator()
    assert json.dumps(gen.generate(250, seed=7)) == json.dumps(gen.generate(250, seed=7))
    assert gen.generate(250, seed=7)["links"] != gen.generate(250, seed=8)["links"]


def test_kiwi_reads_them_with_the_orders_peak():
    graph = _generator().generate(250, seed=3)
    summary = kiwi.graph_summary(kiwi.parse_graph(json.dumps(graph)))
    assert summary["checkpoint_all_peak_bytes"] == _order_peak(graph)


def test_bad_arguments(tmp_path, capsys):
    gen = _generator()
    with pytest.raises(ValueError, match="n must be at least 4"):
        gen.generate(3, seed=1)
    with pytest.raises(ValueError, match="scd"):
        gen.generate(100, seed=1, scd=1.0)
    assert gen.main(["--out", str(tmp_path), "--sizes", "2"]) == 2
    assert "--sizes" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="--seeds: expected integers"):
        gen.main(["--out", str(tmp_path), "--seeds", "one"])
    assert gen.main(["--out", str(tmp_path), "--sizes", "100", "--seeds", "4"]) == 0
    assert os.listdir(tmp_path) == ["rl_n100_s4.json"]
