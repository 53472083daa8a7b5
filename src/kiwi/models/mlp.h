#pragma once
// A multi-layer perceptron: input [batch, widths[0]] -> matmul+bias -> activation -> ... -> loss.
// Each linear + activation is one layer of the layer view (the KIWI paper's Table 1 MLP).
#include <cstdint>
#include <vector>

#include "kiwi/ir/graph.h"
#include "kiwi/util/result.h"

namespace kiwi::models {

struct MlpConfig {
  std::vector<int64_t> widths = {1024, 4096, 4096, 4096, 1024};  // layer i maps widths[i] -> widths[i+1]
  int64_t batch = 64;
  ir::DType dtype = ir::DType::kF32;
  bool bias = true;
  std::string activation = "relu";  // "relu" or "gelu"
};

Result<ir::Graph> BuildMlpForward(const MlpConfig& config);

}  // namespace kiwi::models
