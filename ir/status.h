// Status and Expected<T>: how library code reports errors without exceptions.
#pragma once

#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace cleave {

// Whose fault an error is. Status::exitCode() gives the CLI exit code (see docs/errors.md): the
// kind's value, except kRemoteRank, which exits with 3 as kRuntime does.
enum class ErrorKind : int {
  kBadInput = 1,    // a file, model or flag that does not fit
  kUsage = 2,       // the command line itself is wrong, or the feature is not built
  kRuntime = 3,     // system, device or communication failure of this rank (a library error, out of memory)
  kInternal = 4,    // a bug in cleave
  kRemoteRank = 5,  // another rank's failure: a peer died, timed out or aborted, and this rank stopped for it
};

// The result of an operation that returns nothing: ok, or an error kind with a message.
class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(ErrorKind kind, std::string message) { return Status(kind, std::move(message)); }
  static Status badInput(std::string message) { return Status(ErrorKind::kBadInput, std::move(message)); }
  static Status usage(std::string message) { return Status(ErrorKind::kUsage, std::move(message)); }
  static Status runtime(std::string message) { return Status(ErrorKind::kRuntime, std::move(message)); }
  static Status internal(std::string message) { return Status(ErrorKind::kInternal, std::move(message)); }
  static Status remoteRank(std::string message) { return Status(ErrorKind::kRemoteRank, std::move(message)); }

  bool isOk() const { return !failed_; }
  explicit operator bool() const { return !failed_; }
  ErrorKind kind() const { return kind_; }
  const std::string& message() const { return message_; }
  // 0 when ok, else the CLI exit code of the kind (kRemoteRank: 3, a runtime failure).
  int exitCode() const {
    if (!failed_) return 0;
    return static_cast<int>(kind_ == ErrorKind::kRemoteRank ? ErrorKind::kRuntime : kind_);
  }
  // Returns the same error with `prefix` put in front of the message.
  Status withContext(const std::string& prefix) const {
    return failed_ ? Status(kind_, prefix + message_) : *this;
  }

 private:
  Status(ErrorKind kind, std::string message) : failed_(true), kind_(kind), message_(std::move(message)) {}
  bool failed_ = false;
  ErrorKind kind_ = ErrorKind::kInternal;
  std::string message_;
};

// A value of type T, or the Status saying why there is none.
template <class T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : data_(std::move(value)) {}
  Expected(Status status) : data_(std::move(status)) {
    if (std::get<Status>(data_).isOk()) data_ = Status::internal("Expected built from an ok Status");
  }
  bool hasValue() const { return data_.index() == 0; }
  explicit operator bool() const { return hasValue(); }
  T& value() & { return std::get<T>(data_); }
  const T& value() const& { return std::get<T>(data_); }
  T&& value() && { return std::get<T>(std::move(data_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Status& status() const {
    static const Status kOk;
    return hasValue() ? kOk : std::get<Status>(data_);
  }

 private:
  std::variant<T, Status> data_;
};

}  // namespace cleave

#define CLEAVE_CONCAT_INNER(a, b) a##b
#define CLEAVE_CONCAT(a, b) CLEAVE_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` fails.
#define CLEAVE_TRY(expr)                              \
  do {                                                \
    ::cleave::Status cleave_status_ = (expr);         \
    if (!cleave_status_.isOk()) return cleave_status_; \
  } while (0)

// Declares `lhs` from an Expected, returning its Status from the enclosing function on failure.
#define CLEAVE_ASSIGN_OR_RETURN(lhs, expr) \
  CLEAVE_ASSIGN_OR_RETURN_IMPL(CLEAVE_CONCAT(cleave_expected_, __LINE__), lhs, expr)
#define CLEAVE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.hasValue()) return tmp.status();          \
  lhs = std::move(tmp).value()
