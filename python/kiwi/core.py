"""Pythonic wrappers over the C++ core (kiwi._kiwi): graphs and plans are plain dicts in kiwi's JSON
formats (docs/graph-format.md, docs/plan-format.md), validated by the C++ readers on the way in."""
import dataclasses
import json
import math
import os
import sys
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Union

from kiwi import _kiwi

KiwiError = _kiwi.KiwiError
BadInputError = _kiwi.BadInputError          # malformed input; the CLI's exit code 2
InfeasibleError = _kiwi.InfeasibleError      # no plan fits the request; exit code 3
TimeLimitError = _kiwi.TimeLimitError        # time limit without an answer; exit code 4
InternalError = _kiwi.InternalError          # a bug or backend failure; exit code 1

Graph = Dict[str, Any]
GraphLike = Union[Graph, str]  # a dict, or JSON text
Size = Union[int, str]         # bytes, or "16GiB" / "16GB" / "512MiB"

DEFAULT_CLUSTER = "v100-nvlink-8"
MAX_BYTES = (1 << 63) - 1  # the C++ core counts bytes in int64


def parse_bytes(size: Size, what: str = "size") -> int:
    """Bytes from an int or a size string ("16GiB", "16GB" = 16e9, "512MiB")."""
    if isinstance(size, bool):
        raise BadInputError(f"{what}: must be a size, got {size!r}")
    if isinstance(size, int):
        if size < 0 or size > MAX_BYTES:
            raise BadInputError(f"{what}: must be in [0, 2^63 - 1] bytes, got {size}")
        return size
    if isinstance(size, float):
        if not 0 <= size <= MAX_BYTES:  # NaN fails both
            raise BadInputError(f"{what}: must be in [0, 2^63 - 1] bytes, got {size!r}")
        return int(size)
    return _kiwi.parse_bytes(str(size), what)


def format_bytes(size: int) -> str:
    """"15.3 GiB", "512 MiB": binary units, three significant digits."""
    return _kiwi.format_bytes(int(size))


def graph_json(graph: GraphLike) -> str:
    return graph if isinstance(graph, str) else json.dumps(graph)


def parse_graph(text: GraphLike, source: str = "graph", annotate: bool = False) -> Graph:
    """Verifies a graph (kiwi, Checkmate or random-layered JSON) and returns it as kiwi graph JSON;
    `annotate` fills flops and bytes_accessed. Errors name the source and the field."""
    return json.loads(_kiwi.normalize_graph(graph_json(text), source, annotate))


MAX_DOCUMENT_BYTES = 1 << 30  # as the C++ readers (io/file_io.cpp): a file or what its gzip decompresses to


