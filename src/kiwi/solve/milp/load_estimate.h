#pragma once
// What loading a model into CBC/CLP costs before either checks its time limit: kiwi's model, the
// column-major copy, CLP's row and column copies and its scaled start-up all run unchecked. On a
// 42M-nonzero Checkmate model (`kiwi remat --model gpt --layers 24 --budget-fraction 0.5`) that took
// 9 GB and 22 s, most of it page faults, against a 5 s limit; with too little time or memory left
// the solve is skipped instead, and the caller keeps what it had (issue 18, item 3).
#include <cstdint>
#include <optional>
#include <string>

namespace kiwi::milp {

struct LoadEstimate {
  int64_t bytes = 0;     // peak memory of the loaded model
  double seconds = 0.0;  // before the backend's first time check
};

LoadEstimate EstimateLoad(int64_t nonzeros);

// Why a model of `nonzeros` should not be loaded with `seconds_left` and `available_bytes` (nullopt:
// not known) left, as "would need ..." / "would take ..."; nullopt when it fits or loads in under
// 0.1 s.
std::optional<std::string> WhyNotLoad(int64_t nonzeros, double seconds_left, std::optional<int64_t> available_bytes);

}  // namespace kiwi::milp
