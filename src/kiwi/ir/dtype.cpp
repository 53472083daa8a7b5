#include "kiwi/ir/dtype.h"

#include <array>
#include <utility>

namespace kiwi::ir {
namespace {

struct DTypeInfo {
  DType dtype;
  int64_t bytes;
  std::string_view name;
  std::array<std::string_view, 3> aliases;
};

constexpr std::array<DTypeInfo, 7> kDTypes = {{
    {DType::kF64, 8, "f64", {"fp64", "float64", "double"}},
    {DType::kF32, 4, "f32", {"fp32", "float32", "float"}},
    {DType::kBF16, 2, "bf16", {"bfloat16", "", ""}},
    {DType::kF16, 2, "f16", {"fp16", "float16", "half"}},
    {DType::kI64, 8, "i64", {"int64", "long", ""}},
    {DType::kI32, 4, "i32", {"int32", "int", ""}},
    {DType::kU8, 1, "u8", {"uint8", "bool", "byte"}},
}};

const DTypeInfo& Info(DType dtype) { return kDTypes[static_cast<size_t>(dtype)]; }

}  // namespace

int64_t DTypeBytes(DType dtype) { return Info(dtype).bytes; }
std::string_view DTypeName(DType dtype) { return Info(dtype).name; }

std::optional<DType> ParseDType(std::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (name == info.name) return info.dtype;
    for (std::string_view alias : info.aliases)
      if (!alias.empty() && name == alias) return info.dtype;
  }
  return std::nullopt;
}

bool IsFloating(DType dtype) {
  return dtype == DType::kF64 || dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16;
}

}  // namespace kiwi::ir
