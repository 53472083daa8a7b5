"""kiwi: plans distributed training within a memory budget (Python front end over the C++ core).

    import kiwi
    g = kiwi.load_graph("vgg16_b256_train.json")          # any of kiwi's graph formats
    r = kiwi.solve_remat(g, budget="12GiB", solver="auto")  # a rematerialization schedule
    sim = kiwi.simulate(g, kiwi.make_plan(r.schedule))      # replayed by the simulator
    kiwi.cli("graph", "--model", "gpt", "--json")           # any `kiwi` subcommand, in-process

`kiwi.torch` captures PyTorch models, plans for them and applies the plans (docs/pytorch.md).
The C++ core is the extension module `kiwi._kiwi`: `pip install .` builds and installs it, and so does
`bash scripts/setup.sh` for the project's .venv (into build/python/kiwi).
"""
try:
    from kiwi import _kiwi
except ImportError as _error:  # the pure-Python files are importable, the extension is not built
    raise ImportError(
        "kiwi: the C++ extension kiwi._kiwi is not built or not on the path ({}). Install the package "
        "with `pip install .`, or run `bash scripts/setup.sh` and use .venv/bin/python".format(_error)) from None

from kiwi.core import (  # noqa: E402  (after the extension check, on purpose)
    BadInputError,
    InfeasibleError,
    InternalError,
    KiwiError,
    RematResult,
    TimeLimitError,
    build_training_graph,
    calibrated_op_seconds,
    cli,
    cluster_presets,
    format_bytes,
    graph_json,
    graph_summary,
    keep_set_schedule,
    load_graph,
    make_plan,
    parse_bytes,
    parse_graph,
    read_plan,
    remat_solvers,
    simulate,
    solve_remat,
    write_plan,
)

__version__ = _kiwi.__version__

__all__ = [
    "BadInputError", "InfeasibleError", "InternalError", "KiwiError", "RematResult", "TimeLimitError",
    "build_training_graph", "calibrated_op_seconds", "cli", "cluster_presets", "format_bytes", "graph_json",
    "graph_summary", "keep_set_schedule", "load_graph", "make_plan", "parse_bytes", "parse_graph", "read_plan",
    "remat_solvers", "simulate", "solve_remat", "write_plan",
]
