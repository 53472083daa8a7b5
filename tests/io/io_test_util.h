#pragma once
// Helpers for the io tests: fixture paths, a scratch directory, gzip, and error-message assertions.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <set>
#include <string>

#include "kiwi/plan/plan.h"
#include "kiwi/util/result.h"

namespace kiwi::io::testing {

inline std::string FixturePath(const std::string& name) { return std::string(KIWI_TEST_DATA_DIR) + "/io/" + name; }
inline std::string BenchmarkPath(const std::string& name) {
  return std::string(KIWI_SHARED_DIR) + "/benchmarks/remat/" + name;
}

// A layer plan read back from a format equals the one written: strategies, stages, batch, schedule.
inline void ExpectSameLayerPlan(const plan::LayerPlan& a, const plan::LayerPlan& b) {
  EXPECT_EQ(a.layers, b.layers);
  EXPECT_EQ(a.pp_degree, b.pp_degree);
  EXPECT_EQ(a.pp_partition, b.pp_partition);
  EXPECT_EQ(a.global_batch, b.global_batch);
  EXPECT_EQ(a.micro_batches, b.micro_batches);
  EXPECT_EQ(a.virtual_stages, b.virtual_stages);
  EXPECT_EQ(a.pipeline, b.pipeline);
}

// A plan written in a framework's format (`write`) reads back (`parse`, of the text) as the same plan.
template <typename Write, typename Parse>
void ExpectRoundTrip(const plan::LayerPlan& p, Write write, Parse parse) {
  Result<std::string> text = write(p);
  ASSERT_TRUE(text.ok()) << text.error().message;
  Result<plan::LayerPlan> back = parse(*text);
  ASSERT_TRUE(back.ok()) << back.error().message << "\n" << *text;
  ExpectSameLayerPlan(*back, p);
}

// The lines of a fixture of documented option names that start with `prefix` ("--", "[").
inline std::set<std::string> DocumentedNames(const std::string& path, const std::string& prefix) {
  std::set<std::string> names;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) names.insert(line);
  return names;
}

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A fresh directory under gtest's temp dir, named after the running test, removed afterwards.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::path(::testing::TempDir()) /
            (std::string("kiwi_io_") + info->test_suite_name() + "_" + info->name());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  std::string File(const std::string& name) const { return (path_ / name).string(); }
  std::string Write(const std::string& name, const std::string& contents) const {
    std::ofstream out(File(name), std::ios::binary);
    out << contents;
    return File(name);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// gzip-compresses `text` (one gzip member).
inline std::string Gzip(const std::string& text) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, Z_BEST_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, static_cast<uLong>(text.size())) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  zs.avail_in = static_cast<uInt>(text.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

template <typename T>
std::string ErrorOf(const T& result) {
  return result.ok() ? std::string("<ok>") : result.error().message;
}

// Asserts a kBadInput error on one line whose message contains every fragment.
template <typename T>
void ExpectBadInput(const T& result, std::initializer_list<std::string> fragments) {
  ASSERT_FALSE(result.ok()) << "expected an error containing '" << *fragments.begin() << "'";
  EXPECT_EQ(result.error().code, ErrorCode::kBadInput);
  const std::string& message = result.error().message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_EQ(message.find('\r'), std::string::npos) << message;
  for (const std::string& f : fragments)
    EXPECT_NE(message.find(f), std::string::npos) << "'" << f << "' not in: " << message;
}

}  // namespace kiwi::io::testing
