// Plans (docs/plan-format.md): operator-level and layer-level.
#include "kiwi/io/plan_json.h"
#include "reader_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return kiwi::fuzz::FuzzOneFile(data, size, kiwi::io::ParsePlanJson);
}
