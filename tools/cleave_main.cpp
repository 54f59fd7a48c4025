// The cleave command-line tool: parses flags, calls the libraries, prints; exit codes per DESIGN.md.
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <new>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "frontend/model_generators.h"
#include "frontend/onnx/onnx_importer.h"
#include "ir/graph_summary.h"
#include "ir/op_table.h"
#include "ir/status.h"
#include "ir/text_format.h"
#include "tools/allocator_tuning.h"
#include "tools/cli_common.h"
#include "tools/cost_commands.h"
#include "tools/plan_commands.h"

namespace cleave {
namespace {

using cli::CalibrateFlags;
using cli::CompileFlags;
using cli::RunFlags;
using cli::SimulateFlags;
using cli::endsWith;
using cli::reportError;
using cli::writeOutput;

constexpr const char* kVersion = "0.1.0";
constexpr int kExitOk = 0;
constexpr int kExitUsage = static_cast<int>(ErrorKind::kUsage);
constexpr int kExitInternal = static_cast<int>(ErrorKind::kInternal);

// ---- number checks ----

// A CLI11 check that the value is a number (`whole`: a whole number) above 0 (`positive`) or at
// least 0, in one short message ("--dp: must be a whole number of at least 1, not -2") rather than
// CLI11's range text.
CLI::Validator numberCheck(bool whole, bool positive) {
  const std::string wanted = std::string(whole ? "a whole number of at least " : "a number ") +
                             (positive ? (whole ? "1" : "above 0") : (whole ? "0" : "of at least 0"));
  return CLI::Validator(
      [whole, positive, wanted](std::string& value) -> std::string {
        const char* text = value.c_str();
        char* end = nullptr;
        errno = 0;
        double number = whole ? static_cast<double>(std::strtoll(text, &end, 10)) : std::strtod(text, &end);
        if (end == text || *end != '\0' || errno == ERANGE || !std::isfinite(number))
          return "expected " + wanted + ", not '" + value + "'";
        return (positive ? number > 0 : number >= 0) ? "" : "must be " + wanted + ", not " + value;
      },
      std::string(whole ? "INT" : "NUMBER") + (positive ? ">0" : ">=0"));
}
CLI::Validator positive(bool whole) { return numberCheck(whole, true); }
CLI::Validator nonNegativeWhole() { return numberCheck(true, false); }
CLI::Validator nonNegativeNumber() { return numberCheck(false, false); }

// ---- gen ----

struct GenFlags {
  std::string output;
  GptSpec gpt;
  MlpSpec mlp;
  CnnSpec cnn;
};

// Prints `graph` as text IR to `output` (standard output when empty), or reports why there is none.
int writeModel(const Expected<Graph>& graph, const std::string& output) {
  if (!graph) return reportError(graph.status());
  Status written = writeOutput(output, printGraph(*graph));
  return written.isOk() ? kExitOk : reportError(written);
}

void addGenCommands(CLI::App& app, GenFlags& flags) {
  CLI::App* gen = app.add_subcommand("gen", "Generate a model (.cir) from a few sizes: gpt, mlp or cnn");

  CLI::App* gpt = gen->add_subcommand("gpt", "A GPT-style decoder: embeddings, pre-norm attention + MLP blocks, vocab head");
  gpt->add_option("--layers", flags.gpt.layers, "Transformer blocks")->required();
  gpt->add_option("--hidden", flags.gpt.hidden, "Hidden size H")->required();
  gpt->add_option("--heads", flags.gpt.heads, "Attention heads (must divide H)")->required();
  gpt->add_option("--seq", flags.gpt.seq, "Sequence length S")->required();
  gpt->add_option("--vocab", flags.gpt.vocab, "Vocabulary size V")->required();
  gpt->add_option("--batch", flags.gpt.batch, "Batch size B")->required();
  gpt->add_option("--ffn", flags.gpt.ffn, "MLP width (0: 4*H)")->capture_default_str();
  gpt->add_option("--seed", flags.gpt.seed, "Base seed of the parameter initializers")->capture_default_str();
  gpt->add_flag("--rms-norm", flags.gpt.rms_norm,
                "Llama's RMSNorm instead of layer norm, decomposed as PyTorch exports it (pow, reduce_mean, ...)");
  gpt->add_flag("--exported-gelu", flags.gpt.exported_gelu,
                "GELU decomposed as PyTorch exports it below opset 20 (div by sqrt 2, erf, add, mul, mul)");
  gpt->add_option("-o,--output", flags.output, "Output .cir file (default: standard output)");

  CLI::App* mlp = gen->add_subcommand("mlp", "A multilayer perceptron with relu between layers");
  mlp->add_option("--input", flags.mlp.input, "Input features")->capture_default_str();
  mlp->add_option("--hidden", flags.mlp.hidden, "Hidden widths, comma separated")->delimiter(',')->capture_default_str();
  mlp->add_option("--classes", flags.mlp.classes, "Output classes")->capture_default_str();
  mlp->add_option("--batch", flags.mlp.batch, "Batch size")->capture_default_str();
  mlp->add_option("--seed", flags.mlp.seed, "Base seed of the parameter initializers")->capture_default_str();
  mlp->add_option("-o,--output", flags.output, "Output .cir file (default: standard output)");

  CLI::App* cnn = gen->add_subcommand("cnn", "The Fashion-MNIST convnet: 2x (conv 5x5, relu, max pool 2), dense 1024, dense");
  cnn->add_option("--batch", flags.cnn.batch, "Batch size")->capture_default_str();
  cnn->add_option("--classes", flags.cnn.classes, "Output classes")->capture_default_str();
  cnn->add_option("--seed", flags.cnn.seed, "Base seed of the parameter initializers")->capture_default_str();
  cnn->add_option("-o,--output", flags.output, "Output .cir file (default: standard output)");
}

// ---- inspect ----

struct InspectFlags {
  std::string path;
  bool json = false;
  int rank = -1;
  std::string dot;
  std::string dot_detail = "summary";
  std::string timeline;
  std::string cluster;
  bool weights = false;
};

nlohmann::ordered_json namedTypesJson(const std::vector<NamedType>& values) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& v : values) list.push_back({{"name", v.name}, {"type", v.type.str()}});
  return list;
}

