// kiwi graph JSON, Checkmate node-link and random-layered graphs (io::ParseGraphJson detects which).
#include "kiwi/io/graph_json.h"
#include "kiwi/ir/verify.h"
#include "reader_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiwi::Result<kiwi::ir::Graph> g = kiwi::io::ParseGraphJson(kiwi::fuzz::Text(data, size), "f.json");
  kiwi::fuzz::CheckAcceptedOrOneLineError(g, {"f.json"});
  if (g.ok() && !kiwi::ir::VerifyGraph(*g).ok()) std::abort();  // accepted means valid
  return 0;
}
