// Seeded random corruptions of valid files: every reader either accepts the result or returns a
// one-line kBadInput error naming the source, and never crashes (run under KIWI_SANITIZE to check memory).
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "io_test_util.h"
#include "kiwi/io/cluster_json.h"
#include "kiwi/io/graph_json.h"
#include "kiwi/io/plan_json.h"

namespace kiwi::io {
namespace {

// One random edit: overwrite a byte, delete or duplicate a span, or insert a JSON-significant token.
std::string Mutate(std::string text, std::mt19937& rng) {
  static const char* kTokens[] = {"-", "0", "1e400", "\"", "[", "]", "{", "}", ",", ":", "null", "-1", "1.5",
                                  "9223372036854775808", "\"x\"", "[]", "{}", "true"};
  const auto pick = [&](size_t n) { return static_cast<size_t>(rng() % std::max<size_t>(n, 1)); };
  const size_t at = pick(text.size());
  switch (rng() % 4) {
    case 0: text[at] = static_cast<char>(rng() & 0xff); break;
    case 1: text.erase(at, 1 + pick(16)); break;
    case 2: text.insert(at, text.substr(pick(text.size()), 1 + pick(32))); break;
    default: text.insert(at, kTokens[pick(std::size(kTokens))]); break;
  }
  return text;
}

template <typename T>
void ExpectAcceptedOrOneLineError(const Result<T>& r, const std::string& source, const std::string& text) {
  if (r.ok()) return;
  EXPECT_EQ(r.error().code, ErrorCode::kBadInput) << r.error().message;
  EXPECT_EQ(r.error().message.find('\n'), std::string::npos) << r.error().message;
  EXPECT_EQ(r.error().message.rfind(source + ": ", 0), 0u) << r.error().message << "\n" << text;
}

void Fuzz(const std::string& fixture, const std::function<void(const std::string&)>& parse) {
  const std::string base = testing::ReadAll(testing::FixturePath(fixture));
  ASSERT_FALSE(base.empty()) << fixture;
  std::mt19937 rng(20240601);
  for (int i = 0; i < 400; ++i) {
    std::string text = base;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) text = Mutate(std::move(text), rng);
    parse(text);
  }
}

TEST(Mutations, GraphReaders) {
  for (const char* fixture : {"tiny_graph.json", "checkmate_sparse_ids.json", "random_layered_string_order.json"})
    Fuzz(fixture, [](const std::string& text) { ExpectAcceptedOrOneLineError(ParseGraphJson(text, "m.json"), "m.json", text); });
}

TEST(Mutations, PlanClusterAndProfileReaders) {
  Fuzz("plan_example.json",
       [](const std::string& text) { ExpectAcceptedOrOneLineError(ParsePlanJson(text, "m.json"), "m.json", text); });
  Fuzz("cluster_example.json",
       [](const std::string& text) { ExpectAcceptedOrOneLineError(ParseClusterJson(text, "m.json"), "m.json", text); });
  Fuzz("profile_example.json",
       [](const std::string& text) { ExpectAcceptedOrOneLineError(ParseProfileJson(text, "m.json"), "m.json", text); });
}

}  // namespace
}  // namespace kiwi::io
