// ReadFileText (plain and gzip) and WriteFileAtomically.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "io_test_util.h"
#include "kiwi/io/file_io.h"
#include "kiwi/io/graph_json.h"

namespace kiwi::io {
namespace {

using testing::ExpectBadInput;
using testing::Gzip;
using testing::ReadAll;
using testing::ScratchDir;

TEST(ReadFileText, ReadsPlainFilesByteForByte) {
  ScratchDir dir;
  const std::string text = std::string("{\"a\": 1}\n\0\x01", 11);
  EXPECT_EQ(*ReadFileText(dir.Write("plain.json", text)), text);
  EXPECT_EQ(*ReadFileText(dir.Write("empty.json", "")), "");
}

TEST(ReadFileText, GunzipsTransparently) {
  ScratchDir dir;
  std::string text;
  for (int i = 0; i < 20000; ++i) text += std::to_string(i * 7919 % 10007) + ",";  // > one 64 KiB chunk
  EXPECT_EQ(*ReadFileText(dir.Write("g.json.gz", Gzip(text))), text);
  // Detection is by the gzip magic bytes, not by the name.
  EXPECT_EQ(*ReadFileText(dir.Write("g.json", Gzip("{}"))), "{}");
}

TEST(ReadFileText, ConcatenatedGzipMembers) {
  ScratchDir dir;
  EXPECT_EQ(*ReadFileText(dir.Write("two.gz", Gzip("hello ") + Gzip("world"))), "hello world");
}

TEST(ReadFileText, TruncatedGzipIsAnError) {
  ScratchDir dir;
  std::string text;
  for (int i = 0; i < 5000; ++i) text += std::to_string(i) + " ";
  const std::string gz = Gzip(text);
  for (size_t keep : {size_t{2}, size_t{10}, gz.size() / 2, gz.size() - 4, gz.size() - 1}) {
    const std::string path = dir.Write("t.json.gz", gz.substr(0, keep));
    ExpectBadInput(ReadFileText(path), {path + ": truncated gzip data"});
  }
}

TEST(ReadFileText, CorruptGzipIsAnError) {
  ScratchDir dir;
  std::string gz = Gzip("{\"kiwi_graph_version\": 1, \"nodes\": []}");
  for (size_t i = 12; i < gz.size() - 8; ++i) gz[i] = static_cast<char>(gz[i] ^ 0x5a);
  const std::string path = dir.Write("c.json.gz", gz);
  ExpectBadInput(ReadFileText(path), {path + ": "});
}

TEST(ReadFileText, MissingFileAndDirectory) {
  ScratchDir dir;
  ExpectBadInput(ReadFileText(dir.File("nope.json")), {dir.File("nope.json") + ": no such file"});
  ExpectBadInput(ReadFileText(dir.path().string()), {dir.path().string() + ": is a directory"});
}

TEST(WriteFileAtomically, WritesAndReplacesWithoutLeftovers) {
  ScratchDir dir;
  const std::string path = dir.File("out.json");
  ASSERT_TRUE(WriteFileAtomically(path, "first").ok());
  EXPECT_EQ(ReadAll(path), "first");
  ASSERT_TRUE(WriteFileAtomically(path, "second, longer").ok());
  EXPECT_EQ(ReadAll(path), "second, longer");
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    (void)entry;
    ++files;
  }
  EXPECT_EQ(files, 1);  // no temporary file left behind
  EXPECT_EQ(std::filesystem::status(path).permissions() & std::filesystem::perms::owner_read,
            std::filesystem::perms::owner_read);
}

TEST(WriteFileAtomically, FailureLeavesNoFile) {
  ScratchDir dir;
  const std::string path = dir.File("missing_dir/out.json");
  const Status s = WriteFileAtomically(path, "x");
  ExpectBadInput(s, {path + ": cannot create a file there"});
  EXPECT_FALSE(std::filesystem::exists(path));
}

// Issue 18 item 5: a document over 1 GiB is refused before it is read (a sparse file here; /dev/zero
// and endless pipes stop at the same limit while reading).
TEST(ReadFileText, RefusesDocumentsOverOneGibibyte) {
  ScratchDir dir;
  const std::string path = dir.File("huge.json");
  { std::ofstream(path) << "{"; }
  std::filesystem::resize_file(path, (std::uintmax_t{1} << 30) + 1);
  ExpectBadInput(ReadFileText(path), {path + ": larger than 1.00 GiB"});
}

// Found by ExitProperty.Joint (issue 18): `kiwi joint --out /nonexistent/dir/x.json` searched, then
// failed to write; the check at flag parsing now tries to create a file where the write will.
TEST(CheckWritableOutput, TheDirectoryMustExistAndTakeANewFile) {
  ScratchDir dir;
  ExpectBadInput(CheckWritableOutput(dir.File("missing/x.json")), {dir.File("missing/x.json") + ": cannot create a file there"});
  EXPECT_TRUE(CheckWritableOutput(dir.File("new.json")).ok());
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));  // the probe leaves nothing behind
}