def load_graph(path: str) -> Graph:
    """A graph file (kiwi graph JSON or another format kiwi reads; .gz ok), at most 1 GiB of JSON."""
    with open(path, "rb") as f:
        data = f.read(MAX_DOCUMENT_BYTES + 1)  # /dev/zero or an endless pipe stops here
        if data[:2] == b"\x1f\x8b":
            import gzip
            f.seek(0)
            with gzip.GzipFile(fileobj=f) as z:
                try:
                    data = z.read(MAX_DOCUMENT_BYTES + 1)
                except (OSError, EOFError) as e:
                    raise BadInputError(f"{path}: corrupt gzip data: {e}") from None
    if len(data) > MAX_DOCUMENT_BYTES:
        raise BadInputError(f"{path}: larger than 1 GiB of JSON (the largest input kiwi reads)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadInputError(f"{path}: not UTF-8 text (byte {e.start})") from None
    return parse_graph(text, os.path.basename(path))


def build_training_graph(forward: GraphLike, optimizer: str = "adam", master_weights: bool = False) -> Graph:
    """ir::BuildTrainingGraph: backward ops from kiwi's gradient rules, then the optimizer update."""
    return json.loads(_kiwi.build_training_graph(graph_json(forward), optimizer, master_weights))


def _cluster(cluster: Union[str, Dict[str, Any]]) -> str:
    return json.dumps(cluster) if isinstance(cluster, dict) else cluster


def _profile(profile: Union[str, Dict[str, Any], None]) -> str:
    """A profile (docs/cluster-format.md, "Profile files") as a path, a parsed dict, or None."""
    if profile is None:
        return ""
    return json.dumps(profile) if isinstance(profile, dict) else str(profile)


def graph_summary(graph: GraphLike, cluster: Union[str, Dict[str, Any]] = DEFAULT_CLUSTER,
                  profile: Union[str, Dict[str, Any], None] = None) -> Dict[str, Any]:
    """nodes, edges, forward/backward nodes, checkpoint_all_peak_bytes, memory_lower_bound_bytes,
    compute_cost and node_costs (seconds per node id on the cluster's device)."""
    return json.loads(_kiwi.graph_summary(graph_json(graph), _cluster(cluster), _profile(profile)))


def calibrated_op_seconds(graph: GraphLike, seconds: float, cluster: Union[str, Dict[str, Any]] = DEFAULT_CLUSTER,
                          profile: Union[str, Dict[str, Any], None] = None) -> float:
    """The time each priced op of `graph` cost beyond its work when its forward and backward ran in
    `seconds` (its optimizer step left out): an executor's per-op time, as the profile's op_time."""
    return json.loads(_kiwi.calibrated_op_seconds(graph_json(graph), float(seconds), _cluster(cluster),
                                                  _profile(profile)))["op_seconds"]


@dataclasses.dataclass
class RematResult:
    """`kiwi remat --json`'s fields (CONTRACT.md); cost and peak were measured by the simulator."""
    feasible: bool
    solver: str
    compute_cost: float
    baseline_cost: float
    peak_memory_bytes: int
    budget_bytes: int
    checkpoint_all_peak_bytes: int
    memory_lower_bound_bytes: int
    smallest_known_budget_bytes: int
    lower_bound: Optional[float]
    gap: Optional[float]
    optimal: bool
    solve_seconds: float
    note: str
    schedule: List[Dict[str, Any]]


def solve_remat(graph: GraphLike, budget: Size, solver: str = "auto",
                cluster: Union[str, Dict[str, Any]] = DEFAULT_CLUSTER, time_limit: float = 60.0,
                threads: int = 0, progress: bool = False, check: bool = True,
                profile: Union[str, Dict[str, Any], None] = None) -> RematResult:
    """A rematerialization schedule within `budget` (kiwi remat). With check=True a budget no schedule
    fits raises InfeasibleError naming the smallest budget kiwi can satisfy."""
    if solver not in _kiwi.remat_solver_names():
        raise BadInputError(f"solver: '{solver}' is not one of {', '.join(_kiwi.remat_solver_names())}")
    if not isinstance(time_limit, (int, float)) or math.isnan(time_limit) or time_limit <= 0:
        raise BadInputError(f"time_limit: must be a positive number of seconds (got {time_limit!r}); "
                            "inf means no limit")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        raise BadInputError(f"threads: must be an integer >= 0 (0: all cores), got {threads!r}")
    raw = json.loads(_kiwi.solve_remat(graph_json(graph), parse_bytes(budget, "budget"), solver,
                                       _cluster(cluster), float(time_limit), int(threads), bool(progress),
                                       _profile(profile)))
    result = RematResult(**raw)
    if check and not result.feasible:
        if result.smallest_known_budget_bytes > 0:
            raise InfeasibleError(
                f"budget {format_bytes(result.budget_bytes)} ({result.budget_bytes} bytes): no schedule fits; "
                f"the smallest budget kiwi can satisfy is {format_bytes(result.smallest_known_budget_bytes)} "
                f"({result.smallest_known_budget_bytes} bytes)")
        raise TimeLimitError(f"budget {result.budget_bytes} bytes: no schedule found before the time limit "
                             f"({time_limit} s)")
    return result


def keep_set_schedule(graph: GraphLike, keep: Sequence[bool],
                      cluster: Union[str, Dict[str, Any]] = DEFAULT_CLUSTER,
                      profile: Union[str, Dict[str, Any], None] = None) -> Dict[str, Any]:
    """Checkpointing by keep flags (solve/remat/keep_set_schedule.h): kept tensors stay until their last
    use, the others are recomputed on demand before the backward op that needs them."""
    return json.loads(_kiwi.keep_set_schedule(graph_json(graph), [bool(k) for k in keep], _cluster(cluster),
                                              _profile(profile)))


def make_plan(schedule: Sequence[Dict[str, Any]], graph: str = "", solver: str = "", cluster: str = "",
              peak_memory_bytes: Optional[int] = None, iteration_seconds: Optional[float] = None) -> Dict[str, Any]:
    """An operator-level plan (docs/plan-format.md) with one device and the given schedule."""
    plan: Dict[str, Any] = {"kiwi_plan_version": 1, "graph": graph, "solver": solver, "cluster": cluster,
                            "operator": {"schedule": [{"op": s["op"], "node": int(s["node"])} for s in schedule]}}
    claims = {}
    if peak_memory_bytes is not None:
        claims["peak_memory_bytes"] = int(peak_memory_bytes)
    if iteration_seconds is not None:
        claims["iteration_seconds"] = float(iteration_seconds)
    if claims:
        plan["claims"] = claims
    return plan


def simulate(graph: GraphLike, plan: Union[Dict[str, Any], str],
             cluster: Union[str, Dict[str, Any]] = DEFAULT_CLUSTER,
             profile: Union[str, Dict[str, Any], None] = None) -> Dict[str, Any]:
    """Replays an operator-level plan: peak_memory_bytes, peak_step, peak_node, iteration_seconds, time
    (compute, recompute, communication, resharding), recomputations, timeline (bytes after each step)."""
    text = plan if isinstance(plan, str) else json.dumps(plan)
    return json.loads(_kiwi.simulate(graph_json(graph), text, _cluster(cluster), _profile(profile)))


def read_plan(path: str) -> Dict[str, Any]:
    with open(path, "r", encoding="utf-8") as f:
        text = f.read()
    return json.loads(_kiwi.normalize_plan(text, os.path.basename(path)))


def write_plan(plan: Dict[str, Any], path: str) -> None:
    """Validates the plan and writes it atomically (a temporary file renamed into place)."""
    text = _kiwi.normalize_plan(json.dumps(plan), "plan")
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".kiwi-plan-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def remat_solvers() -> List[str]:
    return list(_kiwi.remat_solver_names())


def cluster_presets() -> List[str]:
    return list(_kiwi.cluster_presets())


@dataclasses.dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def cli(*args: str, capture: bool = True) -> CliResult:
    """Runs a `kiwi` subcommand in-process (CONTRACT.md: exit codes 0/2/3/4; --json prints one object):
    kiwi.cli("remat", "graph.json", "--budget-fraction", "0.8", "--json").json()["schedule"]."""
    argv = [str(a) for a in args]
    if argv[:1] == ["profile"]:  # the C++ command runs the Python one: this interpreter, this package
        saved = {k: os.environ.get(k) for k in ("KIWI_PYTHON", "PYTHONPATH")}
        package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        os.environ.setdefault("KIWI_PYTHON", sys.executable)
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, saved["PYTHONPATH"]) if p)
        try:
            return _run_cli(argv, capture)
        finally:  # the caller's environment as it was
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    return _run_cli(argv, capture)


def _run_cli(argv: List[str], capture: bool) -> CliResult:
    if not capture:
        return CliResult(_kiwi.main(argv), "", "")
    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        saved = os.dup(1), os.dup(2)
        try:
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            code = _kiwi.main(argv)
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        out.seek(0)
        err.seek(0)
        return CliResult(code, out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace"))
