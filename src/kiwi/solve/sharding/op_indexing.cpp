// Loop nests of the IR's operators (op_indexing.h), one small describer per operator family,
// dispatched through kDescribers (DESIGN.md: a table of small handlers, not a giant switch).
#include "kiwi/solve/sharding/op_indexing.h"

#include <algorithm>
#include <array>
#include <limits>
#include <numeric>
#include <string_view>

namespace kiwi::solve::sharding::internal {
namespace {

using ir::Shape;
using Dims = std::vector<int>;
using Nest = std::optional<OpIndexing>;

int AddIndex(OpIndexing& ix, int64_t size, bool exact = false) {
  ix.indices.push_back({size, exact});
  return static_cast<int>(ix.indices.size()) - 1;
}

// One fresh index per dim of `shape`.
Dims AddIndices(OpIndexing& ix, const Shape& shape) {
  Dims dims;
  for (int64_t size : shape) dims.push_back(AddIndex(ix, size));
  return dims;
}

Dims Concat(Dims a, const Dims& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Shape Leading(const Shape& s) { return s.empty() ? s : Shape(s.begin(), s.end() - 1); }

const Shape& InShape(const ir::Graph& g, const ir::Node& n, size_t i) { return g.node(n.inputs[i]).output.shape; }

// ---- matmul / batch_matmul / conv2d: Y = A (*) B. Forward ops read (A, B[, bias]) and write Y;
// "_grad_a"/"_grad_x" read (dY, B) and write dA; "_grad_b"/"_grad_w" read (A, dY) and write dB.
enum Role : uint8_t { kA = 0, kB = 1, kY = 2 };
struct Roles {
  Role out;
  std::array<Role, 2> in;
};

Roles RolesOf(std::string_view op) {
  if (op.ends_with("_grad_a") || op.ends_with("_grad_x")) return {kA, {kY, kB}};
  if (op.ends_with("_grad_b") || op.ends_with("_grad_w")) return {kB, {kA, kY}};
  return {kY, {kA, kB}};
}

// The shapes of A, B and Y read off the node's inputs and output.
std::optional<std::array<Shape, 3>> TripleShapes(const ir::Graph& g, const ir::Node& n, const Roles& roles) {
  const size_t arity = roles.out == kY ? 3 : 2;  // a forward op may carry a bias
  if (n.inputs.size() < 2 || n.inputs.size() > arity) return std::nullopt;
  std::array<Shape, 3> shapes;
  shapes[roles.out] = n.output.shape;
  shapes[roles.in[0]] = InShape(g, n, 0);
  shapes[roles.in[1]] = InShape(g, n, 1);
  return shapes;
}

// Output and operands from the dims of A, B and Y; a forward op's third input is the bias over `bias`.
OpIndexing FinishTriple(OpIndexing ix, const ir::Node& n, const Roles& roles, const std::array<Dims, 3>& dims,
                        int bias) {
  ix.output = dims[roles.out];
  ix.operands = {dims[roles.in[0]], dims[roles.in[1]]};
  if (n.inputs.size() == 3) ix.operands.push_back({bias});
  return ix;
}

// A[..., M, K] x B[(...,) K, N] -> Y[..., M, N], attrs.transpose_a/b swapping A's and B's last dims:
// Alpa's family is every assignment of mesh axes to the batch dims, M, N and the contraction K.
Nest MatmulLike(const ir::Graph& g, const ir::Node& n, bool batched) {
  const Roles roles = RolesOf(n.op);
  const std::optional<std::array<Shape, 3>> shapes = TripleShapes(g, n, roles);
  if (!shapes) return std::nullopt;
  const Shape& a = (*shapes)[kA];
  const Shape& y = (*shapes)[kY];
  const size_t r = a.size();
  if (r < 2 || y.size() != r || (*shapes)[kB].size() != (batched ? r : 2)) return std::nullopt;
  OpIndexing ix;
  const Dims batch = AddIndices(ix, Shape(a.begin(), a.end() - 2));
  const int m = AddIndex(ix, y[r - 2]);
  const int cols = AddIndex(ix, y[r - 1]);
  const int k = AddIndex(ix, n.attrs.transpose_a ? a[r - 2] : a[r - 1]);
  std::array<Dims, 3> dims = {batch, batched ? batch : Dims{}, batch};
  dims[kA] = Concat(dims[kA], n.attrs.transpose_a ? Dims{k, m} : Dims{m, k});
  dims[kB] = Concat(dims[kB], n.attrs.transpose_b ? Dims{cols, k} : Dims{k, cols});
  dims[kY] = Concat(dims[kY], {m, cols});
  return FinishTriple(std::move(ix), n, roles, dims, cols);
}
Nest Matmul(const ir::Graph& g, const ir::Node& n) { return MatmulLike(g, n, false); }
Nest BatchMatmul(const ir::Graph& g, const ir::Node& n) { return MatmulLike(g, n, true); }

// x[N, C, H, W] (*) w[O, C, kh, kw] -> y[N, O, H', W']: batch, out-channels and the contracted
// in-channels split; spatial dims never (a split would need halo exchanges).
Nest Conv(const ir::Graph& g, const ir::Node& n) {
  const Roles roles = RolesOf(n.op);
  const std::optional<std::array<Shape, 3>> shapes = TripleShapes(g, n, roles);
  if (!shapes) return std::nullopt;
  for (const Shape& s : *shapes)
    if (s.size() != 4) return std::nullopt;
  OpIndexing ix;
  const int batch = AddIndex(ix, (*shapes)[kA][0]);
  const int in_channels = AddIndex(ix, (*shapes)[kA][1]);
  const int out_channels = AddIndex(ix, (*shapes)[kB][0]);
  std::array<Dims, 3> dims;
  dims[kA] = {batch, in_channels, kNoIndex, kNoIndex};
  dims[kB] = {out_channels, in_channels, kNoIndex, kNoIndex};
  dims[kY] = {batch, out_channels, kNoIndex, kNoIndex};
  return FinishTriple(std::move(ix), n, roles, dims, out_channels);
}

// Pools and their gradients: every tensor is [N, C, *, *] with the same N and C; windows never split.
Nest Pool(const ir::Graph& g, const ir::Node& n) {
  if (n.output.Rank() != 4) return std::nullopt;
  OpIndexing ix;
  const Dims dims = {AddIndex(ix, n.output.shape[0]), AddIndex(ix, n.output.shape[1]), kNoIndex, kNoIndex};
  ix.output = dims;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const Shape& s = InShape(g, n, i);
    if (s.size() != 4 || s[0] != n.output.shape[0] || s[1] != n.output.shape[1]) return std::nullopt;
    ix.operands.push_back(dims);
  }
  return ix;
}

// Elementwise ops follow the output's layout; operands broadcast numpy style (aligned from the
// right), their size-1 broadcast dims stay whole.
Nest Elementwise(const ir::Graph& g, const ir::Node& n) {
  OpIndexing ix;
  const Shape& y = n.output.shape;
  ix.output = AddIndices(ix, y);
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const Shape& s = InShape(g, n, i);
    if (s.size() > y.size()) return std::nullopt;
    const size_t lead = y.size() - s.size();
    Dims dims;
    for (size_t j = 0; j < s.size(); ++j) {
      if (s[j] != y[lead + j] && s[j] != 1) return std::nullopt;
      dims.push_back(s[j] == y[lead + j] ? ix.output[lead + j] : kNoIndex);
    }
    ix.operands.push_back(std::move(dims));
  }
  return ix;
}

// The dims of a reduced tensor of rank `rank` over the full tensor's indices: the kept form (same
// rank, reduced dims of size 1 name no index) or the removed form. attrs.axes empty = all dims.
std::optional<Dims> ReducedDims(const Dims& full, const std::vector<int>& axes, size_t rank) {
  std::vector<bool> reduced(full.size(), axes.empty());
  for (int a : axes) {
    if (a < 0 || static_cast<size_t>(a) >= full.size()) return std::nullopt;
    reduced[static_cast<size_t>(a)] = true;
  }
  Dims kept, removed;
  for (size_t d = 0; d < full.size(); ++d) {
    kept.push_back(reduced[d] ? kNoIndex : full[d]);
    if (!reduced[d]) removed.push_back(full[d]);
  }
  if (rank == kept.size()) return kept;
  if (rank == removed.size()) return removed;
  return std::nullopt;
}

// sum/mean/max (x) -> y: kept dims split the output, reduced dims leave partial results.
Nest Reduce(const ir::Graph& g, const ir::Node& n) {
  if (n.inputs.size() != 1) return std::nullopt;
  OpIndexing ix;
  const Dims full = AddIndices(ix, InShape(g, n, 0));
  std::optional<Dims> out = ReducedDims(full, n.attrs.axes, static_cast<size_t>(n.output.Rank()));
  if (!out) return std::nullopt;
  ix.output = std::move(*out);
  ix.operands = {full};
  return ix;
}

// sum_grad/mean_grad (dY) -> dx and max_grad (dY, x) -> dx: dY broadcast back over the reduced dims.
Nest ReduceGrad(const ir::Graph& g, const ir::Node& n) {
  if (n.inputs.empty() || n.inputs.size() > 2) return std::nullopt;
  OpIndexing ix;
  ix.output = AddIndices(ix, n.output.shape);
  std::optional<Dims> dy = ReducedDims(ix.output, n.attrs.axes, InShape(g, n, 0).size());
  if (!dy) return std::nullopt;
  ix.operands = {std::move(*dy)};
  if (n.inputs.size() == 2) ix.operands.push_back(ix.output);
  return ix;
}

// What a tensor of lower rank than the rows of a normalized op holds: the leading dims (labels of a
// loss) or the normalized dim alone (gamma, beta and their gradients).
enum class LowerRank : uint8_t { kLeadingDims, kNormalizedDim };

// The dims of a tensor of rank `rank` among an op's rows `full` (whose last dim is never split).
std::optional<Dims> RowDims(const Dims& full, size_t rank, LowerRank lower) {
  if (rank == full.size()) return full;
  if (lower == LowerRank::kLeadingDims && rank + 1 == full.size()) return Dims(full.begin(), full.end() - 1);
  if (lower == LowerRank::kNormalizedDim && rank == 1) return Dims{kNoIndex};
  return std::nullopt;
}

// Rows split, the normalized last dim of `full_shape` never.
Nest Normalized(const ir::Graph& g, const ir::Node& n, const Shape& full_shape, LowerRank lower) {
  if (full_shape.empty()) return std::nullopt;
  OpIndexing ix;
  const Dims full = Concat(AddIndices(ix, Leading(full_shape)), {kNoIndex});
  std::optional<Dims> out = RowDims(full, static_cast<size_t>(n.output.Rank()), lower);
  if (!out && n.output.Rank() == 0 && n.kind == ir::OpKind::kLoss) out = Dims{};  // the scalar loss
  if (!out) return std::nullopt;
  ix.output = std::move(*out);
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    std::optional<Dims> dims = RowDims(full, InShape(g, n, i).size(), lower);
    if (!dims) return std::nullopt;
    ix.operands.push_back(std::move(*dims));
  }
  return ix;
}

