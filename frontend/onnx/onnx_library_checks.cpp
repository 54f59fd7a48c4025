// libonnx's checker, version converter and shape inference, in a child process: a model crashing libonnx is an error.
#include "frontend/onnx/onnx_library_checks.h"

#include <onnx/checker.h>
#include <onnx/shape_inference/implementation.h>
#include <onnx/version_converter/convert.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <exception>

namespace cleave {
namespace {

// What the child writes to the pipe: one step byte as each step starts, then kResultModel and the
// serialized model, or kResultError and libonnx's message.
constexpr char kStepCheck = 'c';
constexpr char kStepConvert = 'v';
constexpr char kStepInfer = 'i';
constexpr char kResultModel = 'M';
constexpr char kResultError = 'E';

const char* stepName(char step) {
  switch (step) {
    case kStepCheck: return "libonnx's checker";
    case kStepConvert: return "libonnx's version converter";
    case kStepInfer: return "libonnx's shape inference";
    default: return "libonnx";
  }
}

bool writeAll(int fd, const std::string& bytes) {
  for (size_t done = 0; done < bytes.size();) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// The child: runs the steps, reports on `fd`, and leaves without running exit handlers.
[[noreturn]] void runChild(int fd, onnx::ModelProto model, const std::string& path, int64_t opset, int64_t target_opset) {
  // A crash ends the child at once: no crash handler of the parent's (a sanitizer's, say) runs here.
  for (int signal : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(signal, SIG_DFL);
  char step = kStepCheck;
  std::string result;
  try {
    writeAll(fd, std::string(1, step));
    onnx::checker::check_model(path);
    if (opset < target_opset) {
      writeAll(fd, std::string(1, step = kStepConvert));
      model = onnx::version_conversion::ConvertVersion(model, static_cast<int>(target_opset));
    }
    writeAll(fd, std::string(1, step = kStepInfer));
    onnx::shape_inference::InferShapes(model);
    result = std::string(1, kResultModel) + model.SerializeAsString();
  } catch (const std::exception& e) {
    result = std::string(1, kResultError) + e.what();
  }
  _exit(writeAll(fd, result) ? 0 : 1);
}

}  // namespace

Expected<onnx::ModelProto> checkConvertAndInferShapes(const onnx::ModelProto& model, const std::string& path,
                                                      int64_t opset, int64_t target_opset) {
  // 1. Fork a child that runs libonnx and writes what happened into a pipe.
  int fds[2];
  if (::pipe(fds) != 0) return Status::runtime(path + ": cannot create a pipe to check the model: " + std::strerror(errno));
  pid_t child = ::fork();
  if (child < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return Status::runtime(path + ": cannot fork to check the model: " + std::strerror(errno));
  }
  if (child == 0) {
    ::close(fds[0]);
    runChild(fds[1], model, path, opset, target_opset);
  }
  ::close(fds[1]);

  // 2. Read everything it wrote, then how it ended.
  std::string report;
  char buffer[1 << 16];
  for (;;) {
    ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    report.append(buffer, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int wait_status = 0;
  while (::waitpid(child, &wait_status, 0) < 0 && errno == EINTR) {
  }

  // 3. The steps it started come first; then the model, libonnx's error, or nothing (it crashed).
  size_t steps = 0;
  while (steps < report.size() && (report[steps] == kStepCheck || report[steps] == kStepConvert ||
                                   report[steps] == kStepInfer))
    ++steps;
  const char last_step = steps > 0 ? report[steps - 1] : kStepCheck;
  const std::string result = report.substr(steps);
  const bool exited_ok = WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
  if (exited_ok && !result.empty() && result[0] == kResultModel) {
    onnx::ModelProto checked;
    if (checked.ParseFromString(result.substr(1))) return checked;
    return Status::internal(path + ": the model libonnx checked does not parse back");
  }
  if (exited_ok && !result.empty() && result[0] == kResultError) {
    std::string reason = result.substr(1);
    std::replace(reason.begin(), reason.end(), '\n', ' ');  // diagnostics are one line
    const char* what = last_step == kStepConvert ? "libonnx's version converter cannot upgrade it from its opset"
                                                 : "invalid ONNX model";
    return Status::badInput(path + ": " + what + ": " + reason);
  }
  std::string how = WIFSIGNALED(wait_status) ? "signal " + std::to_string(WTERMSIG(wait_status)) + ", " +
                                                   strsignal(WTERMSIG(wait_status))
                                             : "exit status " + std::to_string(WEXITSTATUS(wait_status));
  return Status::badInput(path + ": invalid ONNX model: " + stepName(last_step) + " crashed on it (" + how + ")");
}

}  // namespace cleave
