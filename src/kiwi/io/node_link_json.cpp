// networkx node-link readers: Checkmate's exported training graphs and Moccasin's random layered graphs.
#include "kiwi/io/node_link_json.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

#include "kiwi/ir/verify.h"

namespace kiwi::io::internal {
namespace {

// What differs between the two node-link dialects.
struct Dialect {
  std::string_view id_key;      // the node attribute holding the node id
  std::string_view size_key;    // output size in bytes
  std::string_view cost_key;    // profiled cost of one execution
  std::string_view source_key;  // link endpoints
  std::string_view target_key;
  bool has_backward;            // Checkmate marks backward nodes; random-layered graphs are forward only
  bool has_order;               // random-layered graphs carry a graph attribute `order`
};

constexpr Dialect kCheckmate{"id", "cost_ram", "cost_cpu", "source", "target", true, false};
constexpr Dialect kRandomLayered{"name", "out_cost", "duration", "0", "1", false, true};

// File ids sorted ascending; dense index = position in this list.
struct IdMap {
  std::vector<int64_t> ids;
  std::vector<size_t> file_pos;  // file_pos[dense]: index of the node in the file's "nodes" array

  std::optional<ir::NodeId> Find(int64_t id) const {
    const auto it = std::lower_bound(ids.begin(), ids.end(), id);
    if (it == ids.end() || *it != id) return std::nullopt;
    return static_cast<ir::NodeId>(it - ids.begin());
  }
};

Result<IdMap> ReadIds(const Json& nodes, const JsonPath& at, const Dialect& d) {
  if (nodes.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    return at.Bad("too many nodes");
  std::vector<std::pair<int64_t, size_t>> pairs;
  pairs.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    KIWI_RETURN_IF_ERROR(CheckObject(nodes[i], at.Index(i)));
    Result<int64_t> id = IntField(nodes[i], at.Index(i), d.id_key, kAnyInt);
    if (!id) return id.error();
    pairs.emplace_back(*id, i);
  }
  std::sort(pairs.begin(), pairs.end());
  IdMap map;
  for (size_t k = 0; k < pairs.size(); ++k) {
    if (k > 0 && pairs[k].first == pairs[k - 1].first)
      return at.Index(pairs[k].second)
          .BadKey(d.id_key, fmt::format("duplicate node id {} (also nodes[{}])", pairs[k].first, pairs[k - 1].second));
    map.ids.push_back(pairs[k].first);
    map.file_pos.push_back(pairs[k].second);
  }
  return map;
}

Result<ir::Node> ReadNode(const Json& j, const JsonPath& at, int64_t id, const Dialect& d) {
  ir::Node node;
  node.kind = ir::OpKind::kOpaque;
  if (d.has_backward) {
    Result<std::string> name = StringFieldOr(j, at, "name", "");
    if (!name) return name.error();
    node.name = name->empty() ? std::to_string(id) : *name;
    Result<bool> backward = BoolFieldOr(j, at, "backward", false);
    if (!backward) return backward.error();
    node.pass = *backward ? ir::Pass::kBackward : ir::Pass::kForward;
  } else {
    node.name = std::to_string(id);
    Result<int64_t> param = IntFieldOr(j, at, "param_cost", 0, kNonNegative);
    if (!param) return param.error();
    // Every published random-layered graph has param_cost 0; a nonzero value has no IR meaning yet.
    if (*param != 0)
      return at.BadKey("param_cost", "nonzero parameter memory is not supported (the published graphs all have 0)");
  }
  Result<double> cost = NumberField(j, at, d.cost_key, 0.0);
  if (!cost) return cost.error();
  node.measured_cost = *cost;
  Result<int64_t> bytes = IntField(j, at, d.size_key, kPositive);
  if (!bytes) return bytes.error();
  node.output = {ir::DType::kU8, {*bytes}};
  return node;
}

Result<const Json*> FindLinks(const Json& doc, const JsonPath& at, std::string& key) {
  key = FindField(doc, "links") == nullptr && FindField(doc, "edges") != nullptr ? "edges" : "links";
  return ArrayField(doc, at, key);  // networkx >= 3.4 may name the list "edges"
}

// Adds each link as an input of its target; a repeated link (meaningless in a non-multigraph) counts once.
Status AddLinks(const Json& doc, const JsonPath& root, const IdMap& map, const Dialect& d, ir::Graph& g) {
  std::string key;
  Result<const Json*> links = FindLinks(doc, root, key);
  if (!links) return links.error();
  const JsonPath at = root.Key(key);
  std::unordered_set<uint64_t> seen;
  for (size_t i = 0; i < (*links)->size(); ++i) {
    const Json& link = (**links)[i];
    KIWI_RETURN_IF_ERROR(CheckObject(link, at.Index(i)));
    ir::NodeId ends[2] = {ir::kNoNode, ir::kNoNode};
    const std::string_view keys[2] = {d.source_key, d.target_key};
    for (int e = 0; e < 2; ++e) {
      Result<int64_t> id = IntField(link, at.Index(i), keys[e], kAnyInt);
      if (!id) return id.error();
      const std::optional<ir::NodeId> dense = map.Find(*id);
      if (!dense) return at.Index(i).BadKey(keys[e], fmt::format("node {} does not exist", *id));
      ends[e] = *dense;
    }
    const uint64_t pair = (static_cast<uint64_t>(ends[1]) << 32) | static_cast<uint32_t>(ends[0]);
    if (seen.insert(pair).second) g.mutable_node(ends[1]).inputs.push_back(ends[0]);
  }
  return Status::Ok();
}

// `order` is a list of ids, or (as Moccasin writes it) a string holding that list.
Result<Json> OrderList(const Json& value, const JsonPath& at) {
  if (value.is_array()) return value;
  if (!value.is_string()) return at.Bad("must be a list of node ids (or a string holding one)");
  Result<Json> parsed = ParseJson(value.get_ref<const std::string&>(), "order");
  if (!parsed || !parsed->is_array())
    return at.Bad("must be a list of node ids (the string does not hold a JSON list)");
  return parsed;
}

Status ReadOrder(const Json& doc, const JsonPath& root, const IdMap& map, ir::Graph& g) {
  const Json* graph = FindField(doc, "graph");
  const Json* value = graph == nullptr ? nullptr : FindField(*graph, "order");
  if (value == nullptr) return Status::Ok();  // no order: ids ascending
  const JsonPath at = root.Key("graph").Key("order");
  Result<Json> list = OrderList(*value, at);
  if (!list) return list.error();
  if (static_cast<int64_t>(list->size()) != g.size())
    return at.Bad(fmt::format("lists {} nodes, the graph has {}", list->size(), g.size()));
  std::vector<ir::NodeId> order;
  std::vector<bool> listed(static_cast<size_t>(g.size()), false);
  for (size_t i = 0; i < list->size(); ++i) {
    Result<int64_t> id = ReadInt((*list)[i], at.Index(i), kAnyInt);
    if (!id) return id.error();
    const std::optional<ir::NodeId> dense = map.Find(*id);
    if (!dense) return at.BadIndex(i, fmt::format("node {} does not exist", *id));
    if (listed[static_cast<size_t>(*dense)]) return at.BadIndex(i, fmt::format("node {} listed twice", *id));
    listed[static_cast<size_t>(*dense)] = true;
    order.push_back(*dense);
  }
  g.set_order(std::move(order));
  return Status::Ok();
}

Result<std::string> GraphName(const Json& doc, const JsonPath& at) {
  const Json* graph = FindField(doc, "graph");
  if (graph == nullptr) return std::string();
  KIWI_RETURN_IF_ERROR(CheckObject(*graph, at.Key("graph")));
  const Json* name = FindField(*graph, "name");
  return name != nullptr && name->is_string() ? name->get<std::string>() : std::string();
}

Result<ir::Graph> ReadNodeLink(const Json& doc, const std::string& source, const Dialect& d) {
  const JsonPath at(source);
  KIWI_RETURN_IF_ERROR(CheckObject(doc, at));
  Result<const Json*> nodes = ArrayField(doc, at, "nodes");
  if (!nodes) return nodes.error();
  Result<IdMap> map = ReadIds(**nodes, at.Key("nodes"), d);
  if (!map) return map.error();
  Result<std::string> name = GraphName(doc, at);
  if (!name) return name.error();
  ir::Graph g(*name);
  for (size_t k = 0; k < map->ids.size(); ++k) {
    const size_t pos = map->file_pos[k];
    Result<ir::Node> node = ReadNode((**nodes)[pos], at.Key("nodes").Index(pos), map->ids[k], d);
    if (!node) return node.error();
    g.Add(std::move(*node));
  }
  KIWI_RETURN_IF_ERROR(AddLinks(doc, at, *map, d, g));
  if (d.has_order) KIWI_RETURN_IF_ERROR(ReadOrder(doc, at, *map, g));
  // Checkmate ids are a topological order; a graph whose ids are not runs in the smallest-id-first one.
  if (!g.has_explicit_order() && FirstLaterInput(g))
    if (auto order = ir::TopologicalOrder(g)) g.set_order(std::move(*order));
  KIWI_RETURN_IF_ERROR(ir::VerifyGraph(g, source));  // cycles are reported here
  return g;
}

}  // namespace

std::optional<std::pair<ir::NodeId, size_t>> FirstLaterInput(const ir::Graph& g) {
  for (const ir::Node& n : g.nodes())
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (n.inputs[i] >= n.id) return std::make_pair(n.id, i);
  return std::nullopt;
}

Result<ir::Graph> ReadCheckmateNodeLink(const Json& doc, const std::string& source) {
  return ReadNodeLink(doc, source, kCheckmate);
}

Result<ir::Graph> ReadRandomLayeredNodeLink(const Json& doc, const std::string& source) {
  return ReadNodeLink(doc, source, kRandomLayered);
}

}  // namespace kiwi::io::internal
