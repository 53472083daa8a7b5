// Streams an IOPDDL document through nlohmann's SAX interface: each container gets a Slot naming what
// its values fill, so a number is stored without building a JSON tree (6M numbers in instance A).
#include "kiwi/io/iopddl_json.h"

#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "kiwi/io/file_io.h"
#include "kiwi/io/json_fields.h"

namespace kiwi::io {
namespace {

enum class Slot : uint8_t {
  kIgnore, kRoot, kProblem, kNodes, kEdges,
  kIntervals, kInterval, kNodeCosts, kNodeCost, kUsages, kUsage,
  kEdgeNodes, kEdgeNode, kEdgeCosts, kEdgeCost,
};

struct Frame {
  Slot slot = Slot::kIgnore;
  bool is_array = false;
  std::string key;      // objects: the current key
  size_t index = 0;     // arrays: index of the next element
};

// What a child container of `parent` (under `key` for objects) fills.
Slot ChildSlot(Slot parent, const std::string& key) {
  switch (parent) {
    case Slot::kRoot: return key == "problem" ? Slot::kProblem : Slot::kIgnore;
    case Slot::kProblem: return key == "nodes" ? Slot::kNodes : key == "edges" ? Slot::kEdges : Slot::kIgnore;
    case Slot::kNodes:
      return key == "intervals" ? Slot::kIntervals : key == "costs" ? Slot::kNodeCosts
             : key == "usages" ? Slot::kUsages : Slot::kIgnore;
    case Slot::kEdges: return key == "nodes" ? Slot::kEdgeNodes : key == "costs" ? Slot::kEdgeCosts : Slot::kIgnore;
    case Slot::kIntervals: return Slot::kInterval;
    case Slot::kNodeCosts: return Slot::kNodeCost;
    case Slot::kUsages: return Slot::kUsage;
    case Slot::kEdgeNodes: return Slot::kEdgeNode;
    case Slot::kEdgeCosts: return Slot::kEdgeCost;
    default: return Slot::kIgnore;
  }
}

bool IsList(Slot s) {
  return s == Slot::kIntervals || s == Slot::kNodeCosts || s == Slot::kUsages || s == Slot::kEdgeNodes ||
         s == Slot::kEdgeCosts || s == Slot::kInterval || s == Slot::kNodeCost || s == Slot::kUsage ||
         s == Slot::kEdgeNode || s == Slot::kEdgeCost;
}

// The raw arrays as read, checked and assembled afterwards.
struct RawProblem {
  std::string name;
  std::optional<int64_t> usage_limit;
  bool seen_intervals = false, seen_costs = false, seen_usages = false, seen_edge_nodes = false,
       seen_edge_costs = false;
  std::vector<std::vector<int64_t>> intervals, costs, usages, edge_nodes, edge_costs;
};

class Reader : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}
  RawProblem raw;
  std::optional<Error> error;

  bool null() override { return Scalar("null"); }
  bool boolean(bool) override { return Scalar("a boolean"); }
  bool number_integer(number_integer_t v) override { return Number(v); }
  bool number_unsigned(number_unsigned_t v) override {
    if (v > static_cast<number_unsigned_t>(std::numeric_limits<int64_t>::max())) return Fail("integer too large");
    return Number(static_cast<int64_t>(v));
  }
  bool number_float(number_float_t v, const string_t&) override {
    if (v != v || v < -9.2e18 || v > 9.2e18 || static_cast<double>(static_cast<int64_t>(v)) != v)
      return Fail(fmt::format("must be an integer (got {})", v));
    return Number(static_cast<int64_t>(v));
  }
  bool string(string_t& v) override {
    if (!stack_.empty() && stack_.back().slot == Slot::kProblem && stack_.back().key == "name") {
      raw.name = v;
      return true;
    }
    return Scalar("a string");
  }
  bool binary(binary_t&) override { return Scalar("binary data"); }
  bool start_object(std::size_t) override { return Open(false); }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(true); }
  bool end_array() override { return Close(); }
  bool key(string_t& k) override {
    stack_.back().key = k;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    error = BadInput(OneLine(fmt::format("{}: invalid JSON at byte {}: {}", source_, position, e.what())));
    return false;
  }

 private:
  std::string source_;
  std::vector<Frame> stack_;

  std::string Path() const {
    std::string path;
    if (stack_.empty()) return path;
    for (size_t d = 1; d < stack_.size(); ++d) {
      const Frame& parent = stack_[d - 1];
      if (parent.is_array) path += fmt::format("[{}]", parent.index);
      else path += (path.empty() ? "" : ".") + parent.key;
    }
    const Frame& top = stack_.back();
    if (top.is_array) path += fmt::format("[{}]", top.index);
    else if (!top.key.empty()) path += (path.empty() ? "" : ".") + top.key;
    return path;
  }
  bool Fail(const std::string& what) {
    const std::string path = Path();
    if (!error) error = BadInput(OneLine(fmt::format("{}: {}{}", source_, path.empty() ? "" : path + ": ", what)));
    return false;
  }
  Slot Here() const { return stack_.empty() ? Slot::kIgnore : stack_.back().slot; }
  void Advance() {
    if (!stack_.empty() && stack_.back().is_array) ++stack_.back().index;
  }
  std::vector<std::vector<int64_t>>* ListOf(Slot outer) {
    switch (outer) {
      case Slot::kIntervals: return &raw.intervals;
      case Slot::kNodeCosts: return &raw.costs;
      case Slot::kUsages: return &raw.usages;
      case Slot::kEdgeNodes: return &raw.edge_nodes;
      case Slot::kEdgeCosts: return &raw.edge_costs;
      default: return nullptr;
    }
  }
  bool Open(bool is_array);
  bool Close();
  bool Number(int64_t v);
  bool Scalar(const char* what);
};

