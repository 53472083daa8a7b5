#pragma once
// Element types of tensors. kU8 also stands for opaque byte buffers (graph files that give only a
// tensor's size in bytes are read as a 1-D u8 tensor of that many elements).
#include <cstdint>
#include <optional>
#include <string_view>

namespace kiwi::ir {

enum class DType : uint8_t { kF64, kF32, kBF16, kF16, kI64, kI32, kU8 };

int64_t DTypeBytes(DType dtype);
std::string_view DTypeName(DType dtype);                      // "f32", "bf16", ...
std::optional<DType> ParseDType(std::string_view name);       // accepts "f32"/"fp32"/"float32", ...
bool IsFloating(DType dtype);

}  // namespace kiwi::ir
