#pragma once
// Helpers for the IR tests: terse node construction (designated initializers that omit Node fields
// trip -Wmissing-field-initializers in g++ 12) and error-message assertions.
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "kiwi/ir/graph.h"
#include "kiwi/util/result.h"

namespace kiwi::ir::testing {

inline NodeId AddOp(Graph& g, const std::string& name, OpKind kind, const std::string& op, Shape shape,
                    std::vector<NodeId> inputs = {}, DType dtype = DType::kF32) {
  Node n;
  n.name = name;
  n.kind = kind;
  n.op = op;
  n.output = {dtype, std::move(shape)};
  n.inputs = std::move(inputs);
  return g.Add(std::move(n));
}
inline NodeId AddInput(Graph& g, const std::string& name, Shape shape, DType dtype = DType::kF32) {
  return AddOp(g, name, OpKind::kInput, "input", std::move(shape), {}, dtype);
}
inline NodeId AddParam(Graph& g, const std::string& name, Shape shape, DType dtype = DType::kF32) {
  return AddOp(g, name, OpKind::kParameter, "parameter", std::move(shape), {}, dtype);
}

// The error message of a failed Status/Result, or a marker when it unexpectedly succeeded.
template <typename T>
std::string ErrorOf(const T& result) {
  return result.ok() ? std::string("<ok>") : result.error().message;
}

// Asserts a kBadInput error on one line whose message contains every fragment.
template <typename T>
void ExpectBadInput(const T& result, std::initializer_list<std::string> fragments) {
  ASSERT_FALSE(result.ok()) << "expected an error, got success";
  EXPECT_EQ(result.error().code, ErrorCode::kBadInput);
  const std::string& message = result.error().message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  for (const std::string& f : fragments)
    EXPECT_NE(message.find(f), std::string::npos) << "'" << f << "' not in: " << message;
}

}  // namespace kiwi::ir::testing
