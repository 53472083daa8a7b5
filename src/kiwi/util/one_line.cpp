// One printable line from any bytes (one_line.h).
#include "kiwi/util/one_line.h"

#include <fmt/format.h>

namespace kiwi {
namespace {

// The length of the valid UTF-8 sequence starting at text[i] (2-4 bytes: no overlong forms, no
// surrogates, nothing above U+10FFFF), or 0 when the byte there does not start one.
size_t Utf8SequenceLength(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  size_t n = 0;
  unsigned char low = 0x80, high = 0xbf;  // the range of the second byte
  if (lead >= 0xc2 && lead <= 0xdf) n = 2;
  else if (lead == 0xe0) n = 3, low = 0xa0;
  else if ((lead >= 0xe1 && lead <= 0xec) || lead == 0xee || lead == 0xef) n = 3;
  else if (lead == 0xed) n = 3, high = 0x9f;
  else if (lead == 0xf0) n = 4, low = 0x90;
  else if (lead >= 0xf1 && lead <= 0xf3) n = 4;
  else if (lead == 0xf4) n = 4, high = 0x8f;
  else return 0;
  if (i + n > text.size() || byte(i + 1) < low || byte(i + 1) > high) return 0;
  for (size_t k = 2; k < n; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xbf) return 0;
  return n;
}

}  // namespace

std::string OneLine(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto u = static_cast<unsigned char>(text[i]);
    if (u >= 0x20 && u < 0x7f) {
      out += text[i++];
    } else if (const size_t n = u >= 0x80 ? Utf8SequenceLength(text, i) : 0; n > 0) {
      out.append(text.substr(i, n));
      i += n;
    } else {
      out += fmt::format("\\x{:02x}", u);
      ++i;
    }
  }
  return out;
}

std::string MessageLine(std::string_view text) {
  std::string spaced(text);
  for (char& c : spaced)
    if (c == '\n' || c == '\r') c = ' ';
  return OneLine(spaced);
}

}  // namespace kiwi
