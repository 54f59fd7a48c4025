// The subcommands that make and use plans: compile, run, and inspect of a .cplan.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "runtime/train/trainer.h"

namespace cleave::cli {

// Flags of `cleave compile`.
struct CompileFlags {
  std::string model;
  std::string output;
  int devices = 0;
  int dp = 1, tp = 1, pp = 1;
  std::string strategy;
  int microbatches = 1;
  std::string schedule = "1f1b";
  int64_t batch = 0;
  int64_t seq_len = 0;  // an ONNX model's sequence length (--seq-len); 0: the export's
  bool allow_replicated = false;  // --tp may leave weights whole (--allow-replicated)
  std::string fusion = "on";    // --fusion on|off: elementwise chains become fused nodes
  std::string channels_last = "on";  // --channels-last on|off: inference convolutions and max pools NHWC
  std::string winograd = "on";       // --winograd on|off: inference 3x3 convolutions may run as Winograd
  int zero = 0;                 // --zero 1: optimizer state sharded over the dp replicas
  bool sequence_parallel = false;  // --sequence-parallel
  bool no_sequence_parallel = false;  // --no-sequence-parallel
  int virtual_stages = 1;          // --virtual-stages: pipeline stages per rank (interleaved 1F1B)
  bool train = false;
  std::string loss = "softmax_cross_entropy";
  std::string optimizer = "sgd:lr=0.01";
  std::string lr_schedule;     // --lr-schedule; empty: constant
  std::optional<double> clip_grad_norm;  // --clip-grad-norm; none: no clipping
  int grad_accum = 0;          // --grad-accum: microbatches accumulated per step; 0: not given
  std::string precision;       // --precision f32|bf16; empty: f32
  std::string recompute;       // --recompute none|selective|full; empty: none
  std::vector<std::string> freeze;  // --freeze: globs on the names of parameters kept as loaded
  std::vector<std::string> padding_idx;  // --padding-idx: TABLE=ID, nn.Embedding's padding_idx of a lookup
  std::string cluster;
  int64_t memory_limit = 0;  // bytes per device (--memory-limit); 0: no limit
};

// Flags of `cleave run`.
struct RunFlags {
  std::string plan;
  std::string device = "cpu";
  std::string backend = "local";
  std::string inputs, outputs;
  std::string data;
  int64_t steps = 0, epochs = 0;
  std::string eval_data;
  std::string metrics;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  bool resume = false;
  std::string trace;
  int64_t seed = 0;
  int threads = 0;
  std::string progress = "auto";
  double timeout = 300;  // seconds a rank waits for another
  double heartbeat = 10;  // seconds of waiting after which a rank warns who holds it up (0: never)
};

// Flags of `cleave inspect` on a plan.
struct InspectPlanFlags {
  std::string path;
  bool json = false;
  int rank = -1;
  std::string dot;       // write the Graphviz drawing here
  std::string timeline;  // write the predicted Chrome trace here
  std::string cluster = "cpu-local";  // the cluster times are predicted on (NAME or FILE.json)
  bool weights = false;  // also list how each rank holds each weight (split over tp, or whole)
  bool dot_full = false;  // draw every instruction of every rank, not the summary
};

// Flags of `cleave export`.
struct ExportFlags {
  std::string plan;
  std::string checkpoint_dir;
  std::string output;  // FILE.safetensors or FILE.onnx
  std::string model;   // the model the plan was compiled from (default: the path the plan records)
};

int runCompile(const CompileFlags& flags, const std::string& producer);
// Defined in tools/export_command.cpp.
int runExport(const ExportFlags& flags);
int runRun(const RunFlags& flags);
// The trainer's options for `cleave run`'s flags (both backends).
runtime::TrainOptions trainOptionsFor(const RunFlags& flags);
// `cleave run --backend mpi` (cpu) or `--backend nccl` under mpirun (cuda), one process of an
// mpirun job; defined in tools/mpi_run_command.cpp.
int runRunMpi(const RunFlags& flags);
// True when this process was started by mpirun (Open MPI or a PMI launcher set its environment).
bool startedByMpirun();
// Defined in tools/inspect_command.cpp.
int runInspectPlan(const InspectPlanFlags& flags);

}  // namespace cleave::cli
