// The ONNX conformance runner: runs onnx 1.12's node test cases through import, compile and run, and
// compares every output with the case's expected tensors.
//
// Usage: onnx_conformance [--data DIR] [--baseline FILE] [--write-baseline FILE] [--filter TEXT] [--verbose]
// DIR holds one folder per case (model.onnx, test_data_set_*/input_*.pb and output_*.pb); by default
// $CLEAVE_ONNX_NODE_TESTS, else ${XDG_CACHE_HOME:-$HOME/.cache}/cleave/onnx-1.12.0-node, where
// tools/setup.sh unpacks it. Prints "passing P / attempted A / total T"; a case is attempted when its
// opset, op types and graph input/output types are ones the importer maps. A case whose model cannot
// compile as it is (cleave compiles static graphs; some cases pass shapes, axes or bounds as graph
// inputs) is tried again with inputs frozen to the data set's values, and counted apart. With --baseline (one passing case name per line)
// it exits 1 when a listed case no longer passes. Exit 77 (ctest's skip) when DIR does not exist.
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "frontend/onnx/onnx_importer.h"
#include "ir/plan.pb.h"
#include "passes/core/compile_pipeline.h"
#include "runtime/device/device.h"
#include "runtime/exec/executor.h"

namespace cleave {
namespace {

namespace fs = std::filesystem;

constexpr int kSkipExitCode = 77;
constexpr unsigned kCaseTimeoutSeconds = 60;
// onnx's backend test compares with numpy.testing.assert_allclose(rtol=1e-3, atol=1e-7).
constexpr double kRelativeTolerance = 1e-3;
constexpr double kAbsoluteTolerance = 1e-7;

// Element `i` of a tensor as a double (every cleave dtype widens to one exactly or nearly).
double elementAsDouble(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kF32: return static_cast<const float*>(data)[i];
    case DType::kF64: return static_cast<const double*>(data)[i];
    case DType::kI64: return static_cast<double>(static_cast<const int64_t*>(data)[i]);
    case DType::kI32: return static_cast<const int32_t*>(data)[i];
    case DType::kI8: return static_cast<const int8_t*>(data)[i];
    case DType::kU8:
    case DType::kBool: return static_cast<const uint8_t*>(data)[i];
    case DType::kF16:
    case DType::kBF16: break;
  }
  return std::nan("");
}

// Empty when `actual` matches `expected` (same type; floats within the suite's tolerance, NaN
// where NaN is expected; other dtypes exactly), else what differs.
std::string compareTensor(const TensorData& expected, const runtime::TensorView& actual) {
  if (actual.type != expected.type)
    return "type " + actual.type.str() + ", expected " + expected.type.str();
  if (expected.type.dtype == DType::kF16 || expected.type.dtype == DType::kBF16) {
    return std::memcmp(actual.data, expected.bytes.data(), expected.bytes.size()) == 0 ? ""
                                                                                        : "16-bit floats differ";
  }
  bool exact = !isFloat(expected.type.dtype);
  int64_t mismatches = 0, first = -1;
  double worst = 0;
  for (int64_t i = 0; i < expected.type.numel(); ++i) {
    double want = elementAsDouble(expected.bytes.data(), expected.type.dtype, i);
    double got = elementAsDouble(actual.data, expected.type.dtype, i);
    bool ok;
    if (exact) ok = want == got;
    else if (std::isnan(want)) ok = std::isnan(got);
    else if (std::isinf(want)) ok = want == got;
    else ok = std::abs(got - want) <= kAbsoluteTolerance + kRelativeTolerance * std::abs(want);
    if (ok) continue;
    ++mismatches;
    if (first < 0) first = i;
    if (!std::isnan(got)) worst = std::max(worst, std::abs(got - want));
  }
  if (mismatches == 0) return "";
  std::ostringstream out;
  out << mismatches << " of " << expected.type.numel() << " elements differ (first at " << first << ": got "
      << elementAsDouble(actual.data, expected.type.dtype, first) << ", expected "
      << elementAsDouble(expected.bytes.data(), expected.type.dtype, first) << "; max abs error " << worst << ")";
  return out.str();
}

// The files <prefix>_0.pb, <prefix>_1.pb, ... in `dir`, in index order.
std::vector<fs::path> numberedFiles(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> files;
  for (int i = 0; fs::exists(dir / (prefix + "_" + std::to_string(i) + ".pb")); ++i)
    files.push_back(dir / (prefix + "_" + std::to_string(i) + ".pb"));
  return files;
}

// A model compiled and ready to run.
struct CompiledCase {
  std::unique_ptr<runtime::Device> device;
  std::unique_ptr<runtime::RankExecutor> executor;
};

// Imports (with `input_values` frozen), compiles for one device and prepares the executor.
Expected<CompiledCase> compileCase(const std::string& model_path, const std::map<std::string, TensorData>& input_values) {
  OnnxImportOptions import_options;
  import_options.input_values = input_values;
  auto graph = importOnnxModel(model_path, import_options);
  if (!graph) return graph.status().withContext("import: ");
  CompileOptions options;
  options.model_file = model_path;
  options.producer = "onnx_conformance";
  auto plan = compileModel(*graph, options);
  if (!plan) return plan.status().withContext("compile: ");
  CompiledCase compiled;
  CLEAVE_ASSIGN_OR_RETURN(compiled.device, runtime::createDevice("cpu"));
  runtime::ExecutorOptions executor_options;
  executor_options.threads = 1;
  CLEAVE_ASSIGN_OR_RETURN(compiled.executor, runtime::createSingleDeviceExecutor(*plan, *compiled.device, executor_options));
  CLEAVE_TRY(compiled.executor->initializeParameters());
  return compiled;
}

// Feeds `inputs` to the infer program in order, runs it and compares its outputs with `expected`.
// Returns "" when they match, else why not.
std::string runDataSet(runtime::RankExecutor& exec, const std::vector<TensorData>& inputs,
                       const std::vector<TensorData>& expected) {
  auto plan_inputs = exec.inputs("infer");
  auto plan_outputs = exec.outputs("infer");
  if (!plan_inputs || !plan_outputs) return "the plan has no infer program";
  if (inputs.size() != plan_inputs->size())
    return "the plan has " + std::to_string(plan_inputs->size()) + " inputs, the case gives " +
           std::to_string(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const runtime::NamedTensor& input = (*plan_inputs)[i];
    if (inputs[i].type != input.view.type)
      return "input " + std::to_string(i) + " ('" + input.name + "') is " + inputs[i].type.str() + ", the plan wants " +
             input.view.type.str();
    if (Status copied = exec.device().copyFromHost(input.view.data, inputs[i].bytes.data(), input.view.type.bytes());
        !copied)
      return copied.message();
  }
  if (Status ran = exec.run("infer"); !ran) return "run: " + ran.message();
  if (expected.size() != plan_outputs->size())
    return "the plan has " + std::to_string(plan_outputs->size()) + " outputs, the case expects " +
           std::to_string(expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const runtime::NamedTensor& output = (*plan_outputs)[i];
    std::string difference = compareTensor(expected[i], output.view);
    if (!difference.empty()) return "output " + std::to_string(i) + " ('" + output.name + "'): " + difference;
  }
  return "";
}

// One test_data_set_*: its input tensors (with their ONNX names) and expected outputs, in order.
struct DataSet {
  std::string name;
  std::vector<std::string> input_names;
  std::vector<TensorData> inputs, outputs;
};

Expected<std::vector<DataSet>> readDataSets(const fs::path& case_dir) {
  std::vector<fs::path> dirs;
  for (const auto& entry : fs::directory_iterator(case_dir))
    if (entry.is_directory() && entry.path().filename().string().starts_with("test_data_set_")) dirs.push_back(entry.path());
  std::sort(dirs.begin(), dirs.end());
  if (dirs.empty()) return Status::badInput("the case has no test_data_set_*");
  std::vector<DataSet> sets;
  for (const fs::path& dir : dirs) {
    DataSet set;
    set.name = dir.filename().string();
    for (const fs::path& file : numberedFiles(dir, "input")) {
      std::string name;
      CLEAVE_ASSIGN_OR_RETURN(TensorData data, readOnnxTensorFile(file.string(), &name));
      set.input_names.push_back(name);
      set.inputs.push_back(std::move(data));
    }
    for (const fs::path& file : numberedFiles(dir, "output")) {
      CLEAVE_ASSIGN_OR_RETURN(TensorData data, readOnnxTensorFile(file.string()));
      set.outputs.push_back(std::move(data));
    }
    sets.push_back(std::move(set));
  }
  return sets;
}

// Runs every data set with its inputs from index `first_frozen` on frozen to the set's values,
// compiling once per set. Returns "" when all match, else why not.
std::string runFrozen(const std::string& model_path, const std::vector<DataSet>& sets, size_t first_frozen) {
  for (const DataSet& set : sets) {
    std::map<std::string, TensorData> frozen;
    for (size_t i = first_frozen; i < set.inputs.size(); ++i) frozen[set.input_names[i]] = set.inputs[i];
    auto compiled = compileCase(model_path, frozen);
    if (!compiled) return compiled.status().message();
    std::vector<TensorData> free_inputs(set.inputs.begin(), set.inputs.begin() + static_cast<long>(first_frozen));
    std::string failure = runDataSet(*compiled->executor, free_inputs, set.outputs);
    if (!failure.empty()) return set.name + ": " + failure;
  }
  return "";
}

// How a case went.
struct CaseResult {
  std::string failure;         // empty when it passed
  bool frozen_inputs = false;  // passed only with some inputs frozen to the data set's values
};

// Runs one case in this process: import, compile (inference, one device), then every data set. When
// the model does not compile as it is, tries again with every input but the first frozen to each data
// set's values, then with every input frozen (cleave compiles static graphs; these cases pass shapes,
// axes or bounds as graph inputs).
CaseResult runCase(const fs::path& case_dir) {
  std::string model_path = (case_dir / "model.onnx").string();
  auto sets = readDataSets(case_dir);
  if (!sets) return {sets.status().message()};
  // 1. As the model is.
  auto compiled = compileCase(model_path, {});
  if (compiled) {
    for (const DataSet& set : *sets) {
      std::string failure = runDataSet(*compiled->executor, set.inputs, set.outputs);
      if (!failure.empty()) return {set.name + ": " + failure};
    }
    return {};
  }
  // 2. With inputs frozen.
  std::string failure = compiled.status().message(), frozen_failure;
  for (size_t first_frozen : {size_t{1}, size_t{0}}) {
    if (sets->front().inputs.size() <= first_frozen) continue;
    frozen_failure = runFrozen(model_path, *sets, first_frozen);
    if (frozen_failure.empty()) return {"", true};
  }
  if (!frozen_failure.empty() && frozen_failure != failure) failure += " | with inputs frozen: " + frozen_failure;
  return {failure};
}

// Runs one case in a child process, so that a crash or hang fails that case only.
CaseResult runCaseIsolated(const fs::path& case_dir) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return {std::string("pipe: ") + std::strerror(errno)};
  std::fflush(nullptr);
  pid_t child = fork();
  if (child < 0) return {std::string("fork: ") + std::strerror(errno)};
  if (child == 0) {
    // The child reports "P" (passed), "F" (passed with frozen inputs) or "X<why it failed>".
    close(pipe_fds[0]);
    alarm(kCaseTimeoutSeconds);
    CaseResult result = runCase(case_dir);
    std::string report = !result.failure.empty() ? "X" + result.failure : result.frozen_inputs ? "F" : "P";
    std::replace(report.begin(), report.end(), '\n', ' ');
    ssize_t written = write(pipe_fds[1], report.data(), report.size());
    _exit(written == static_cast<ssize_t>(report.size()) ? 0 : 1);
  }
  close(pipe_fds[1]);
  std::string report;
  char buffer[4096];
  for (ssize_t n; (n = read(pipe_fds[0], buffer, sizeof buffer)) > 0;) report.append(buffer, static_cast<size_t>(n));
  close(pipe_fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (WIFSIGNALED(status)) {
    int signal = WTERMSIG(status);
    return {signal == SIGALRM ? "timed out after " + std::to_string(kCaseTimeoutSeconds) + " s"
                              : std::string("crashed: ") + strsignal(signal)};
  }
  if (WEXITSTATUS(status) != 0 || report.empty())
    return {"the case's process exited with status " + std::to_string(WEXITSTATUS(status))};
  if (report[0] == 'X') return {report.substr(1)};
  return {"", report[0] == 'F'};
}

// Where tools/setup.sh unpacks the node tests of onnx `version` (CLEAVE_ONNX_NODE_TESTS overrides 1.12.0's).
std::string defaultDataDir(const std::string& version) {
  if (const char* dir = std::getenv("CLEAVE_ONNX_NODE_TESTS"); dir && version == "1.12.0") return dir;
  std::string cache;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) cache = xdg;
  else cache = std::string(std::getenv("HOME") ? std::getenv("HOME") : ".") + "/.cache";
  return cache + "/cleave/onnx-" + version + "-node";
}

