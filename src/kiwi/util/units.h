#pragma once
// Byte sizes as users write them ("16GiB", "16GB", "512MiB", "123") and as reports print them.
#include <cstdint>
#include <string>
#include <string_view>

#include "kiwi/util/result.h"

namespace kiwi {

// Parses a non-negative size: plain bytes or a number with a unit (B, KB, MB, GB, TB = powers of
// 10; KiB, MiB, GiB, TiB = powers of 2; case-insensitive, optional space, decimals allowed).
// `what` names the flag or field in the error message.
Result<int64_t> ParseBytes(std::string_view text, std::string_view what);

// "15.3 GiB", "512 MiB", "12 B": binary units, three significant digits.
std::string FormatBytes(int64_t bytes);

// "1.23 s", "45.6 ms", "789 us".
std::string FormatSeconds(double seconds);

}  // namespace kiwi
