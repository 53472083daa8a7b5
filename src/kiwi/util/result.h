#pragma once
// Error returns at I/O and user-input boundaries (DESIGN.md: std::expected style; g++ 12 has no
// <expected> in C++20). Example:
//   Result<Graph> g = ReadGraphFile(path);
//   if (!g) { std::cerr << g.error().message; return ExitCodeFor(g.error().code); }
//   Use(*g);
// Exceptions are reserved for programming errors (violated preconditions inside the library).
#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace kiwi {

enum class ErrorCode {
  kBadInput,    // malformed file, unknown name, out-of-range field: exit code 2
  kInfeasible,  // the request cannot be met (e.g. a budget below any plan): exit code 3
  kTimeLimit,   // time limit reached without any feasible answer: exit code 4
  kInternal,    // a bug or a backend failure: exit code 1
};

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;  // one line, names the file and the field at fault
};

inline Error BadInput(std::string message) { return {ErrorCode::kBadInput, std::move(message)}; }
inline Error Infeasible(std::string message) { return {ErrorCode::kInfeasible, std::move(message)}; }
inline Error Internal(std::string message) { return {ErrorCode::kInternal, std::move(message)}; }

// The process exit code the CLI contract assigns to an error.
int ExitCodeFor(ErrorCode code);

// Holds either a value or an Error.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { assert(ok()); return std::get<0>(v_); }
  const T& value() const& { assert(ok()); return std::get<0>(v_); }
  T&& value() && { assert(ok()); return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const { assert(!ok()); return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

// A Result without a value.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT(google-explicit-constructor)
  static Status Ok() { return {}; }
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { assert(!ok_); return error_; }

 private:
  Error error_;
  bool ok_ = true;
};

// Propagates an error from an expression returning Status or Result<T>.
#define KIWI_RETURN_IF_ERROR(expr)                     \
  do {                                                 \
    auto kiwi_status_ = (expr);                        \
    if (!kiwi_status_) return kiwi_status_.error();    \
  } while (0)

}  // namespace kiwi
