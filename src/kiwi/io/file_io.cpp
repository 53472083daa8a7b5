// ReadFileText from io/file_io.h: bounded reads with transparent gunzip.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <system_error>

#include <fmt/format.h>

#include "kiwi/io/file_io.h"
#include "kiwi/io/json_fields.h"
#include "kiwi/util/units.h"

namespace kiwi::io {
namespace {

// A document (a file, or what a .gz decompresses to) larger than this is refused: /dev/zero, a FIFO
// that never ends or a gzip bomb must not exhaust memory. The largest real input, the IOPDDL contest's
// instance S, is 59 MB of JSON; parsing takes about 20x a document's size in memory.
constexpr size_t kMaxDocumentBytes = size_t{1} << 30;
constexpr size_t kChunk = size_t{1} << 16;

std::string ErrnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

bool IsGzip(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b;
}

// Owns a zlib inflate stream.
class Inflater {
 public:
  Inflater() { ok_ = inflateInit2(&zs_, 15 + 16) == Z_OK; }  // 15 + 16: gzip wrapper, 32 KiB window
  ~Inflater() {
    if (ok_) inflateEnd(&zs_);
  }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;
  bool ok() const { return ok_; }
  z_stream& stream() { return zs_; }

 private:
  z_stream zs_{};
  bool ok_ = false;
};

// Decompresses every gzip member of `data` (gzip files may concatenate members).
Result<std::string> Gunzip(std::string_view data, const std::string& path) {
  Inflater inflater;
  if (!inflater.ok()) return Internal(path + ": cannot initialise zlib");
  z_stream& zs = inflater.stream();
  std::string out;
  std::string buf(kChunk, '\0');
  size_t fed = 0;
  for (;;) {
    if (zs.avail_in == 0 && fed < data.size()) {
      const size_t n = std::min(data.size() - fed, size_t{1} << 30);
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data() + fed));
      zs.avail_in = static_cast<uInt>(n);
      fed += n;
    }
    zs.next_out = reinterpret_cast<Bytef*>(buf.data());
    zs.avail_out = static_cast<uInt>(buf.size());
    const int ret = inflate(&zs, Z_NO_FLUSH);
    out.append(buf.data(), buf.size() - zs.avail_out);
    if (out.size() > kMaxDocumentBytes)
      return BadInput(OneLine(fmt::format("{}: decompresses to more than {} (the largest input kiwi reads)", path,
                                          FormatBytes(kMaxDocumentBytes))));
    const bool input_done = zs.avail_in == 0 && fed == data.size();
    if (ret == Z_STREAM_END) {
      if (input_done || !IsGzip(data.substr(fed - zs.avail_in))) break;  // trailing padding is ignored, as gzip does
      if (inflateReset(&zs) != Z_OK) return Internal(path + ": cannot reset zlib");
      continue;
    }
    if (ret == Z_OK && !(input_done && zs.avail_out != 0)) continue;
    if (ret == Z_OK || ret == Z_BUF_ERROR)
      return BadInput(fmt::format("{}: truncated gzip data (the stream ends after {} compressed bytes)", path,
                                  data.size()));
    return BadInput(OneLine(fmt::format("{}: corrupt gzip data: {}", path, zs.msg ? zs.msg : "inflate failed")));
  }
  return out;
}

}  // namespace

Result<std::string> ReadFileText(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) return BadInput(OneLine(path + ": no such file"));
  if (std::filesystem::is_directory(status)) return BadInput(OneLine(path + ": is a directory, not a file"));
  std::ifstream in(path, std::ios::binary);
  if (!in) return BadInput(OneLine(path + ": cannot open for reading: " + ErrnoText(errno)));
  const auto too_large = [&] {
    return BadInput(OneLine(fmt::format("{}: larger than {} (the largest input kiwi reads)", path,
                                        FormatBytes(kMaxDocumentBytes))));
  };
  if (std::filesystem::is_regular_file(status) && std::filesystem::file_size(path, ec) > kMaxDocumentBytes && !ec)
    return too_large();
  std::string bytes;
  std::string buf(kChunk, '\0');
  while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0) {
    bytes.append(buf.data(), static_cast<size_t>(in.gcount()));
    if (bytes.size() > kMaxDocumentBytes) return too_large();  // a device or a pipe that does not end
  }
  if (in.bad()) return BadInput(OneLine(path + ": read error"));
  if (IsGzip(bytes)) return Gunzip(bytes, path);
  return bytes;
}

}  // namespace kiwi::io
