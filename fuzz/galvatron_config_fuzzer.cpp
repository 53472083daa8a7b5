// Galvatron strategy configs (`kiwi simulate` of a Galvatron plan), on 8 devices.
#include "kiwi/io/galvatron_config.h"
#include "reader_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return kiwi::fuzz::FuzzOneFile(data, size, [](std::string_view text, const std::string& source) {
    return kiwi::io::ParseGalvatronConfig(text, source, {.num_devices = 8});
  });
}
