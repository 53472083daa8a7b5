#include "kiwi/solve/milp/load_estimate.h"

#include <fmt/format.h>

#include <cmath>

#include "kiwi/util/units.h"

namespace kiwi::milp {
namespace {

// Peak resident bytes per nonzero of `kiwi remat`'s Checkmate MILPs on GPT (--budget-fraction 0.5,
// --time-limit 5, the 2-core CI machine): 12 layers 2.56 GB / 10.7M nonzeros, 18 layers 5.09 GB, 24
// layers 8.97 GB / 42.2M: 210-240 bytes.
constexpr double kBytesPerNonzero = 230.0;
// The same runs spent about 1.4 s of system time per GB (7.0 s at 5.1 GB, 17.6 s at 9.0 GB), and
// overran the limit by as much: the rate at which a load's memory is first touched.
constexpr double kLoadBytesPerSecond = 0.7e9;
// A load estimated below this overruns the limit by no more, whatever is left: small models always
// load (the sharding and joint searches solve many near the end of their time).
constexpr double kNegligibleLoadSeconds = 0.1;

}  // namespace

LoadEstimate EstimateLoad(int64_t nonzeros) {
  LoadEstimate e;
  const double bytes = std::fmax(0.0, static_cast<double>(nonzeros)) * kBytesPerNonzero;
  e.bytes = bytes >= 9.2e18 ? INT64_MAX : static_cast<int64_t>(bytes);
  e.seconds = bytes / kLoadBytesPerSecond;
  return e;
}

std::optional<std::string> WhyNotLoad(int64_t nonzeros, double seconds_left, std::optional<int64_t> available_bytes) {
  const LoadEstimate e = EstimateLoad(nonzeros);
  if (available_bytes && e.bytes > *available_bytes)
    return fmt::format("would need about {} of memory, {} is available", FormatBytes(e.bytes),
                       FormatBytes(*available_bytes));
  if (std::isfinite(seconds_left) && e.seconds > std::fmax(seconds_left, kNegligibleLoadSeconds))
    return fmt::format("would take about {:.1f} s to load ({}), {:.1f} s of the time limit is left", e.seconds,
                       FormatBytes(e.bytes), std::fmax(0.0, seconds_left));
  return std::nullopt;
}

}  // namespace kiwi::milp