// The non-empty lines of `path` that do not start with '#'.
std::vector<std::string> readLines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') lines.push_back(line);
  return lines;
}

int runSuite(int argc, char** argv) {
  CLI::App app("onnx_conformance: runs onnx 1.12's node test cases through cleave", "onnx_conformance");
  std::string data_dir, suite = "1.12.0", baseline, write_baseline, filter;
  bool verbose = false;
  app.add_option("--data", data_dir, "Folder of cases (onnx/backend/test/data/node); default: the suite's cache folder");
  app.add_option("--suite", suite, "The onnx version whose node tests tools/setup.sh unpacked (1.12.0 or 1.23.2)");
  app.add_option("--baseline", baseline, "File of case names that must pass");
  app.add_option("--write-baseline", write_baseline, "Write the names of the passing cases to this file");
  app.add_option("--filter", filter, "Run only cases whose name contains this text");
  app.add_flag("--verbose", verbose, "Print every case's result, and unsupported op types by case count");
  CLI11_PARSE(app, argc, argv);
  if (data_dir.empty()) data_dir = defaultDataDir(suite);

  // 1. The cases.
  if (!fs::is_directory(data_dir)) {
    std::cout << "skipped: no ONNX conformance data in " << data_dir << " (tools/setup.sh unpacks it)\n";
    return kSkipExitCode;
  }
  std::vector<fs::path> cases;
  for (const auto& entry : fs::directory_iterator(data_dir))
    if (entry.is_directory() && fs::exists(entry.path() / "model.onnx") &&
        entry.path().filename().string().find(filter) != std::string::npos)
      cases.push_back(entry.path());
  std::sort(cases.begin(), cases.end());

  // 2. Classify each case, and run the ones the importer can take.
  int attempted = 0, newer_opset = 0, unsupported = 0, unsupported_values = 0, passing_frozen = 0;
  std::set<std::string> passing;
  std::map<std::string, int> cases_by_missing_op;
  for (const fs::path& case_dir : cases) {
    std::string name = case_dir.filename().string();
    auto support = checkOnnxSupport((case_dir / "model.onnx").string());
    if (!support) {
      std::cout << "FAIL " << name << ": " << support.status().message() << "\n";
      ++attempted;
      continue;
    }
    if (!support->unsupported_ops.empty()) {
      ++unsupported;
      for (const auto& op : support->unsupported_ops) ++cases_by_missing_op[op];
      if (verbose) std::cout << "unsupported " << name << ": " << support->unsupported_ops.front() << "\n";
      continue;
    }
    if (!support->unsupported_values.empty()) {
      ++unsupported_values;
      if (verbose) std::cout << "unsupported " << name << ": " << support->unsupported_values.front() << "\n";
      continue;
    }
    if (!support->supported()) {
      ++newer_opset;
      if (verbose) std::cout << "unsupported " << name << ": opset " << support->opset << "\n";
      continue;
    }
    ++attempted;
    CaseResult result = runCaseIsolated(case_dir);
    if (!result.failure.empty()) {
      std::cout << "FAIL " << name << ": " << result.failure << "\n";
      continue;
    }
    passing.insert(name);
    if (result.frozen_inputs) ++passing_frozen;
    if (verbose) std::cout << "pass " << name << (result.frozen_inputs ? " (inputs frozen)" : "") << "\n";
  }

  // 3. The figures.
  std::cout << "onnx conformance (onnx " << suite << " node tests): passing " << passing.size() << " / attempted " << attempted
            << " / total " << cases.size() << "\n";
  std::cout << "of the passing cases, " << passing_frozen
            << " pass with inputs frozen to the data set's values (shapes, axes, bounds)\n";
  std::cout << "not attempted: " << unsupported << " cases use ops cleave lacks, " << unsupported_values
            << " have inputs or outputs of types it lacks (strings, int16, unsigned ints, sequences), " << newer_opset
            << " are at opsets above " << kMaxOnnxOpset << "\n";
  if (verbose) {
    std::vector<std::pair<int, std::string>> missing;
    for (const auto& [op, count] : cases_by_missing_op) missing.push_back({-count, op});
    std::sort(missing.begin(), missing.end());
    std::cout << "missing op types by cases:";
    for (const auto& [count, op] : missing) std::cout << " " << op << " " << -count;
    std::cout << "\n";
  }
  if (!write_baseline.empty()) {
    std::ofstream out(write_baseline);
    out << "# ONNX conformance cases that pass (tests/conformance/onnx_conformance.cpp); one per line.\n";
    for (const auto& name : passing) out << name << "\n";
    if (!out) {
      std::cerr << "error: cannot write " << write_baseline << "\n";
      return 1;
    }
  }

  // 4. Regressions against the baseline.
  if (baseline.empty()) return 0;
  if (!fs::exists(baseline)) {
    std::cerr << "error: cannot read baseline " << baseline << "\n";
    return 1;
  }
  std::vector<std::string> expected = readLines(baseline);
  int regressed = 0, listed = 0;
  for (const auto& name : expected) {
    if (!filter.empty() && name.find(filter) == std::string::npos) continue;
    ++listed;
    if (!passing.count(name)) {
      std::cout << "REGRESSED " << name << " (listed in " << baseline << ")\n";
      ++regressed;
    }
  }
  std::cout << "baseline: " << listed << " cases must pass; " << regressed << " do not; "
            << static_cast<int>(passing.size()) - (listed - regressed) << " pass beyond it\n";
  return regressed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace cleave

int main(int argc, char** argv) { return cleave::runSuite(argc, argv); }
