// ReadFileText (plain and gzip) and WriteFileAtomically.
#include <gtest/gtest.h>

#include <filesystem>

#include "io_test_util.h"
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
