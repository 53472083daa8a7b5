// torchtitan job configs (TOML; `kiwi plan --compare-to`), as a plan of 8 layers on 16 devices.
#include "kiwi/io/torchtitan_config.h"
#include "reader_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return kiwi::fuzz::FuzzOneFile(data, size, [](std::string_view text, const std::string& source) {
    return kiwi::io::ParseTorchtitanConfig(text, source, 16, 8);
  });
}
