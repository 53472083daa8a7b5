// ASPLOS 2025 IOPDDL sharding instances.
#include "kiwi/io/iopddl_json.h"
#include "reader_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return kiwi::fuzz::FuzzOneFile(data, size, kiwi::io::ParseIopddlJson);
}
