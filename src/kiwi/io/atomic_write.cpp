// WriteFileAtomically and CheckWritableOutput from io/file_io.h. The contents go to an unnamed file in
// the target's directory (O_TMPFILE), which gets a name only once it is complete and on disk, and that
// name is renamed over the target at once: a kill at any point (SIGKILL included) leaves either the old
// file or the new one, and no temporary (issue 18, item 11). Where the file system has no O_TMPFILE,
// a named temporary is used, with the terminating signals held until it is renamed or removed.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <system_error>

#include <fmt/format.h>

#include "kiwi/io/file_io.h"
#include "kiwi/util/one_line.h"

namespace kiwi::io {
namespace {

std::string ErrnoText(int err) { return std::strerror(err); }

Error WriteError(const std::string& path, const std::string& what, int err) {
  return BadInput(OneLine(fmt::format("{}: {}: {}", path, what, ErrnoText(err))));
}

// Holds SIGINT, SIGTERM, SIGHUP and SIGQUIT in this thread while alive; one that arrives meanwhile is
// delivered when it ends, after the temporary is renamed or removed.
class TerminatingSignalsHeld {
 public:
  TerminatingSignalsHeld() {
    sigset_t held;
    sigemptyset(&held);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&held, s);
    active_ = pthread_sigmask(SIG_BLOCK, &held, &before_) == 0;
  }
  ~TerminatingSignalsHeld() {
    if (active_) pthread_sigmask(SIG_SETMASK, &before_, nullptr);
  }
  TerminatingSignalsHeld(const TerminatingSignalsHeld&) = delete;
  TerminatingSignalsHeld& operator=(const TerminatingSignalsHeld&) = delete;

 private:
  sigset_t before_{};
  bool active_ = false;
};

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

std::filesystem::path DirectoryOf(const std::filesystem::path& target) {
  const std::filesystem::path dir = target.parent_path();
  return dir.empty() ? std::filesystem::path(".") : dir;
}

// A short hidden name beside the target for the temporary ("NAME.tmp.XXXXXX" broke names near the
// 255-byte limit); mkstemp's pattern.
std::string TemporaryPattern(const std::filesystem::path& target) {
  return (DirectoryOf(target) / ".kiwi-out.XXXXXX").string();
}

// Creates a named temporary beside the target (for CheckWritableOutput's probe and the fallback write).
Result<int> CreateTemporaryBeside(const std::string& path, const std::filesystem::path& target, std::string& tmp) {
  tmp = TemporaryPattern(target);
  const int fd = mkstemp(tmp.data());
  if (fd < 0) return BadInput(OneLine(fmt::format("{}: cannot create a file there: {}", path, ErrnoText(errno))));
  return fd;
}

// Writes all of `contents`, sets the mode a new file gets and flushes it to disk.
Status WriteAndFlush(int fd, std::string_view contents, const std::string& path) {
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return WriteError(path, "write failed", errno);
    done += static_cast<size_t>(n);
  }
  if (::fchmod(fd, 0644) != 0) return WriteError(path, "cannot set permissions", errno);
  if (::fsync(fd) != 0) return WriteError(path, "cannot flush to disk", errno);
  return Status::Ok();
}

// Renames the complete temporary `tmp` over `target`, removing it if that fails.
Status RenameOver(const std::string& tmp, const std::filesystem::path& target, const std::string& path) {
  if (std::rename(tmp.c_str(), target.c_str()) == 0) return Status::Ok();
  const int err = errno;
  ::unlink(tmp.c_str());
  return WriteError(path, "cannot replace the file", err);
}

// Gives the complete unnamed file `fd` a temporary name beside the target (linkat cannot replace a
// file) and renames it over the target. False when the file system cannot link it; nothing is left.
Result<bool> NameAndRename(int fd, const std::filesystem::path& target, const std::string& path) {
  const std::string proc = fmt::format("/proc/self/fd/{}", fd);
  std::mt19937_64 rng(std::random_device{}());
  TerminatingSignalsHeld held;  // between the link and the rename the temporary has a name
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string tmp = TemporaryPattern(target);
    const std::string suffix = fmt::format("{:06x}", rng() & 0xffffff);
    tmp.replace(tmp.size() - 6, 6, suffix);
    if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, tmp.c_str(), AT_SYMLINK_FOLLOW) == 0) {
      Status renamed = RenameOver(tmp, target, path);
      if (!renamed.ok()) return renamed.error();
      return true;
    }
    if (errno != EEXIST) return false;
  }
  return false;
}

// The fallback: a named temporary, with the terminating signals held until it is renamed or removed.
Status WriteThroughNamedTemporaryTo(const std::filesystem::path& target, std::string_view contents,
                                    const std::string& path) {
  TerminatingSignalsHeld held;
  std::string tmp;
  Result<int> created = CreateTemporaryBeside(path, target, tmp);
  if (!created) return created.error();
  const int fd = *created;
  Status written = WriteAndFlush(fd, contents, path);
  if (::close(fd) != 0 && written.ok()) written = WriteError(path, "close failed", errno);
  if (!written.ok()) {
    ::unlink(tmp.c_str());
    return written;
  }
  return RenameOver(tmp, target, path);
}

}  // namespace

Status CheckWritableOutput(const std::string& path) {
  Result<std::filesystem::path> target = AtomicWriteTarget(path);
  if (!target) return target.error();
  TerminatingSignalsHeld held;
  std::string tmp;
  Result<int> fd = CreateTemporaryBeside(path, *target, tmp);
  if (!fd) return fd.error();
  ::close(*fd);
  ::unlink(tmp.c_str());
  return Status::Ok();
}

Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  Result<std::filesystem::path> target = AtomicWriteTarget(path);
  if (!target) return target.error();
  const int fd = ::open(DirectoryOf(*target).c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) return WriteThroughNamedTemporaryTo(*target, contents, path);  // e.g. no O_TMPFILE on this file system
  Status written = WriteAndFlush(fd, contents, path);
  Result<bool> named = written.ok() ? NameAndRename(fd, *target, path) : Result<bool>(written.error());
  ::close(fd);  // the contents are on disk (fsync) before the file is named
  if (!named) return named.error();
  if (!*named) return WriteThroughNamedTemporaryTo(*target, contents, path);  // no /proc, or linkat refused
  return Status::Ok();
}

Status detail::WriteThroughNamedTemporary(const std::string& path, std::string_view contents) {
  Result<std::filesystem::path> target = AtomicWriteTarget(path);
  if (!target) return target.error();
  return WriteThroughNamedTemporaryTo(*target, contents, path);
}

}  // namespace kiwi::io