// attention (q[..., sq, d], k[..., sk, d], v[..., sk, dv]) -> o[..., sq, dv]: the batch dims (batch,
// heads) and the query rows split; the keys never (each row's softmax needs all its scores: ring
// attention, not a split of this op), nor the head dims. Its gradients read (dO, q, k, v, o): dq splits
// like the query rows; dk and dv sum over the query rows, so a split of them leaves partial sums.
Nest Attention(const ir::Graph& g, const ir::Node& n) {
  const bool grad = n.op.starts_with("attention_grad_");
  if (n.inputs.size() != (grad ? 5u : 3u)) return std::nullopt;
  const Shape& q = InShape(g, n, grad ? 1 : 0);
  if (q.size() < 2) return std::nullopt;
  OpIndexing ix;
  const Dims batch = AddIndices(ix, Shape(q.begin(), q.end() - 2));
  const int rows = AddIndex(ix, q[q.size() - 2]);
  const Dims query = Concat(batch, {rows, kNoIndex});
  const Dims keys = Concat(batch, {kNoIndex, kNoIndex});
  if (!grad) {
    ix.operands = {query, keys, keys};
    ix.output = query;
    return ix;
  }
  ix.operands = {query, query, keys, keys, query};
  ix.output = n.op == "attention_grad_q" ? query : keys;
  return ix;
}

