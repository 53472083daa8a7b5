#pragma once
// Error messages are one line of printable text whatever the input they quote (a file name, a flag's
// value, a field of a hostile file): control characters, newlines included, and bytes that are not
// part of valid UTF-8 become \xNN escapes, so nothing raw (an ESC sequence, a stray \xff) reaches the
// terminal (issue 18). Valid UTF-8 (a file named "modèle.json") is kept as is.
#include <string>
#include <string_view>

namespace kiwi {

std::string OneLine(std::string_view text);

// A message for the terminal: line breaks become spaces (a multi-line message reads as one), then OneLine.
std::string MessageLine(std::string_view text);

}  // namespace kiwi
