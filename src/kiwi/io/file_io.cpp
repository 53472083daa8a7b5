// ReadFileText (with transparent gunzip) and WriteFileAtomically from io/graph_json.h.
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

namespace {

// Where an atomic write of `path` lands: `path` itself when it is new or a regular file, the file a
// symbolic link points to (the link stays); anything else (a FIFO, a device, a directory, a socket)
// and a file the user may not write are refused, as a rename would replace them silently.
Result<std::filesystem::path> AtomicWriteTarget(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path target = path;
  if (fs::is_symlink(fs::symlink_status(target, ec))) {
    target = fs::weakly_canonical(target, ec);
    if (ec) return BadInput(OneLine(fmt::format("{}: cannot follow the symbolic link: {}", path, ec.message())));
  }
  const fs::file_status st = fs::status(target, ec);
  if (st.type() == fs::file_type::not_found) return target;
  if (ec) return BadInput(OneLine(fmt::format("{}: {}", path, ec.message())));
  if (st.type() == fs::file_type::directory) return BadInput(OneLine(fmt::format("{}: is a directory", path)));
  if (st.type() != fs::file_type::regular)
    return BadInput(OneLine(fmt::format("{}: not a regular file (a FIFO, device or socket): write to a file", path)));
  if (::access(target.c_str(), W_OK) != 0)
    return BadInput(OneLine(fmt::format("{}: cannot replace the file: {}", path, ErrnoText(errno))));
  return target;
}

// Creates the temporary file an atomic write of `path` (landing on `target`) writes first: a short
// hidden name beside the target ("NAME.tmp.XXXXXX" broke names near the 255-byte limit). Sets `tmp`
// to its name and returns its descriptor.
Result<int> CreateTemporaryBeside(const std::string& path, const std::filesystem::path& target, std::string& tmp) {
  const std::filesystem::path dir = target.parent_path();
  tmp = ((dir.empty() ? std::filesystem::path(".") : dir) / ".kiwi-out.XXXXXX").string();
  const int fd = mkstemp(tmp.data());
  if (fd < 0) return BadInput(OneLine(fmt::format("{}: cannot create a file there: {}", path, ErrnoText(errno))));
  return fd;
}

}  // namespace

Status CheckWritableOutput(const std::string& path) {
  Result<std::filesystem::path> target = AtomicWriteTarget(path);
  if (!target) return target.error();
  std::string tmp;
  Result<int> fd = CreateTemporaryBeside(path, *target, tmp);
  if (!fd) return fd.error();
  ::close(*fd);
  ::unlink(tmp.c_str());
  return Status::Ok();
}

Status WriteFileAtomically(const std::string& requested, std::string_view contents) {
  Result<std::filesystem::path> target = AtomicWriteTarget(requested);
  if (!target) return target.error();
  const std::string& path = requested;
  std::string tmp;
  Result<int> created = CreateTemporaryBeside(path, *target, tmp);
  if (!created) return created.error();
  const int fd = *created;
  const auto fail = [&](const std::string& what, int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return BadInput(OneLine(fmt::format("{}: {}: {}", path, what, ErrnoText(err))));
  };
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail("write failed", errno);
    done += static_cast<size_t>(n);
  }
  if (::fchmod(fd, 0644) != 0) return fail("cannot set permissions", errno);
  if (::fsync(fd) != 0) return fail("cannot flush to disk", errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return BadInput(OneLine(fmt::format("{}: close failed: {}", path, ErrnoText(err))));
  }
  if (std::rename(tmp.c_str(), target->c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return BadInput(OneLine(fmt::format("{}: cannot replace the file: {}", path, ErrnoText(err))));
  }
  return Status::Ok();
}

}  // namespace kiwi::io