// softmax (x), softmax_grad (dY, y), nll_loss_grad (labels), cross_entropy_grad (logits, nll_loss_grad):
// shaped like the output.
Nest Softmax(const ir::Graph& g, const ir::Node& n) {
  return Normalized(g, n, n.output.shape, LowerRank::kLeadingDims);
}

// layernorm/rmsnorm (x, gamma[, beta]) and their grads: shaped like the first input; the gamma/beta
// grads (dY, x) -> [H] sum over the rows, which therefore leave partial sums.
Nest Norm(const ir::Graph& g, const ir::Node& n) {
  if (n.inputs.empty()) return std::nullopt;
  return Normalized(g, n, InShape(g, n, 0), LowerRank::kNormalizedDim);
}

// topk (x[..., n]) -> indices[..., k]: the rows split, the last dim (the choice among n) never.
Nest TopK(const ir::Graph& g, const ir::Node& n) {
  if (n.inputs.size() != 1) return std::nullopt;
  return Normalized(g, n, InShape(g, n, 0), LowerRank::kLeadingDims);
}

// cross_entropy (logits[..., V], labels[...]) -> scalar: token splits leave partial sums.
Nest CrossEntropy(const ir::Graph& g, const ir::Node& n) {
  if (n.inputs.size() != 2 || n.output.Rank() != 0) return std::nullopt;
  return Normalized(g, n, InShape(g, n, 0), LowerRank::kLeadingDims);
}

