#pragma once
// What every reader harness checks of a result (issue 18): an input is accepted, or refused with one
// line of kBadInput naming the file at fault. Anything else, like a crash, is a finding: the harness
// prints the input's verdict and aborts so libFuzzer saves the input.
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <string_view>

#include "kiwi/util/result.h"

namespace kiwi::fuzz {

inline std::string_view Text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

template <typename T>
void CheckAcceptedOrOneLineError(const Result<T>& r, std::initializer_list<std::string_view> sources) {
  if (r.ok()) return;
  const std::string& m = r.error().message;
  const char* defect = nullptr;
  if (r.error().code != ErrorCode::kBadInput) defect = "not kBadInput";
  else if (m.find('\n') != std::string::npos) defect = "more than one line";
  else {
    defect = "does not start with the file's name";
    for (std::string_view s : sources)
      if (m.size() > s.size() + 1 && m.compare(0, s.size(), s) == 0 && m.compare(s.size(), 2, ": ") == 0) defect = nullptr;
  }
  if (defect == nullptr) return;
  std::fprintf(stderr, "kiwi fuzz: error %s: %s\n", defect, m.c_str());
  std::abort();
}

// The harness of a one-file reader `parse(text, source)`.
template <typename Parse>
int FuzzOneFile(const uint8_t* data, size_t size, Parse parse) {
  CheckAcceptedOrOneLineError(parse(Text(data, size), "f.json"), {"f.json"});
  return 0;
}

// Several files in one input (a reader of several files): split at the first N - 1 NUL bytes (the
// seeds are written so); parts past the last NUL are empty.
template <size_t N>
std::array<std::string_view, N> SplitAtNul(std::string_view text) {
  std::array<std::string_view, N> parts;
  size_t i = 0;
  for (; i + 1 < N; ++i) {
    const size_t at = text.find('\0');
    if (at == std::string_view::npos) break;
    parts[i] = text.substr(0, at);
    text.remove_prefix(at + 1);
  }
  parts[i] = text;
  return parts;
}

}  // namespace kiwi::fuzz
