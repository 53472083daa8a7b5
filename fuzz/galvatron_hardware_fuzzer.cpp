// Galvatron's hardware files, read together (input: all-reduce NUL p2p NUL overlap NUL sp_time) onto a node of 8.
#include "kiwi/io/galvatron_profiles.h"
#include "reader_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [allreduce, p2p, overlap, sp_time] = kiwi::fuzz::SplitAtNul<4>(kiwi::fuzz::Text(data, size));
  kiwi::cost::Cluster base;
  base.name = "base";
  base.num_nodes = 1;
  base.devices_per_node = 8;
  kiwi::fuzz::CheckAcceptedOrOneLineError(
      kiwi::io::ParseGalvatronHardware({allreduce, p2p, overlap, sp_time, "a.json", "p.json", "o.json", "s.json"}, base),
      {"a.json", "p.json", "o.json", "s.json"});
  return 0;
}
