#include "kiwi/ir/dtype.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "kiwi/ir/op_kind.h"

namespace kiwi::ir {
namespace {

TEST(DType, BytesAndNames) {
  EXPECT_EQ(DTypeBytes(DType::kF64), 8);
  EXPECT_EQ(DTypeBytes(DType::kF32), 4);
  EXPECT_EQ(DTypeBytes(DType::kBF16), 2);
  EXPECT_EQ(DTypeBytes(DType::kF16), 2);
  EXPECT_EQ(DTypeBytes(DType::kI64), 8);
  EXPECT_EQ(DTypeBytes(DType::kI32), 4);
  EXPECT_EQ(DTypeBytes(DType::kU8), 1);
  EXPECT_EQ(DTypeName(DType::kBF16), "bf16");
  EXPECT_EQ(DTypeName(DType::kU8), "u8");
}

TEST(DType, ParsesNamesAndAliases) {
  for (DType d : {DType::kF64, DType::kF32, DType::kBF16, DType::kF16, DType::kI64, DType::kI32, DType::kU8})
    EXPECT_EQ(ParseDType(DTypeName(d)), d);
  EXPECT_EQ(ParseDType("fp32"), DType::kF32);
  EXPECT_EQ(ParseDType("float32"), DType::kF32);
  EXPECT_EQ(ParseDType("bfloat16"), DType::kBF16);
  EXPECT_EQ(ParseDType("half"), DType::kF16);
  EXPECT_EQ(ParseDType("fp16"), DType::kF16);
  EXPECT_EQ(ParseDType("int64"), DType::kI64);
  EXPECT_EQ(ParseDType("bool"), DType::kU8);
  EXPECT_FALSE(ParseDType("").has_value());
  EXPECT_FALSE(ParseDType("fp8").has_value());
  EXPECT_FALSE(ParseDType("F32").has_value());
}

TEST(DType, FloatingTypes) {
  EXPECT_TRUE(IsFloating(DType::kF64));
  EXPECT_TRUE(IsFloating(DType::kF32));
  EXPECT_TRUE(IsFloating(DType::kBF16));
  EXPECT_TRUE(IsFloating(DType::kF16));
  EXPECT_FALSE(IsFloating(DType::kI64));
  EXPECT_FALSE(IsFloating(DType::kI32));
  EXPECT_FALSE(IsFloating(DType::kU8));
}

TEST(OpKind, NamesRoundTripAndAreUnique) {
  std::set<std::string> names;
  for (int k = 0; k < kNumOpKinds; ++k) {
    const auto kind = static_cast<OpKind>(k);
    const std::string_view name = OpKindName(kind);
    EXPECT_FALSE(name.empty());
    EXPECT_EQ(ParseOpKind(name), kind) << name;
    names.emplace(name);
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(kNumOpKinds));
  EXPECT_EQ(OpKindName(OpKind::kBatchMatmul), "batch_matmul");
  EXPECT_FALSE(ParseOpKind("convolution").has_value());
}

}  // namespace
}  // namespace kiwi::ir
