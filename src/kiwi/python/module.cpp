// pybind11 module `kiwi._kiwi`: the JSON-in, JSON-out calls of api.h, the `kiwi` command run in-process,
// and kiwi::Error mapped onto Python exceptions (one class per error code, all KiwiError).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiwi/cli/app.h"
#include "kiwi/python/api.h"
#include "kiwi/util/units.h"
#include "kiwi/util/version.h"

namespace py = pybind11;

namespace kiwi::python {
namespace {

// One C++ exception type per error code; pybind11 translates each to its registered Python class.
struct KiwiException : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct BadInputException : KiwiException {
  using KiwiException::KiwiException;
};
struct InfeasibleException : KiwiException {
  using KiwiException::KiwiException;
};
struct TimeLimitException : KiwiException {
  using KiwiException::KiwiException;
};
struct InternalException : KiwiException {
  using KiwiException::KiwiException;
};

[[noreturn]] void Throw(const Error& e) {
  switch (e.code) {
    case ErrorCode::kBadInput: throw BadInputException(e.message);
    case ErrorCode::kInfeasible: throw InfeasibleException(e.message);
    case ErrorCode::kTimeLimit: throw TimeLimitException(e.message);
    case ErrorCode::kInternal: break;
  }
  throw InternalException(e.message);
}

// Runs a JSON call without the GIL (solvers may run for minutes) and raises its error.
template <typename Fn>
std::string Call(Fn&& fn) {
  Result<std::string> r = [&] {
    py::gil_scoped_release release;
    return fn();
  }();
  if (!r) Throw(r.error());
  return std::move(*r);
}

// The `kiwi` command in-process: argv[0] is added; output goes to the process's stdout/stderr.
int RunMain(std::vector<std::string> args) {
  args.insert(args.begin(), "kiwi");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int code = 0;
  {
    py::gil_scoped_release release;
    code = cli::Main(static_cast<int>(args.size()), argv.data());
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
  }
  return code;
}

// The base first: pybind11 tries translators in reverse registration order, so the derived ones win.
void RegisterExceptions(py::module_& m) {
  const py::exception<KiwiException>& base = py::register_exception<KiwiException>(m, "KiwiError");
  py::register_exception<BadInputException>(m, "BadInputError", base.ptr());
  py::register_exception<InfeasibleException>(m, "InfeasibleError", base.ptr());
  py::register_exception<TimeLimitException>(m, "TimeLimitError", base.ptr());
  py::register_exception<InternalException>(m, "InternalError", base.ptr());
}

}  // namespace
}  // namespace kiwi::python

PYBIND11_MODULE(_kiwi, m) {
  namespace kp = kiwi::python;
  m.doc() = "kiwi's C++ core (graph building, planners, simulator, plans); use the `kiwi` package";
  m.attr("__version__") = kiwi::kVersion;
  kp::RegisterExceptions(m);
  m.def("normalize_graph", [](const std::string& text, const std::string& source, bool annotate) {
    return kp::Call([&] { return kp::NormalizeGraphJson(text, source, annotate); });
  }, py::arg("text"), py::arg("source") = "graph", py::arg("annotate") = false);
  m.def("build_training_graph", [](const std::string& forward, const std::string& optimizer, bool master) {
    return kp::Call([&] { return kp::BuildTrainingGraphJson(forward, optimizer, master); });
  }, py::arg("forward"), py::arg("optimizer") = "adam", py::arg("master_weights") = false);
  m.def("graph_summary", [](const std::string& graph, const std::string& cluster, const std::string& profile) {
    return kp::Call([&] { return kp::GraphSummaryJson(graph, {cluster, profile}); });
  }, py::arg("graph"), py::arg("cluster"), py::arg("profile") = "");
  m.def("calibrated_op_seconds", [](const std::string& graph, double seconds, const std::string& cluster,
                                     const std::string& profile) {
    return kp::Call([&] { return kp::CalibratedOpSecondsJson(graph, seconds, {cluster, profile}); });
  }, py::arg("graph"), py::arg("seconds"), py::arg("cluster"), py::arg("profile") = "");
  m.def("solve_remat", [](const std::string& graph, int64_t budget, const std::string& solver,
                          const std::string& cluster, double time_limit, int threads, bool progress,
                          const std::string& profile) {
    const kp::RematRequest request{budget, solver, time_limit, threads, progress};
    return kp::Call([&] { return kp::SolveRematJson(graph, request, {cluster, profile}); });
  }, py::arg("graph"), py::arg("budget"), py::arg("solver"), py::arg("cluster"), py::arg("time_limit") = 60.0,
     py::arg("threads") = 0, py::arg("progress") = false, py::arg("profile") = "");
  m.def("keep_set_schedule", [](const std::string& graph, const std::vector<bool>& keep, const std::string& cluster,
                                 const std::string& profile) {
    return kp::Call([&] { return kp::KeepSetScheduleJson(graph, keep, {cluster, profile}); });
  }, py::arg("graph"), py::arg("keep"), py::arg("cluster"), py::arg("profile") = "");
  m.def("simulate", [](const std::string& graph, const std::string& plan, const std::string& cluster,
                       const std::string& profile) {
    return kp::Call([&] { return kp::SimulateJson(graph, plan, {cluster, profile}); });
  }, py::arg("graph"), py::arg("plan"), py::arg("cluster"), py::arg("profile") = "");
  m.def("layer_plan_report", [](const std::string& plan, const std::string& cluster, const std::string& profile) {
    return kp::Call([&] { return kp::LayerPlanReportJson(plan, {cluster, profile}); });
  }, py::arg("plan"), py::arg("cluster") = "", py::arg("profile") = "");
  m.def("normalize_plan", [](const std::string& text, const std::string& source) {
    return kp::Call([&] { return kp::NormalizePlanJson(text, source); });
  }, py::arg("text"), py::arg("source") = "plan");
  m.def("parse_bytes", [](const std::string& text, const std::string& what) {
    kiwi::Result<int64_t> r = kiwi::ParseBytes(text, what);
    if (!r) kp::Throw(r.error());
    return *r;
  }, py::arg("text"), py::arg("what") = "size");
  m.def("format_bytes", &kiwi::FormatBytes, py::arg("bytes"));
  m.def("remat_solver_names", &kp::RematSolverNames);
  m.def("cluster_presets", &kp::ClusterPresets);
  m.def("main", &kp::RunMain, py::arg("args"), "runs the `kiwi` command in-process; returns its exit code");
}