// embedding (table[V, H], ids[...]) -> [..., H]: ids split, or H, or the vocabulary V (each device
// looks up its rows: partial sums, Megatron's vocab-parallel embedding).
Nest Embedding(const ir::Graph& g, const ir::Node& n) {
  if (n.inputs.size() != 2 || InShape(g, n, 0).size() != 2) return std::nullopt;
  OpIndexing ix;
  const Dims tokens = AddIndices(ix, InShape(g, n, 1));
  const int hidden = AddIndex(ix, InShape(g, n, 0)[1]);
  const int vocab = AddIndex(ix, InShape(g, n, 0)[0]);
  ix.output = Concat(tokens, {hidden});
  ix.operands = {{vocab, hidden}, tokens};
  return ix;
}

// embedding_grad (dY[..., H], ids[...]) -> [V, H]: rows V or H split; token splits leave partial sums.
Nest EmbeddingGrad(const ir::Graph& g, const ir::Node& n) {
  if (n.inputs.size() != 2 || n.output.Rank() != 2) return std::nullopt;
  OpIndexing ix;
  const Dims tokens = AddIndices(ix, InShape(g, n, 1));
  const int hidden = AddIndex(ix, n.output.shape[1]);
  const int vocab = AddIndex(ix, n.output.shape[0]);
  ix.output = {vocab, hidden};
  ix.operands = {Concat(tokens, {hidden}), tokens};
  return ix;
}

// The next dim of `s` at or after `i` that is not 1.
size_t SkipOnes(const Shape& s, size_t i) {
  while (i < s.size() && s[i] == 1) ++i;
  return i;
}