bool Reader::Open(bool is_array) {
  if (stack_.empty()) {
    if (is_array) return Fail("the document must be a JSON object with a \"problem\" field");
    stack_.push_back({Slot::kRoot, false, "", 0});
    return true;
  }
  const Frame& parent = stack_.back();
  const Slot slot = ChildSlot(parent.slot, parent.key);
  if (slot != Slot::kIgnore && IsList(slot) != is_array)
    return Fail(is_array ? "must be a JSON object" : "must be a JSON array");
  if (slot == Slot::kInterval || slot == Slot::kNodeCost || slot == Slot::kUsage || slot == Slot::kEdgeNode ||
      slot == Slot::kEdgeCost)
    ListOf(parent.slot)->emplace_back();
  switch (slot) {
    case Slot::kIntervals: raw.seen_intervals = true; break;
    case Slot::kNodeCosts: raw.seen_costs = true; break;
    case Slot::kUsages: raw.seen_usages = true; break;
    case Slot::kEdgeNodes: raw.seen_edge_nodes = true; break;
    case Slot::kEdgeCosts: raw.seen_edge_costs = true; break;
    default: break;
  }
  stack_.push_back({slot, is_array, "", 0});
  return true;
}

bool Reader::Close() {
  stack_.pop_back();
  Advance();
  return true;
}

bool Reader::Number(int64_t v) {
  const Slot here = Here();
  if (here == Slot::kProblem && stack_.back().key == "usage_limit") {
    if (v < 0) return Fail(fmt::format("must be >= 0 (got {})", v));
    raw.usage_limit = v;
    return true;
  }
  std::vector<std::vector<int64_t>>* list = nullptr;
  switch (here) {
    case Slot::kInterval: list = &raw.intervals; break;
    case Slot::kNodeCost: list = &raw.costs; break;
    case Slot::kUsage: list = &raw.usages; break;
    case Slot::kEdgeNode: list = &raw.edge_nodes; break;
    case Slot::kEdgeCost: list = &raw.edge_costs; break;
    case Slot::kIgnore: Advance(); return true;
    default: return Scalar("a number");
  }
  if (v < 0) return Fail(fmt::format("must be >= 0 (got {})", v));
  list->back().push_back(v);
  Advance();
  return true;
}

// A scalar where no number belongs: ignored under unknown keys, an error where a container is due.
bool Reader::Scalar(const char* what) {
  const Slot here = Here();
  if (here == Slot::kProblem && stack_.back().key == "usage_limit")
    return Fail(fmt::format("must be an integer, not {}", what));
  const bool in_object =
      here == Slot::kRoot || here == Slot::kProblem || here == Slot::kNodes || here == Slot::kEdges;
  const Slot child = ChildSlot(here, in_object ? stack_.back().key : "");
  if (here == Slot::kIgnore || (in_object && child == Slot::kIgnore)) {
    Advance();
    return true;
  }
  if (in_object) return Fail(fmt::format("must be a JSON {}, not {}", IsList(child) ? "array" : "object", what));
  return Fail(fmt::format("must be {}, not {}", IsList(child) ? "an array" : "an integer", what));
}

Error Missing(const std::string& source, const char* field) {
  return BadInput(fmt::format("{}: problem.{}: missing", source, field));
}

