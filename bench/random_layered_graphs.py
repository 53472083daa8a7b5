"""Random layered graphs like those of the Moccasin paper (ICML 2023), for the rematerialization bench.

The four graphs Moccasin publishes (haoming-codes/moccasin, data/random_layered_n{100,250,500,1000}_w.._nlv0.75_
ed0.2_scd0.14.json) are made "according to Appendix A of Neural Topological Ordering for Computation
Graphs" (Gagrani et al., NeurIPS 2022); the generator itself is in neither repository. This one follows
the parameters the file names carry, with each rule chosen to reproduce what the published graphs show
(measured on all four; the test checks the same statistics on generated graphs):

- one source (id 0, layer 0) feeding every node of the first layer, one sink (id 1) fed by every node of
  the last; the interior nodes (ids 2..n-1, layer by layer) in layers whose widths are uniform integers
  in [m (1 - nlv), m (1 + nlv)], m = 2 w sqrt(n) (published mean widths: 5.2, 11.3, 16.1, 20.4 against
  5.4, 13.6, 16.1, 19.6);
- between consecutive layers, every node takes one input drawn from the layer before, every other pair
  is an edge with probability ed, and a node left without an output to the layer after gets one
  (density about ed + 1 / width: published 0.23-0.33 between layers of 29 and of 6 nodes at ed = 0.2);
- skip edges, a fraction scd of all edges (published: 0.134-0.140), between uniformly drawn interior
  nodes at least two layers apart (so their span count falls off linearly, as published);
- duration uniform in 1..1000, out_cost 7,400 x the product of two uniform draws (at least 10): median
  about 1,400 (published 1,490-1,610), range 10-7,400 (published 10-7,410); source and sink take 0 time;
- the execution order (`graph.order`) a random topological order, uniform among ready nodes (its peak is
  within 2% of the published orders' on n500 and n1000).

The files are in the same node-link format as Moccasin's (kiwi reads them, docs/graph-format.md; so does
Moccasin's own main.py).

    python3 bench/random_layered_graphs.py --out DIR [--sizes 500,1000] [--seeds 1,2,3]
    build/bench/bench_remat_bench --dir DIR --budgets 0.9,0.8 --solvers auto --time-limit 60
"""
import argparse
import json
import math
import os
import random
import sys
from typing import Dict, List, Tuple

NLV, ED, SCD = 0.75, 0.2, 0.14
# The width parameter w of Moccasin's published graph of each size (its file names).
PUBLISHED_WIDTH = {100: 0.27, 250: 0.43, 500: 0.36, 1000: 0.31}


def default_width(n: int) -> float:
    """The published w for a published size, else the one of the nearest published size."""
    return PUBLISHED_WIDTH[min(PUBLISHED_WIDTH, key=lambda size: abs(math.log(size / n)))]


def layer_widths(n: int, w: float, nlv: float, rnd: random.Random) -> List[int]:
    mean = 2.0 * w * math.sqrt(n)
    lo = max(1, round(mean * (1.0 - nlv)))
    hi = max(lo, round(mean * (1.0 + nlv)))
    widths, left = [], n - 2
    while left > 0:
        k = min(rnd.randint(lo, hi), left)
        widths.append(k)
        left -= k
    return widths


def consecutive_edges(layers: List[List[int]], ed: float, rnd: random.Random) -> List[Tuple[int, int]]:
    edges = []
    for below, above in zip(layers, layers[1:]):
        pairs = {(rnd.choice(below), v) for v in above}
        pairs |= {(u, v) for u in below for v in above if rnd.random() < ed}
        feeding = {u for u, _ in pairs}
        pairs |= {(u, rnd.choice(above)) for u in below if u not in feeding}
        edges += sorted(pairs)
    return edges


def skip_edges(layers: List[List[int]], count: int, rnd: random.Random) -> List[Tuple[int, int]]:
    layer_of = {v: i for i, layer in enumerate(layers) for v in layer}
    interior = sorted(layer_of)
    # At most every pair two layers apart (a large scd on few layers would otherwise never end).
    count = min(count, sum(len(a) * len(b) for i, a in enumerate(layers) for b in layers[i + 2:]))
    edges = set()
    while len(edges) < count:
        u, v = rnd.choice(interior), rnd.choice(interior)
        if layer_of[u] > layer_of[v]:
            u, v = v, u
        if layer_of[v] - layer_of[u] >= 2:
            edges.add((u, v))
    return sorted(edges)


