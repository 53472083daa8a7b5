#pragma once
// Nesting depth of JSON text, found without parsing: readers refuse documents nested deeper than any
// kiwi format needs before a parser or a recursive walk over them could exhaust the stack.
#include <string_view>

namespace kiwi {

// Deepest file format kiwi reads (a graph's nested order lists, HF configs) stays far below this.
inline constexpr int kMaxJsonDepth = 512;

// Whether `text` opens more than `limit` arrays/objects inside one another (brackets inside strings
// do not count). Linear in the text, no allocation.
bool JsonDeeperThan(std::string_view text, int limit = kMaxJsonDepth);

}  // namespace kiwi
