// Galvatron's computation and memory profiles, read together (input: computation NUL memory), for a
// model of two layer types.
#include "kiwi/io/galvatron_profiles.h"
#include "reader_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [computation, memory] = kiwi::fuzz::SplitAtNul<2>(kiwi::fuzz::Text(data, size));
  kiwi::io::GalvatronModelOptions options;
  options.layers_per_type = {2, 3};
  options.seq = 512;
  kiwi::fuzz::CheckAcceptedOrOneLineError(
      kiwi::io::ParseGalvatronModel({computation, memory, "c.json", "m.json"}, options), {"c.json", "m.json"});
  return 0;
}