nlohmann::ordered_json summaryJson(const GraphSummary& s, const std::string& path) {
  nlohmann::ordered_json ops = nlohmann::ordered_json::array();
  for (const auto& [name, count] : s.op_counts) ops.push_back({{"op", name}, {"count", count}});
  return {
      {"file", path},
      {"graph", s.graph_name},
      {"nodes", s.node_count},
      {"ops", ops},
      {"parameters", {{"tensors", s.parameter_tensors}, {"count", s.parameter_count}, {"bytes", s.parameter_bytes},
                      {"frozen_tensors", s.frozen_tensors}, {"frozen_count", s.frozen_count}}},
      {"inputs", namedTypesJson(s.inputs)},
      {"outputs", namedTypesJson(s.outputs)},
      {"forward", {{"flops", s.forward_flops}, {"bytes", s.forward_bytes}}},
      {"training_step",
       {{"flops", s.training_step_flops}, {"estimate", "forward FLOPs x " + std::to_string(static_cast<int>(kTrainingStepFlopsPerForward))}}},
  };
}

int runInspect(const InspectFlags& flags) {
  if (endsWith(flags.path, ".cplan"))
    return cli::runInspectPlan({flags.path, flags.json, flags.rank, flags.dot, flags.timeline,
                                flags.cluster.empty() ? "cpu-local" : flags.cluster, flags.weights,
                                flags.dot_detail == "full"});
  bool onnx = endsWith(flags.path, ".onnx");
  if (!endsWith(flags.path, ".cir") && !onnx)
    return reportError(
        Status::badInput("cannot inspect '" + flags.path + "': expected a plan (.cplan) or a model (.cir or .onnx)"));
  if (flags.rank >= 0 || !flags.dot.empty() || !flags.timeline.empty() || !flags.cluster.empty() || flags.weights)
    return reportError(Status::badInput("--rank, --dot, --timeline, --cluster and --weights apply to plans (.cplan); '" +
                                        flags.path + "' is a model"));
  auto graph = onnx ? importOnnxModel(flags.path, {}) : loadGraphFile(flags.path);
  if (!graph) return reportError(graph.status());
  GraphSummary summary = summarizeGraph(*graph);
  std::string text = flags.json ? summaryJson(summary, flags.path).dump(2) + "\n"
                                : flags.path + "\n" + summaryText(summary);
  Status written = writeOutput("", text);
  return written.isOk() ? kExitOk : reportError(written);
}

