#include "kiwi/util/available_memory.h"

#include <fstream>
#include <string>

namespace kiwi {

std::optional<int64_t> AvailableMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (meminfo >> key >> kib) {
    std::getline(meminfo, unit);
    if (key == "MemAvailable:" && kib > 0) return kib * 1024;
  }
  return std::nullopt;
}

}  // namespace kiwi
