// Reading input files (bounded, with transparent gunzip) and writing output files atomically.
#pragma once

#include <string>
#include <string_view>

#include "kiwi/util/result.h"

namespace kiwi::io {

// Reads a whole file, transparently gunzipping *.gz; errors name the file.
Result<std::string> ReadFileText(const std::string& path);

// Writes atomically (temp file + rename) so a failure never leaves a partial file. `path` must be new,
// a regular file the user may write, or a symbolic link to one (the link's target is replaced).
Status WriteFileAtomically(const std::string& path, std::string_view contents);

// WriteFileAtomically's checks of `path`, before any work is done for it (the CLI's --out flags): the
// target's kind, and that a file can be created in its directory (which must exist).
Status CheckWritableOutput(const std::string& path);

namespace detail {
// WriteFileAtomically where the file system has no O_TMPFILE: a named temporary beside the target,
// with SIGINT, SIGTERM, SIGHUP and SIGQUIT held until it is renamed or removed. Exposed for its tests.
Status WriteThroughNamedTemporary(const std::string& path, std::string_view contents);
}  // namespace detail

}  // namespace kiwi::io