void addInspectCommand(CLI::App& app, InspectFlags& flags) {
  CLI::App* inspect = app.add_subcommand("inspect", "Summarize a plan (.cplan) or a model (.cir or .onnx)");
  inspect->add_option("PLAN", flags.path, "A plan (.cplan) or a model (.cir or .onnx)")->required();
  inspect->add_flag("--json", flags.json, "Print JSON instead of text");
  inspect->add_option("--rank", flags.rank, "Show one rank's program (plans only)")->check(nonNegativeWhole());
  CLI::Option* dot = inspect->add_option(
      "--dot", flags.dot,
      "Write the plan as a Graphviz file (plans only): a summary, one rank per stage and one node per phase");
  inspect->add_option("--dot-detail", flags.dot_detail,
                      "What --dot draws: summary, or full (every instruction of every rank, collapsed past 2000 "
                      "nodes)")
      ->check(CLI::IsMember({"summary", "full"}))
      ->needs(dot)
      ->capture_default_str();
  inspect->add_flag("--weights", flags.weights,
                    "List each rank's weights: the dims split over tp and the block held, or whole (plans only; "
                    "--json always has them)");
  inspect->add_option("--timeline", flags.timeline, "Write the simulated timeline as a Chrome trace (plans only)");
  inspect->add_option("--cluster", flags.cluster,
                      "Cluster spec the predicted times use: NAME or FILE.json (plans only; default cpu-local)");
}

// ---- import ----

struct ImportFlags {
  std::string model;
  std::string output;
  int64_t batch = 0;
  int64_t seq_len = 0;
};

int runImport(const ImportFlags& flags) {
  if (!endsWith(flags.model, ".onnx"))
    return reportError(Status::badInput("cannot import '" + flags.model + "': expected an ONNX model (.onnx)"));
  OnnxImportOptions options;
  options.batch = flags.batch;
  options.seq_len = flags.seq_len;
  return writeModel(importOnnxModel(flags.model, options), flags.output);
}

void addImportCommand(CLI::App& app, ImportFlags& flags) {
  CLI::App* command = app.add_subcommand("import", "Convert an ONNX model to cleave's text IR (.cir)");
  command->add_option("MODEL", flags.model, "The ONNX model (.onnx)")->required();
  command->add_option("-o,--output", flags.output, "Output .cir file")->required();
  command->add_option("--batch", flags.batch, "The batch: dim 0 of every input (default: the export's, or 1 where symbolic)")
      ->check(positive(true));
  command->add_option("--seq-len", flags.seq_len,
                      "The sequence length: dim 1 of token-id inputs and of inputs where it is symbolic")
      ->check(positive(true));
}

// ---- compile, simulate, calibrate, run ----