def random_topological_order(n: int, edges: List[Tuple[int, int]], rnd: random.Random) -> List[int]:
    outs: Dict[int, List[int]] = {v: [] for v in range(n)}
    waiting = [0] * n
    for u, v in edges:
        outs[u].append(v)
        waiting[v] += 1
    ready, order = [v for v in range(n) if waiting[v] == 0], []
    while ready:
        v = ready.pop(rnd.randrange(len(ready)))
        order.append(v)
        for c in outs[v]:
            waiting[c] -= 1
            if waiting[c] == 0:
                ready.append(c)
    return order


def generate(n: int, seed: int, w: float = 0.0, nlv: float = NLV, ed: float = ED, scd: float = SCD) -> dict:
    """One graph as Moccasin's node-link JSON; the same arguments give the same graph."""
    if n < 4:
        raise ValueError(f"n must be at least 4 (a source, a sink and two layers), got {n}")
    if not (0.0 <= nlv < 1.0 and 0.0 <= ed <= 1.0 and 0.0 <= scd < 1.0):
        raise ValueError(f"need 0 <= nlv < 1, 0 <= ed <= 1, 0 <= scd < 1; got {nlv}, {ed}, {scd}")
    w = w or default_width(n)
    rnd = random.Random(f"{n}/{seed}/{w}/{nlv}/{ed}/{scd}")
    layers, next_id = [], 2
    for k in layer_widths(n, w, nlv, rnd):
        layers.append(list(range(next_id, next_id + k)))
        next_id += k
    edges = [(0, v) for v in layers[0]] + consecutive_edges(layers, ed, rnd) + [(u, 1) for u in layers[-1]]
    edges += skip_edges(layers, round(len(edges) * scd / (1.0 - scd)), rnd)
    pos = {"0": [0, 0], "1": [0, -(len(layers) + 1)]}
    for i, layer in enumerate(layers):
        for j, v in enumerate(layer):
            pos[str(v)] = [j - len(layer) // 2, -(i + 1)]
    nodes = [{"name": v, "duration": 0 if v < 2 else rnd.randint(1, 1000),
              "out_cost": max(10, round(7400 * rnd.random() * rnd.random())), "param_cost": 0} for v in range(n)]
    name = f"random_layered_n{n}_w{w}_nlv{nlv}_ed{ed}_scd{scd}_seed{seed}"
    return {"directed": True, "multigraph": False,
            "graph": {"name": name, "source_node": 0, "target_node": 1, "pos": pos,
                      "order": random_topological_order(n, edges, rnd)},
            "nodes": nodes, "links": [{"0": u, "1": v} for u, v in edges]}


def _int_list(text: str, what: str) -> List[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"random_layered_graphs: {what}: expected integers separated by commas, got {text!r}")
    if not values:
        raise SystemExit(f"random_layered_graphs: {what}: empty")
    return values


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory to write rl_n{N}_s{SEED}.json into")
    ap.add_argument("--sizes", default="500,1000", help="node counts (default 500,1000)")
    ap.add_argument("--seeds", default="1,2,3", help="seeds (default 1,2,3)")
    ap.add_argument("--w", type=float, default=0.0, help="width parameter (default: the published one of that size)")
    args = ap.parse_args(argv)
    sizes, seeds = _int_list(args.sizes, "--sizes"), _int_list(args.seeds, "--seeds")
    if any(n < 4 for n in sizes):
        print(f"random_layered_graphs: --sizes: each must be at least 4, got {args.sizes}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    for n in sizes:
        for seed in seeds:
            path = os.path.join(args.out, f"rl_n{n}_s{seed}.json")
            graph = generate(n, seed, args.w)
            with open(path + ".tmp", "w") as f:
                json.dump(graph, f)
            os.replace(path + ".tmp", path)
            print(f"{path}: {n} nodes, {len(graph['links'])} edges, {graph['graph']['name']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