Result<ir::ShardingProblem> Assemble(RawProblem raw, const std::string& source) {
  if (!raw.seen_intervals) return Missing(source, "nodes.intervals");
  if (!raw.seen_costs) return Missing(source, "nodes.costs");
  if (!raw.seen_usages) return Missing(source, "nodes.usages");
  if (!raw.seen_edge_nodes) return Missing(source, "edges.nodes");
  if (!raw.seen_edge_costs) return Missing(source, "edges.costs");
  if (!raw.usage_limit) return Missing(source, "usage_limit");
  const size_t n = raw.intervals.size();
  if (raw.costs.size() != n || raw.usages.size() != n)
    return BadInput(fmt::format("{}: problem.nodes: intervals, costs and usages must have one entry per node "
                                "(got {}, {}, {})", source, n, raw.costs.size(), raw.usages.size()));
  if (raw.edge_costs.size() != raw.edge_nodes.size())
    return BadInput(fmt::format("{}: problem.edges: nodes and costs must have one entry per edge (got {}, {})",
                                source, raw.edge_nodes.size(), raw.edge_costs.size()));
  ir::ShardingProblem problem;
  problem.name = std::move(raw.name);
  problem.usage_limit = *raw.usage_limit;
  problem.nodes.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (raw.intervals[i].size() != 2)
      return BadInput(fmt::format("{}: problem.nodes.intervals[{}]: must be [start, end]", source, i));
    // [start, end) with end == start is a node never live (the contest's instances have thousands);
    // end before start is a malformed interval, not another empty one.
    if (raw.intervals[i][1] < raw.intervals[i][0])
      return BadInput(fmt::format("{}: problem.nodes.intervals[{}]: end {} is before start {}", source, i,
                                  raw.intervals[i][1], raw.intervals[i][0]));
    ir::ShardingNode& node = problem.nodes[i];
    node.start = raw.intervals[i][0];
    node.end = raw.intervals[i][1];
    node.cost = std::move(raw.costs[i]);
    node.usage = std::move(raw.usages[i]);
  }
  problem.edges.resize(raw.edge_nodes.size());
  for (size_t e = 0; e < raw.edge_nodes.size(); ++e) {
    if (raw.edge_nodes[e].size() != 2)
      return BadInput(fmt::format("{}: problem.edges.nodes[{}]: must be [u, v]", source, e));
    const int64_t limit = std::numeric_limits<int32_t>::max();
    if (raw.edge_nodes[e][0] > limit || raw.edge_nodes[e][1] > limit)
      return BadInput(fmt::format("{}: problem.edges.nodes[{}]: node index out of range [0, {})", source, e, n));
    problem.edges[e] = {static_cast<int32_t>(raw.edge_nodes[e][0]), static_cast<int32_t>(raw.edge_nodes[e][1]),
                        std::move(raw.edge_costs[e])};
  }
  KIWI_RETURN_IF_ERROR(ir::ValidateShardingProblem(problem, source));
  return problem;
}

}  // namespace

Result<ir::ShardingProblem> ParseIopddlJson(std::string_view text, const std::string& source) {
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) return BadInput(source + ": empty file");
  Reader reader(source);
  bool ok = false;
  try {
    ok = nlohmann::json::sax_parse(text, &reader);
  } catch (const std::bad_alloc&) {
    return BadInput(source + ": input too large to hold in memory");
  } catch (const std::exception& e) {
    return BadInput(OneLine(source + ": malformed input: " + e.what()));
  }
  if (reader.error) return *reader.error;
  if (!ok) return BadInput(source + ": malformed input");
  return Assemble(std::move(reader.raw), source);
}

Result<ir::ShardingProblem> ReadIopddlFile(const std::string& path) {
  Result<std::string> text = ReadFileText(path);
  if (!text) return text.error();
  return ParseIopddlJson(*text, path);
}

std::string WriteIopddlJson(const ir::ShardingProblem& problem) {
  OrderedJson intervals = OrderedJson::array(), costs = OrderedJson::array(), usages = OrderedJson::array();
  for (const ir::ShardingNode& node : problem.nodes) {
    intervals.push_back({node.start, node.end});
    costs.push_back(node.cost);
    usages.push_back(node.usage);
  }
  OrderedJson edge_nodes = OrderedJson::array(), edge_costs = OrderedJson::array();
  for (const ir::ShardingEdge& edge : problem.edges) {
    edge_nodes.push_back({edge.u, edge.v});
    edge_costs.push_back(edge.cost);
  }
  OrderedJson p;
  p["name"] = problem.name;
  p["nodes"] = {{"intervals", intervals}, {"costs", costs}, {"usages", usages}};
  p["edges"] = {{"nodes", edge_nodes}, {"costs", edge_costs}};
  p["usage_limit"] = problem.usage_limit;
  OrderedJson doc;
  doc["problem"] = std::move(p);
  return DumpReadable(doc, 3);
}

std::string FormatIopddlSolution(const ir::Solution& solution) {
  return fmt::format("[{}]", fmt::join(solution, ", "));
}

}  // namespace kiwi::io
