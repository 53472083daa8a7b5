// Device profiles (`kiwi profile`'s output, docs/cluster-format.md).
#include "kiwi/io/cluster_json.h"
#include "reader_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return kiwi::fuzz::FuzzOneFile(data, size, kiwi::io::ParseProfileJson);
}
