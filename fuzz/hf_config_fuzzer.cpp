// HuggingFace config.json files (`--hf-config`).
#include "kiwi/models/hf_config.h"
#include "reader_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return kiwi::fuzz::FuzzOneFile(data, size, [](std::string_view text, const std::string& source) {
    return kiwi::models::ParseHfConfig(text, source);
  });
}