// Issue 18 item 11: a rename silently replaced a FIFO, a device or a symbolic link with a regular
// file, and a read-only file; the temporary name's suffix broke legal 255-byte names.
TEST(WriteFileAtomically, OnlyOntoNewNamesRegularFilesAndLinksToThem) {
  ScratchDir dir;
  const std::string fifo = dir.File("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  ExpectBadInput(WriteFileAtomically(fifo, "x"), {fifo + ": not a regular file"});
  EXPECT_EQ(std::filesystem::status(fifo).type(), std::filesystem::file_type::fifo);
  ExpectBadInput(CheckWritableOutput(dir.path().string()), {": is a directory"});
  ExpectBadInput(WriteFileAtomically("/dev/null", "x"), {"/dev/null: not a regular file"});

  const std::string target = dir.Write("target.json", "old");
  const std::string link = dir.File("link.json");
  std::filesystem::create_symlink("target.json", link);
  ASSERT_TRUE(WriteFileAtomically(link, "new").ok());
  EXPECT_TRUE(std::filesystem::is_symlink(link));  // the link stays, its file is replaced
  EXPECT_EQ(ReadAll(target), "new");

  const std::string longest = dir.File(std::string(250, 'a') + ".json");  // 255 bytes, the usual limit
  ASSERT_TRUE(WriteFileAtomically(longest, "x").ok());
  EXPECT_EQ(ReadAll(longest), "x");
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) files += entry.path().filename().string().rfind(".kiwi-out", 0) == 0;
  EXPECT_EQ(files, 0);  // no temporary left

  if (::geteuid() != 0) {  // root may write anything
    const std::string read_only = dir.Write("ro.json", "keep");
    ASSERT_EQ(::chmod(read_only.c_str(), 0444), 0);
    ExpectBadInput(WriteFileAtomically(read_only, "x"), {read_only + ": cannot replace the file"});
    EXPECT_EQ(ReadAll(read_only), "keep");
  }
}

using Writer = std::function<Status(const std::string&, std::string_view)>;

// Kills a process `after` the start of its write of 128 MiB to `path` with `signal`; what is left in
// the directory must be no file or the whole file, and never a temporary. Returns how it ended.
int KillWhileWriting(const Writer& write, const std::string& path, int signal, std::chrono::milliseconds after) {
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  const pid_t child = ::fork();
  if (child == 0) {
    const std::string contents(size_t{128} << 20, 'k');
    const char go = 1;
    if (::write(ready[1], &go, 1) != 1) ::_exit(3);
    ::_exit(write(path, contents).ok() ? 0 : 2);
  }
  char go = 0;
  EXPECT_EQ(::read(ready[0], &go, 1), 1);
  std::this_thread::sleep_for(after);
  ::kill(child, signal);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(ready[0]);
  ::close(ready[1]);
  return status;
}

void ExpectWholeFileOrNothing(const std::filesystem::path& dir, const std::string& path) {
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    EXPECT_EQ(entry.path().string(), path) << "left behind: " << entry.path();
    if (entry.path().string() == path) {
      EXPECT_EQ(std::filesystem::file_size(path), std::uintmax_t{128} << 20);
    }
  }
}

// Issue 18 item 11: a write killed while it was writing left its temporary (".kiwi-out.XXXXXX").
// Now the contents go to an unnamed file until they are on disk, so even SIGKILL leaves nothing; the
// named fallback holds Ctrl-C and SIGTERM until its temporary is renamed, then dies of them.
TEST(WriteFileAtomically, AKilledWriteLeavesNoTemporary) {
  for (int signal : {SIGKILL, SIGTERM, SIGINT}) {
    for (int ms : {0, 20, 100}) {
      ScratchDir dir;
      const std::string path = dir.File("out.json");
      const int status = KillWhileWriting(WriteFileAtomically, path, signal, std::chrono::milliseconds(ms));
      SCOPED_TRACE(::testing::Message() << "signal " << signal << " after " << ms << " ms");
      EXPECT_TRUE(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 0)) << status;
      ExpectWholeFileOrNothing(dir.path(), path);
    }
  }
  for (int signal : {SIGTERM, SIGINT}) {
    ScratchDir dir;
    const std::string path = dir.File("out.json");
    const int status = KillWhileWriting(detail::WriteThroughNamedTemporary, path, signal, std::chrono::milliseconds(20));
    SCOPED_TRACE(::testing::Message() << "fallback, signal " << signal);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == signal) << status;  // held, then delivered
    ExpectWholeFileOrNothing(dir.path(), path);
  }
}

TEST(ReadGraphFile, ReadsAGzippedGraph) {
  ScratchDir dir;
  const std::string path = dir.Write("tiny.json.gz", Gzip(ReadAll(testing::FixturePath("tiny_graph.json"))));
  Result<ir::Graph> g = ReadGraphFile(path);
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g->size(), 6);
  EXPECT_EQ(g->name(), "tiny-mlp");
}

}  // namespace
}  // namespace kiwi::io