void addCompileCommand(CLI::App& app, CompileFlags& flags) {
  CLI::App* compile = app.add_subcommand("compile", "Compile a model into a per-device plan (.cplan)");
  compile->add_option("MODEL", flags.model, "The model (.onnx or .cir)")->required();
  compile->add_option("-o,--output", flags.output, "Output plan (.cplan)")->required();
  compile->add_option("--devices", flags.devices, "Device count (default: dp*tp*pp)")->check(positive(true));
  compile->add_option("--dp", flags.dp, "Data-parallel degree")->check(positive(true))->capture_default_str();
  compile->add_option("--tp", flags.tp, "Tensor-parallel degree")->check(positive(true))->capture_default_str();
  compile->add_option("--pp", flags.pp, "Pipeline-parallel degree")->check(positive(true))->capture_default_str();
  compile->add_option("--strategy", flags.strategy, "auto: let the cost model choose dp/tp/pp, microbatches and schedule for --devices")
      ->check(CLI::IsMember({"auto"}));
  compile->add_option("--microbatches", flags.microbatches, "Pipeline microbatches")->check(positive(true));
  compile->add_option("--schedule", flags.schedule, "Pipeline schedule")->check(CLI::IsMember({"gpipe", "1f1b"}))->capture_default_str();
  compile->add_option("--batch", flags.batch, "Global batch size")->check(positive(true));
  compile->add_option("--seq-len", flags.seq_len,
                      "ONNX models: the sequence length (dim 1 of token-id inputs and of inputs where it is symbolic)")
      ->check(positive(true));
  compile->add_flag("--allow-replicated", flags.allow_replicated,
                    "With --tp: accept weights left whole on every tensor-parallel rank (otherwise an error)");
  compile->add_option("--fusion", flags.fusion,
                      "on: chains of elementwise ops become fused nodes, compiled with LLVM when the plan runs")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  compile->add_option("--channels-last", flags.channels_last,
                      "on: an inference plan's convolutions and max pools run on NHWC images, transposed only where "
                      "NCHW values enter or leave them")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  compile->add_option("--winograd", flags.winograd,
                      "on: an inference plan's 3x3 stride-1 convolutions may use a Winograd algorithm where the "
                      "backend finds it faster (fewer multiplications; results differ from direct by ~1e-5 of their scale)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  compile->add_flag("--train", flags.train, "Add a loss, the backward pass and an optimizer");
  compile->add_option("--loss", flags.loss, "Loss head")->check(CLI::IsMember({"softmax_cross_entropy", "mse"}))->capture_default_str();
  compile->add_option("--optimizer", flags.optimizer, "sgd:lr=0.1,momentum=0.9 or adamw:lr=1e-3,wd=0.01")->capture_default_str();
  compile->add_option("--freeze", flags.freeze,
                      "Training: keep the parameters whose names match these globs as loaded (no gradient, no "
                      "optimizer state), e.g. 'embed.*' or 'model.rotary_emb.inv_freq'; repeatable, or comma-separated. "
                      "torch.export's buffers are frozen already; a glob that matches no parameter is an error")
      ->delimiter(',');
  compile->add_option("--padding-idx", flags.padding_idx,
                      "Training: TABLE=ID gives the embedding lookups of the parameters the glob TABLE names "
                      "nn.Embedding's padding_idx ID (its row gets no gradient from them), which ONNX cannot carry: "
                      "e.g. '*word_embeddings.weight=0' for BERT's [PAD]; torch.export's exports carry it already; "
                      "repeatable, or comma-separated")
      ->delimiter(',');
  compile->add_option("--lr-schedule", flags.lr_schedule,
                      "Learning rate per step, as torch.optim.lr_scheduler: constant|linear|cosine|step[:warmup=N,"
                      "warmup_start=F,total=T,final=F,step_size=N,gamma=G] (default constant)");
  compile->add_option("--clip-grad-norm", flags.clip_grad_norm,
                      "Clip the gradients to this global norm (torch.nn.utils.clip_grad_norm_), over every rank's shards");
  compile->add_option("--zero", flags.zero,
                      "Training with --dp, ZeRO's stages: 1 shards the optimizer state over the data-parallel "
                      "replicas; 2 also sums the gradients over microbatches in blocks; 3 also holds the parameters "
                      "in blocks, all-gathered before each forward and backward pass; 0 (default) keeps all whole")
      ->check(CLI::Range(0, 3));
  CLI::Option* sequence_parallel = compile->add_flag(
      "--sequence-parallel", flags.sequence_parallel,
      "With --tp: split the activations between tensor-parallel regions (layer norms, residual adds) "
      "along the sequence over the tp ranks, reduce-scattering and all-gathering them instead of "
      "all-reducing (Megatron's sequence parallelism); with --strategy auto, only strategies with it where tp > 1 "
      "(the search weighs both otherwise)");
  compile
      ->add_flag("--no-sequence-parallel", flags.no_sequence_parallel,
                 "With --strategy auto: only strategies without sequence parallelism (the search weighs both "
                 "otherwise); without it, the default")
      ->excludes(sequence_parallel);
  compile->add_option("--virtual-stages", flags.virtual_stages,
                      "With --pp P: cut the model into P x V stages and give each rank V of them (stage s holds s, "
                      "s + P, ...), run by the interleaved 1F1B schedule (Megatron-LM's): a smaller pipeline bubble "
                      "for more messages; --microbatches must be a multiple of P. 1 (default): one stage per rank")
      ->check(CLI::Range(1, 64));
  compile->add_option("--recompute", flags.recompute,
                      "Training: activations the backward pass computes again instead of keeping (docs/training.md): "
                      "none (default), selective (keeps weight products and layer boundaries) or full (keeps layer "
                      "boundaries only)")
      ->check(CLI::IsMember({"none", "selective", "full"}));
  compile->add_option("--precision", flags.precision,
                      "Training precision: f32, or bf16 (matmul, gemm and conv2d in bf16 with f32 accumulation, f32 "
                      "master weights and loss, as torch.autocast)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  compile->add_option("--grad-accum", flags.grad_accum,
                      "Accumulate the gradients of K microbatches run one after another in each step (the activation "
                      "memory of one); with --pp, the pipeline's microbatches")
      ->check(CLI::Range(1, 1 << 20));
  compile->add_option("--memory-limit", flags.memory_limit,
                      "Device memory per rank: bytes, or with a unit (80GB, 16GiB); a plan whose arena exceeds it "
                      "is rejected")
      ->transform(CLI::AsSizeValue(true))
      ->check(positive(true));
  compile->add_option("--cluster", flags.cluster,
                      "Cluster spec (built-in NAME, NAMExHOSTS or FILE.json): what --strategy auto optimizes for "
                      "(default cpu-local); also prints the plan's predicted step time on it");
}

void addSimulateCommand(CLI::App& app, SimulateFlags& flags) {
  CLI::App* simulate =
      app.add_subcommand("simulate", "Predict a plan's step time, throughput, MFU and memory on a cluster");
  simulate->add_option("PLAN", flags.plan, "The plan (.cplan)")->required();
  simulate->add_option("--cluster", flags.cluster,
                       "Cluster spec: cpu-local, a100x8, h100x8, h200x8, NAMExHOSTS (h100x8x128) or FILE.json")
      ->required();
  simulate->add_flag("--json", flags.json, "Print JSON instead of text");
  simulate->add_option("--timeline", flags.timeline, "Write the predicted timeline as a Chrome trace (FILE.json)");
}

void addCalibrateCommand(CLI::App& app, CalibrateFlags& flags) {
  CLI::App* calibrate = app.add_subcommand(
      "calibrate", "Measure this machine's GEMM, memory and communicator speeds; write a cluster spec (JSON)");
  calibrate->add_option("-o,--output", flags.output, "Output cluster spec, e.g. cpu-local.json")->required();
  calibrate->add_option("--devices", flags.devices, "Devices of the host, one core each (default: all cores)")
      ->check(positive(true));
  calibrate->add_option("--seconds", flags.seconds, "Seconds spent on each measurement")
      ->check(CLI::Range(0.01, 60.0))
      ->capture_default_str();
}

void addRunCommand(CLI::App& app, RunFlags& flags) {
  CLI::App* run = app.add_subcommand("run", "Run a plan: inference or training");
  run->add_option("PLAN", flags.plan, "The plan (.cplan)")->required();
  run->add_option("--device", flags.device, "Device: cpu, cuda (GPU 0; rank r on GPU r) or cuda:N (docs/gpu.md)")
      ->check(CLI::Validator(
          [](std::string& value) -> std::string {
            if (value == "cpu" || value == "cuda") return "";
            bool number = value.size() > 5 && value.compare(0, 5, "cuda:") == 0 &&
                          value.find_first_not_of("0123456789", 5) == std::string::npos;
            return number ? "" : "expected cpu, cuda or cuda:N, not '" + value + "'";
          },
          "cpu|cuda[:N]"))
      ->capture_default_str();
  run->add_option("--backend", flags.backend,
                  "Communicator: local (threads), mpi (one process per rank under mpirun, docs/mpi.md), nccl "
                  "(GPUs: one thread per GPU, or one process per GPU under mpirun, docs/gpu.md)")
      ->check(CLI::IsMember({"local", "mpi", "nccl"}))
      ->capture_default_str();
  CLI::Option* inputs = run->add_option("--inputs", flags.inputs, "Inference: read DIR/<input>.npy");
  CLI::Option* outputs = run->add_option("--outputs", flags.outputs, "Inference: write DIR/<output>.npy");
  CLI::Option* data = run->add_option("--data", flags.data, "Training data: fashion-mnist[:DIR], npy:DIR or synthetic");
  CLI::Option* steps = run->add_option("--steps", flags.steps, "Training steps")->check(positive(true));
  CLI::Option* epochs = run->add_option("--epochs", flags.epochs, "Training epochs")->check(positive(true));
  run->add_option("--eval-data", flags.eval_data, "Evaluation data (as --data); reports accuracy");
  run->add_option("--metrics", flags.metrics, "Write one JSON object per step to FILE.jsonl");
  run->add_option("--checkpoint-dir", flags.checkpoint_dir, "Save checkpoints in DIR");
  run->add_flag("--resume", flags.resume, "Resume from the newest checkpoint in --checkpoint-dir");
  run->add_option("--trace", flags.trace, "Write a Chrome trace (FILE.json) of every rank's instructions in training steps 2-4");
  run->add_option("--seed", flags.seed, "Seed of data order and synthetic data")->capture_default_str();
  run->add_option("--threads", flags.threads, "Threads per kernel (default: all cores)")->check(nonNegativeWhole());
  run->add_option("--timeout", flags.timeout, "Seconds a rank waits for another before the run fails (exit 3)")
      ->check(positive(false))
      ->capture_default_str();
  run->add_option("--heartbeat", flags.heartbeat,
                  "Seconds a rank waits for another before it warns which rank holds it up and what that rank is "
                  "doing (instruction, collective, peer); again after twice as long, and so on (0: never)")
      ->check(nonNegativeNumber())
      ->capture_default_str();
  run->add_option("--checkpoint-every", flags.checkpoint_every, "Steps between checkpoints (default: each epoch and the end)")
      ->check(nonNegativeWhole());
  run->add_option("--progress", flags.progress, "Progress bar on stderr")->check(CLI::IsMember({"auto", "always", "never"}))
      ->capture_default_str();
  inputs->needs(outputs);
  outputs->needs(inputs);
  data->excludes(inputs);
  steps->excludes(epochs);
}

void addExportCommand(CLI::App& app, cli::ExportFlags& flags) {
  CLI::App* command = app.add_subcommand(
      "export", "Write a training run's weights out: FILE.safetensors (the model's own names) or FILE.onnx");
  command->add_option("PLAN", flags.plan, "A plan of the model (.cplan), training or inference")->required();
  command->add_option("--checkpoint-dir", flags.checkpoint_dir, "The run's checkpoints: DIR/latest is exported")
      ->required();
  command->add_option("-o,--output", flags.output, "FILE.safetensors, or FILE.onnx (the ONNX model, trained)")
      ->required();
  command->add_option("--model", flags.model, "The model the plan was compiled from (default: the path in the plan)");
}

// "cleave gen gpt": the deepest subcommand the command line reached, for usage hints.
std::string commandPath(const CLI::App& app) {
  std::string path = app.get_name();
  for (const CLI::App* sub = &app; !sub->get_subcommands().empty();) {
    sub = sub->get_subcommands().front();
    path += " " + sub->get_name();
  }
  return path;
}

// Prints a usage error and where the usage of `command` is explained; exit code 2.
int usageError(const std::string& message, const std::string& command) {
  std::cerr << "cleave: error: " << message << "\n"
            << "Run '" << command << " --help' for usage.\n";
  return kExitUsage;
}

// The usage error for a command line that names no subcommand of `app`.
int missingSubcommand(const CLI::App& app, const std::string& command) {
  std::string names;
  for (const CLI::App* sub : app.get_subcommands({})) names += (names.empty() ? "" : ", ") + sub->get_name();
  return usageError("'" + command + "' needs a subcommand: " + names, command);
}

int runCli(int argc, char** argv) {
  CLI::App app("cleave: compile a neural-network graph for many devices and run it.", "cleave");
  app.set_version_flag("--version", std::string("cleave ") + kVersion);
  app.footer("Exit codes: 0 ok, 1 bad input, 2 usage or not built yet, 3 runtime failure, 4 internal error.\n"
             "Run 'cleave SUBCOMMAND --help' for a subcommand's flags.");

  ImportFlags import_flags;
  CompileFlags compile_flags;
  InspectFlags inspect_flags;
  SimulateFlags simulate_flags;
  CalibrateFlags calibrate_flags;
  RunFlags run_flags;
  cli::ExportFlags export_flags;
  GenFlags gen_flags;
  addImportCommand(app, import_flags);
  addCompileCommand(app, compile_flags);
  addInspectCommand(app, inspect_flags);
  addSimulateCommand(app, simulate_flags);
  addCalibrateCommand(app, calibrate_flags);
  addRunCommand(app, run_flags);
  addExportCommand(app, export_flags);
  addGenCommands(app, gen_flags);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help, --version
    return usageError(e.what(), commandPath(app));
  }

  // CLI11 reports unknown flags only when it is not asked to require a subcommand, so the
  // subcommand checks are made here.
  if (app.get_subcommands().empty()) return missingSubcommand(app, "cleave");
  cli::usageCommand() = commandPath(app);
  if (app.got_subcommand("import")) return runImport(import_flags);
  if (app.got_subcommand("compile")) return cli::runCompile(compile_flags, std::string("cleave ") + kVersion);
  if (app.got_subcommand("simulate")) return cli::runSimulate(simulate_flags);
  if (app.got_subcommand("calibrate")) return cli::runCalibrate(calibrate_flags);
  if (app.got_subcommand("run")) return cli::runRun(run_flags);
  if (app.got_subcommand("export")) return cli::runExport(export_flags);
  if (app.got_subcommand("inspect")) return runInspect(inspect_flags);
  CLI::App* gen = app.get_subcommand("gen");
  if (gen->get_subcommands().empty()) return missingSubcommand(*gen, "cleave gen");
  if (gen->got_subcommand("gpt")) return writeModel(generateGpt(gen_flags.gpt), gen_flags.output);
  if (gen->got_subcommand("mlp")) return writeModel(generateMlp(gen_flags.mlp), gen_flags.output);
  if (gen->got_subcommand("cnn")) return writeModel(generateCnn(gen_flags.cnn), gen_flags.output);
  return reportError(Status::internal("no subcommand ran"));
}

}  // namespace
}  // namespace cleave

int main(int argc, char** argv) {
  cleave::cli::createAllocatorArenas();  // before any thread starts (tools/allocator_tuning.h)
  try {
    // A broken op table is a build bug: say so before any command trusts it.
    if (cleave::Status table = cleave::opTableStatus(); !table.isOk()) {
      std::cerr << "cleave: internal error: " << table.message() << "\n";
      return cleave::kExitInternal;
    }
    return cleave::runCli(argc, argv);
  } catch (const std::bad_alloc&) {
    // Not a bug: what the command builds does not fit this machine's memory (docs/errors.md, exit 3).
    std::cerr << "cleave: error: out of memory: this machine's memory does not hold what the command builds (a "
                 "plan of many ranks keeps every rank's programs: docs/parallelism.md, Limits)" << std::endl;
    // Exit at once: the libraries' exit handlers need memory too (OpenBLAS joins threads that may
    // be stuck allocating), and would hang.
    std::cout.flush();
    std::_Exit(static_cast<int>(cleave::ErrorKind::kRuntime));
  } catch (const std::exception& e) {
    std::cerr << "cleave: internal error: " << e.what() << "\n";
    return cleave::kExitInternal;
  }
}
