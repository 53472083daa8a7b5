#pragma once
// How much memory this process can still take without swapping, as the OS reports it.
#include <cstdint>
#include <optional>

namespace kiwi {

// /proc/meminfo's MemAvailable in bytes (Linux); nullopt where it cannot be read.
std::optional<int64_t> AvailableMemoryBytes();

}  // namespace kiwi