// Extends the run of dims starting at x[i] and y[j] until both sides have equal products; i and j end
// on the run's last dims. False when no such run exists (element counts differ) or it overflows.
bool ExtendRun(const Shape& x, const Shape& y, size_t& i, size_t& j) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t px = x[i], py = y[j];
  while (px != py) {
    const bool grow_x = px < py;
    const Shape& side = grow_x ? x : y;
    size_t& k = grow_x ? i : j;
    int64_t& product = grow_x ? px : py;
    if (++k >= side.size() || side[k] <= 0 || product <= 0 || product > kMax / side[k]) return false;
    product *= side[k];
  }
  return true;
}

// reshape: dims are grouped into the fewest runs with equal products ([B, s, h] -> [B, s, n, d]:
// {B}, {s}, {h | n, d}); splitting the outermost dim of a run on both sides moves the same contiguous
// blocks, so those two share an index (a split must divide both); the other dims stay whole.
Nest Reshape(const ir::Graph& g, const ir::Node& n) {
  if (n.inputs.size() != 1) return std::nullopt;
  const Shape& x = InShape(g, n, 0);
  const Shape& y = n.output.shape;
  OpIndexing ix;
  Dims in(x.size(), kNoIndex), out(y.size(), kNoIndex);
  size_t i = SkipOnes(x, 0), j = SkipOnes(y, 0);
  while (i < x.size() && j < y.size()) {
    const size_t i0 = i, j0 = j;
    if (!ExtendRun(x, y, i, j)) return std::nullopt;
    const int index = AddIndex(ix, std::gcd(x[i0], y[j0]), /*exact=*/i != i0 || j != j0);
    in[i0] = index;
    out[j0] = index;
    i = SkipOnes(x, i + 1);
    j = SkipOnes(y, j + 1);
  }
  if (i < x.size() || j < y.size()) return std::nullopt;
  ix.output = std::move(out);
  ix.operands = {std::move(in)};
  return ix;
}

// transpose: output dim i is input dim attrs.axes[i].
Nest Transpose(const ir::Graph& g, const ir::Node& n) {
  if (n.inputs.size() != 1) return std::nullopt;
  const std::vector<int>& perm = n.attrs.axes;
  const size_t rank = InShape(g, n, 0).size();
  std::vector<int> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (size_t d = 0; d < sorted.size(); ++d)
    if (sorted[d] != static_cast<int>(d)) return std::nullopt;
  if (perm.size() != rank || static_cast<size_t>(n.output.Rank()) != rank) return std::nullopt;
  OpIndexing ix;
  const Dims full = AddIndices(ix, InShape(g, n, 0));
  for (int p : perm) ix.output.push_back(full[static_cast<size_t>(p)]);
  ix.operands = {full};
  return ix;
}

// concat (x_i[..., n_i]) -> [..., sum n_i]: the leading dims split alike (an input's broadcast size-1
// dims name no index), the joined last dim never.
Nest Concat(const ir::Graph& g, const ir::Node& n) {
  const Shape& y = n.output.shape;
  if (n.inputs.size() < 2 || y.empty()) return std::nullopt;
  OpIndexing ix;
  ix.output = AddIndices(ix, Shape(y.begin(), y.end() - 1));
  ix.output.push_back(kNoIndex);
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const Shape& s = InShape(g, n, i);
    if (s.size() != y.size()) return std::nullopt;
    Dims dims;
    for (size_t j = 0; j + 1 < s.size(); ++j) {
      if (s[j] != y[j] && s[j] != 1) return std::nullopt;
      dims.push_back(s[j] == y[j] ? ix.output[j] : kNoIndex);
    }
    dims.push_back(kNoIndex);
    ix.operands.push_back(std::move(dims));
  }
  return ix;
}

// concat_grad (dY[..., n]) -> [..., n_i]: the leading dims split alike, the sliced last dim never.
Nest ConcatGrad(const ir::Graph& g, const ir::Node& n) {
  if (n.inputs.size() != 1 || InShape(g, n, 0).size() != n.output.shape.size() || n.output.shape.empty())
    return std::nullopt;
  OpIndexing ix;
  const Shape& y = n.output.shape;
  ix.output = AddIndices(ix, Shape(y.begin(), y.end() - 1));
  ix.output.push_back(kNoIndex);
  ix.operands = {ix.output};
  return ix;
}

