// kiwi graph JSON (docs/graph-format.md): reader, writer, and format detection for all graph readers.
#include "kiwi/io/graph_json.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiwi/io/file_io.h"
#include "kiwi/io/json_fields.h"
#include "kiwi/io/node_link_json.h"
#include "kiwi/ir/verify.h"

namespace kiwi::io {
namespace {

constexpr int64_t kGraphVersion = 1;
constexpr std::string_view kVersionKey = "kiwi_graph_version";
constexpr IntRange kLayerRange{-1, std::numeric_limits<int32_t>::max()};
constexpr IntRange kAxisRange{0, std::numeric_limits<int32_t>::max()};

std::string KindNames() {
  std::vector<std::string_view> names;
  for (int k = 0; k < ir::kNumOpKinds; ++k) names.push_back(ir::OpKindName(static_cast<ir::OpKind>(k)));
  return fmt::format("{}", fmt::join(names, ", "));
}

std::string PassName(ir::Pass pass) { return pass == ir::Pass::kBackward ? "backward" : "forward"; }

Status ReadIdentity(const Json& j, const JsonPath& at, size_t index, ir::Node& node) {
  Result<int64_t> id = IntFieldOr(j, at, "id", static_cast<int64_t>(index), kAnyInt);
  if (!id) return id.error();
  if (*id != static_cast<int64_t>(index))
    return at.BadKey("id", fmt::format("is {}, must equal the node's position {} (ids are dense)", *id, index));
  Result<std::string> name = StringField(j, at, "name");
  if (!name) return name.error();
  if (name->empty()) return at.BadKey("name", "must not be empty");
  node.name = std::move(*name);
  Result<std::string> kind = StringField(j, at, "kind");
  if (!kind) return kind.error();
  const std::optional<ir::OpKind> parsed = ir::ParseOpKind(*kind);
  if (!parsed) return at.BadKey("kind", fmt::format("unknown op kind '{}' (expected one of {})", *kind, KindNames()));
  node.kind = *parsed;
  Result<std::string> op = StringFieldOr(j, at, "op", "");
  if (!op) return op.error();
  node.op = std::move(*op);
  Result<std::string> pass = StringFieldOr(j, at, "pass", "forward");
  if (!pass) return pass.error();
  if (*pass != "forward" && *pass != "backward")
    return at.BadKey("pass", fmt::format("must be \"forward\" or \"backward\" (got \"{}\")", *pass));
  node.pass = *pass == "backward" ? ir::Pass::kBackward : ir::Pass::kForward;
  return Status::Ok();
}

Status ReadTensor(const Json& j, const JsonPath& at, ir::Node& node) {
  Result<std::string> dtype = StringField(j, at, "dtype");
  if (!dtype) return dtype.error();
  const std::optional<ir::DType> parsed = ir::ParseDType(*dtype);
  if (!parsed)
    return at.BadKey("dtype", fmt::format("unknown dtype '{}' (expected f64, f32, bf16, f16, i64, i32 or u8)", *dtype));
  node.output.dtype = *parsed;
  Result<const Json*> shape = ArrayField(j, at, "shape");
  if (!shape) return shape.error();
  int64_t bytes = ir::DTypeBytes(*parsed);
  for (size_t d = 0; d < (*shape)->size(); ++d) {
    Result<int64_t> dim = ReadInt((**shape)[d], at.Key("shape").Index(d), kPositive);
    if (!dim) return dim.error();
    if (__builtin_mul_overflow(bytes, *dim, &bytes))
      return at.BadKey("shape", "the tensor's size in bytes does not fit in 64 bits");
    node.output.shape.push_back(*dim);
  }
  return Status::Ok();
}

Result<ir::NodeId> ReadNodeRef(const Json& value, const JsonPath& at, int64_t num_nodes) {
  Result<int64_t> id = ReadInt(value, at, kAnyInt);
  if (!id) return id.error();
  if (*id < 0 || *id >= num_nodes)
    return at.Bad(fmt::format("node {} does not exist (the graph has {} nodes)", *id, num_nodes));
  return static_cast<ir::NodeId>(*id);
}

Status ReadEdges(const Json& j, const JsonPath& at, int64_t num_nodes, ir::Node& node) {
  if (const Json* inputs = FindField(j, "inputs")) {
    if (!inputs->is_array()) return at.BadKey("inputs", "must be a list of node ids");
    for (size_t i = 0; i < inputs->size(); ++i) {
      Result<ir::NodeId> in = ReadNodeRef((*inputs)[i], at.Key("inputs").Index(i), num_nodes);
      if (!in) return in.error();
      node.inputs.push_back(*in);
    }
  }
  if (const Json* grad_of = FindField(j, "grad_of"); grad_of != nullptr && *grad_of != -1) {
    Result<ir::NodeId> of = ReadNodeRef(*grad_of, at.Key("grad_of"), num_nodes);
    if (!of) return of.error();
    node.grad_of = *of;
  }
  return Status::Ok();
}

Status ReadCostsAndPlace(const Json& j, const JsonPath& at, ir::Node& node) {
  Result<double> flops = NumberFieldOr(j, at, "flops", 0.0, 0.0);
  if (!flops) return flops.error();
  node.flops = *flops;
  Result<int64_t> bytes = IntFieldOr(j, at, "bytes_accessed", 0, kNonNegative);
  if (!bytes) return bytes.error();
  node.bytes_accessed = *bytes;
  if (FindField(j, "cost") != nullptr) {
    Result<double> cost = NumberField(j, at, "cost", 0.0);
    if (!cost) return cost.error();
    node.measured_cost = *cost;
  }
  Result<int64_t> layer = IntFieldOr(j, at, "layer", -1, kLayerRange);
  if (!layer) return layer.error();
  node.layer = static_cast<int32_t>(*layer);
  Result<std::string> scope = StringFieldOr(j, at, "scope", "");
  if (!scope) return scope.error();
  node.scope = std::move(*scope);
  return Status::Ok();
}

Status ReadAttrAxes(const Json& a, const JsonPath& at, std::vector<int>& axes) {
  const Json* list = FindField(a, "axes");
  if (list == nullptr) return Status::Ok();
  if (!list->is_array()) return at.BadKey("axes", "must be a list of dimension indices");
  for (size_t i = 0; i < list->size(); ++i) {
    Result<int64_t> axis = ReadInt((*list)[i], at.Key("axes").Index(i), kAxisRange);
    if (!axis) return axis.error();
    axes.push_back(static_cast<int>(*axis));
  }
  return Status::Ok();
}

Status ReadAttrs(const Json& j, const JsonPath& node_at, ir::OpAttrs& attrs) {
  const Json* a = FindField(j, "attrs");
  if (a == nullptr) return Status::Ok();
  const JsonPath at = node_at.Key("attrs");
  KIWI_RETURN_IF_ERROR(CheckObject(*a, at));
  KIWI_RETURN_IF_ERROR(
      CheckKnownKeys(*a, at, {"transpose_a", "transpose_b", "axes", "stride", "padding", "window", "dropout_p", "causal"}));
  for (auto [key, field] : {std::pair{"transpose_a", &attrs.transpose_a}, std::pair{"transpose_b", &attrs.transpose_b},
                            std::pair{"causal", &attrs.causal}}) {
    Result<bool> v = BoolFieldOr(*a, at, key, false);
    if (!v) return v.error();
    *field = *v;
  }
  KIWI_RETURN_IF_ERROR(ReadAttrAxes(*a, at, attrs.axes));
  const std::pair<std::string_view, int64_t*> ints[] = {
      {"stride", &attrs.stride}, {"padding", &attrs.padding}, {"window", &attrs.window}};
  for (const auto& [key, field] : ints) {
    const int64_t min = key == "padding" ? 0 : 1;
    Result<int64_t> v = IntFieldOr(*a, at, key, min, {min, std::numeric_limits<int32_t>::max()});
    if (!v) return v.error();
    *field = *v;
  }
  Result<double> p = NumberFieldOr(*a, at, "dropout_p", 0.0, 0.0);
  if (!p) return p.error();
  if (*p >= 1.0) return at.BadKey("dropout_p", fmt::format("must be in [0, 1) (got {})", *p));
  attrs.dropout_p = *p;
  return Status::Ok();
}

Result<ir::Node> ReadKiwiNode(const Json& j, const JsonPath& at, size_t index, int64_t num_nodes) {
  KIWI_RETURN_IF_ERROR(CheckObject(j, at));
  KIWI_RETURN_IF_ERROR(CheckKnownKeys(j, at,
                                      {"id", "name", "kind", "op", "pass", "dtype", "shape", "inputs", "flops",
                                       "bytes_accessed", "cost", "grad_of", "layer", "scope", "attrs"}));
  ir::Node node;
  KIWI_RETURN_IF_ERROR(ReadIdentity(j, at, index, node));
  KIWI_RETURN_IF_ERROR(ReadTensor(j, at, node));
  KIWI_RETURN_IF_ERROR(ReadEdges(j, at, num_nodes, node));
  KIWI_RETURN_IF_ERROR(ReadCostsAndPlace(j, at, node));
  KIWI_RETURN_IF_ERROR(ReadAttrs(j, at, node.attrs));
  return node;
}

Result<ir::Graph> ReadKiwiGraph(const Json& doc, const std::string& source) {
  const JsonPath at(source);
  KIWI_RETURN_IF_ERROR(CheckKnownKeys(doc, at, {kVersionKey, "name", "operands", "nodes", "order"}));
  KIWI_RETURN_IF_ERROR(CheckVersion(doc, at, kVersionKey, kGraphVersion));
  Result<std::string> name = StringFieldOr(doc, at, "name", "");
  if (!name) return name.error();
  Result<const Json*> nodes = ArrayField(doc, at, "nodes");
  if (!nodes) return nodes.error();
  const auto n = static_cast<int64_t>((*nodes)->size());
  if (n > std::numeric_limits<int32_t>::max()) return at.BadKey("nodes", "too many nodes");
  ir::Graph g(std::move(*name));
  Result<std::string> operands = StringFieldOr(doc, at, "operands", "tensors");
  if (!operands) return operands.error();
  if (*operands != "tensors" && *operands != "storages")
    return at.BadKey("operands", fmt::format("must be \"tensors\" or \"storages\" (got \"{}\")", *operands));
  g.set_operands(*operands == "storages" ? ir::Operands::kStorages : ir::Operands::kTensors);
  for (size_t i = 0; i < (*nodes)->size(); ++i) {
    Result<ir::Node> node = ReadKiwiNode((**nodes)[i], at.Key("nodes").Index(i), i, n);
    if (!node) return node.error();
    g.Add(std::move(*node));
  }
  if (const Json* order = FindField(doc, "order")) {
    if (!order->is_array()) return at.BadKey("order", "must be a list of node ids");
    std::vector<ir::NodeId> ids;
    for (size_t i = 0; i < order->size(); ++i) {
      Result<ir::NodeId> id = ReadNodeRef((*order)[i], at.Key("order").Index(i), n);
      if (!id) return id.error();
      ids.push_back(*id);
    }
    g.set_order(std::move(ids));
  }
  // An acyclic graph whose ids run a node before its input gets this reader's message, which names
  // the JSON field; cycles are left to the verifier, which names a node on the cycle.
  if (!g.has_explicit_order() && ir::TopologicalOrder(g)) {
    if (const auto later = internal::FirstLaterInput(g)) {
      const auto [id, i] = *later;
      return at.Key("nodes").Index(static_cast<size_t>(id)).Key("inputs").BadIndex(
          i, fmt::format("node {} does not come before node {}; without an explicit \"order\" node ids must be "
                         "a topological order", g.node(id).inputs[i], id));
    }
  }
  KIWI_RETURN_IF_ERROR(ir::VerifyGraph(g, source));
  return g;
}

bool AnyElementHas(const Json* list, std::initializer_list<std::string_view> keys) {
  if (list == nullptr || !list->is_array()) return false;
  for (const Json& e : *list) {
    if (!e.is_object()) continue;
    for (std::string_view k : keys)
      if (e.contains(k)) return true;
  }
  return false;
}

Result<GraphFormat> DetectFormat(const Json& doc, const std::string& source) {
  const JsonPath at(source);
  if (!doc.is_object()) return at.Bad("the top level must be a JSON object (a graph document)");
  if (doc.contains(kVersionKey)) return GraphFormat::kKiwi;
  const Json* nodes = FindField(doc, "nodes");
  const Json* links = FindField(doc, "links");
  if (links == nullptr) links = FindField(doc, "edges");
  if (AnyElementHas(nodes, {"cost_ram", "cost_cpu"})) return GraphFormat::kCheckmateNodeLink;
  if (AnyElementHas(nodes, {"out_cost", "duration"}) || AnyElementHas(links, {"0"}))
    return GraphFormat::kRandomLayeredNodeLink;
  return at.Bad(
      "not a recognised graph: expected kiwi graph JSON (with \"kiwi_graph_version\"), Checkmate node-link JSON "
      "(nodes with \"cost_ram\") or random-layered node-link JSON (nodes with \"out_cost\")");
}

OrderedJson AttrsJson(const ir::OpAttrs& a) {
  const ir::OpAttrs d;
  OrderedJson j = OrderedJson::object();
  if (a.transpose_a != d.transpose_a) j["transpose_a"] = a.transpose_a;
  if (a.transpose_b != d.transpose_b) j["transpose_b"] = a.transpose_b;
  if (a.axes != d.axes) j["axes"] = a.axes;
  if (a.stride != d.stride) j["stride"] = a.stride;
  if (a.padding != d.padding) j["padding"] = a.padding;
  if (a.window != d.window) j["window"] = a.window;
  if (a.dropout_p != d.dropout_p) j["dropout_p"] = a.dropout_p;
  if (a.causal != d.causal) j["causal"] = a.causal;
  return j;
}

OrderedJson NodeJson(const ir::Node& n) {
  OrderedJson j;
  j["id"] = n.id;
  j["name"] = n.name;
  j["kind"] = ir::OpKindName(n.kind);
  j["op"] = n.op;
  j["pass"] = PassName(n.pass);
  j["dtype"] = ir::DTypeName(n.output.dtype);
  j["shape"] = n.output.shape;
  j["inputs"] = n.inputs;
  j["flops"] = n.flops;
  j["bytes_accessed"] = n.bytes_accessed;
  if (n.measured_cost) j["cost"] = *n.measured_cost;
  if (n.grad_of != ir::kNoNode) j["grad_of"] = n.grad_of;
  if (n.layer != -1) j["layer"] = n.layer;
  if (!n.scope.empty()) j["scope"] = n.scope;
  if (!(n.attrs == ir::OpAttrs{})) j["attrs"] = AttrsJson(n.attrs);
  return j;
}

}  // namespace

Result<GraphFormat> DetectGraphFormat(std::string_view text, const std::string& source) {
  return GuardJson(source, [&]() -> Result<GraphFormat> {
    Result<Json> doc = ParseJson(text, source);
    if (!doc) return doc.error();
    return DetectFormat(*doc, source);
  });
}

Result<ir::Graph> ParseGraphJson(std::string_view text, const std::string& source) {
  return GuardJson(source, [&]() -> Result<ir::Graph> {
    Result<Json> doc = ParseJson(text, source);
    if (!doc) return doc.error();
    Result<GraphFormat> format = DetectFormat(*doc, source);
    if (!format) return format.error();
    switch (*format) {
      case GraphFormat::kKiwi: return ReadKiwiGraph(*doc, source);
      case GraphFormat::kCheckmateNodeLink: return internal::ReadCheckmateNodeLink(*doc, source);
      case GraphFormat::kRandomLayeredNodeLink: return internal::ReadRandomLayeredNodeLink(*doc, source);
    }
    return Internal(source + ": unhandled graph format");
  });
}

Result<ir::Graph> ReadGraphFile(const std::string& path) {
  Result<std::string> text = ReadFileText(path);
  if (!text) return text.error();
  return ParseGraphJson(*text, path);
}

std::string WriteGraphJson(const ir::Graph& graph) {
  OrderedJson doc;
  doc[kVersionKey] = kGraphVersion;
  doc["name"] = graph.name();
  if (graph.operands() == ir::Operands::kStorages) doc["operands"] = "storages";
  doc["nodes"] = OrderedJson::array();
  for (const ir::Node& n : graph.nodes()) doc["nodes"].push_back(NodeJson(n));
  if (graph.has_explicit_order()) doc["order"] = graph.order();
  return DumpReadable(doc, 2);
}

}  // namespace kiwi::io