// Inputs, parameters, optimizer state and random masks: any dim of the output may be split (a
// sharded parameter or state holds only its shard: ZeRO's memory saving).
Nest Source(const ir::Graph&, const ir::Node& n) {
  if (!n.inputs.empty()) return std::nullopt;
  OpIndexing ix;
  ix.output = AddIndices(ix, n.output.shape);
  return ix;
}

using Describer = Nest (*)(const ir::Graph&, const ir::Node&);
struct DescriberRule {
  ir::OpKind kind;
  std::string_view op;  // "" = the kind's default
  Describer describe;
};

constexpr auto kDescribers = std::to_array<DescriberRule>({
    {ir::OpKind::kInput, "", Source},
    {ir::OpKind::kParameter, "", Source},
    {ir::OpKind::kOptimizerState, "", Source},
    {ir::OpKind::kRandom, "", Source},
    {ir::OpKind::kMatmul, "", Matmul},
    {ir::OpKind::kBatchMatmul, "", BatchMatmul},
    {ir::OpKind::kConv, "", Conv},
    {ir::OpKind::kPool, "", Pool},
    {ir::OpKind::kElementwise, "", Elementwise},
    {ir::OpKind::kReduce, "", Reduce},
    {ir::OpKind::kReduce, "topk", TopK},
    {ir::OpKind::kReduce, "sum_grad", ReduceGrad},
    {ir::OpKind::kReduce, "mean_grad", ReduceGrad},
    {ir::OpKind::kReduce, "max_grad", ReduceGrad},
    {ir::OpKind::kAttention, "", Attention},
    {ir::OpKind::kSoftmax, "", Softmax},
    {ir::OpKind::kLayerNorm, "", Norm},
    {ir::OpKind::kEmbedding, "", Embedding},
    {ir::OpKind::kEmbedding, "embedding_grad", EmbeddingGrad},
    {ir::OpKind::kReshape, "", Reshape},
    {ir::OpKind::kReshape, "concat", Concat},
    {ir::OpKind::kReshape, "concat_grad", ConcatGrad},
    {ir::OpKind::kTranspose, "", Transpose},
    {ir::OpKind::kLoss, "", CrossEntropy},
    {ir::OpKind::kLoss, "cross_entropy", CrossEntropy},
});

// A describer's nest must name one index (or none) per dim of the output and of every input.
bool Fits(const OpIndexing& ix, const ir::Graph& g, const ir::Node& n) {
  const auto valid = [&](const Dims& dims, size_t rank) {
    return dims.size() == rank && std::all_of(dims.begin(), dims.end(), [&](int d) {
             return d >= kNoIndex && d < static_cast<int>(ix.indices.size());
           });
  };
  if (!valid(ix.output, static_cast<size_t>(n.output.Rank())) || ix.operands.size() != n.inputs.size()) return false;
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (!valid(ix.operands[i], InShape(g, n, i).size())) return false;
  return true;
}

}  // namespace

bool OpIndexing::IsContracted(int index) const { return std::find(output.begin(), output.end(), index) == output.end(); }

std::optional<OpIndexing> DescribeOp(const ir::Graph& graph, const ir::Node& node) {
  for (ir::NodeId in : node.inputs)
    if (in < 0 || in >= graph.size()) return std::nullopt;
  const DescriberRule* fallback = nullptr;
  const DescriberRule* exact = nullptr;
  for (const DescriberRule& rule : kDescribers) {
    if (rule.kind != node.kind) continue;
    if (rule.op.empty()) fallback = &rule;
    if (!rule.op.empty() && rule.op == node.op) exact = &rule;
  }
  const DescriberRule* rule = exact ? exact : fallback;
  if (rule == nullptr) return std::nullopt;
  std::optional<OpIndexing> ix = rule->describe(graph, node);
  if (!ix || !Fits(*ix, graph, node)) return std::nullopt;
  return ix;
}

}  // namespace kiwi::solve::sharding::internal
