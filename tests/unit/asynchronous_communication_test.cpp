// Tests of the executor's path for asynchronous communicators (NCCL's) on the CPU: a communicator
// that only records each transfer and carries it out later, as a GPU's communication stream would,
// must give bitwise what the synchronous local communicator gives, for dp, tp and pp plans.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "frontend/model_generators.h"
#include "ir/plan.pb.h"
#include "ir/shared_programs.h"
#include "passes/core/compile_pipeline.h"
#include "runtime/comm/communicator.h"
#include "runtime/device/device.h"
#include "runtime/exec/executor.h"
#include "runtime/comm/local_communicator.h"

namespace cleave::runtime {
namespace {

// An asynchronous communicator over a synchronous one: a call records the transfer (a send copies
// its bytes at once, as the contract says) and returns; the recorded transfers run, in the order
// they were issued, when the executor calls deviceWaitForIssued() or finishIssued(). A kernel that
// the executor lets run before the wait reads stale bytes, so missing waits change the results.
class DeferredCommunicator final : public Communicator {
 public:
  explicit DeferredCommunicator(Communicator& inner) : inner_(inner) {}

  int rank() const override { return inner_.rank(); }
  int worldSize() const override { return inner_.worldSize(); }
  bool asynchronous() const override { return true; }

  Status allReduce(std::span<const int> group, std::span<const TensorView> inputs, std::span<const TensorView> outputs,
                   ReduceOp op) override {
    return issue([this, group = copy(group), inputs = copy(inputs), outputs = copy(outputs), op] {
      return inner_.allReduce(group, inputs, outputs, op);
    });
  }
  Status allGather(std::span<const int> group, const TensorView& input, const TensorView& output,
                   int64_t dim) override {
    return issue([this, group = copy(group), input, output, dim] { return inner_.allGather(group, input, output, dim); });
  }
  Status reduceScatter(std::span<const int> group, const TensorView& input, const TensorView& output, int64_t dim,
                       ReduceOp op) override {
    return issue([this, group = copy(group), input, output, dim, op] {
      return inner_.reduceScatter(group, input, output, dim, op);
    });
  }
  Status allToAll(std::span<const int> group, const TensorView& input, const TensorView& output, int64_t split_dim,
                  int64_t concat_dim) override {
    return issue([this, group = copy(group), input, output, split_dim, concat_dim] {
      return inner_.allToAll(group, input, output, split_dim, concat_dim);
    });
  }
  Status send(int peer, int tag, std::span<const uint8_t> bytes) override {
    auto copied = std::make_shared<std::vector<uint8_t>>(bytes.begin(), bytes.end());
    return issue([this, peer, tag, copied] { return inner_.send(peer, tag, *copied); });
  }
  Status recv(int peer, int tag, std::span<uint8_t> bytes) override {
    return issue([this, peer, tag, bytes] { return inner_.recv(peer, tag, bytes); });
  }
  Status barrier(std::span<const int> group) override {
    CLEAVE_TRY(finishIssued());
    return inner_.barrier(group);
  }
  void abort(const Status& error) override { inner_.abort(error); }
  int abortedBy() const override { return inner_.abortedBy(); }

  Status deviceWaitForIssued() override {
    ++waits_;
    return runIssued();
  }
  Status finishIssued() override { return runIssued(); }

  // Transfers issued so far, and how many times the executor waited for them before the end of a run.
  int issuedCount() const { return issued_count_; }
  int waits() const { return waits_; }

 private:
  template <class T>
  static std::vector<std::remove_const_t<T>> copy(std::span<T> values) {
    return {values.begin(), values.end()};
  }
  Status issue(std::function<Status()> transfer) {
    ++issued_count_;
    pending_.push_back(std::move(transfer));
    return Status::ok();
  }
  Status runIssued() {
    std::vector<std::function<Status()>> pending = std::move(pending_);
    pending_.clear();
    for (auto& transfer : pending) CLEAVE_TRY(transfer());
    return Status::ok();
  }

  Communicator& inner_;
  std::vector<std::function<Status()>> pending_;
  int issued_count_ = 0;
  int waits_ = 0;
};

// What a few training steps leave: every rank's losses (the "loss" output of each step) and its
// parameters' bytes.
struct RunResult {
  std::vector<std::vector<uint8_t>> losses;      // by rank, the loss bytes of each step appended
  std::vector<std::vector<uint8_t>> parameters;  // by rank, every parameter's bytes
  std::vector<int> issued, waits;                // by rank (deferred runs)
};

// Fills input `tensor` of step `step` with values that depend only on the global row, so every
// split sees the rows a one-device run would: floats in [-1, 1), integer labels below value_limit.
void fillInput(const NamedTensor& tensor, int step) {
  const TensorType& type = tensor.view.type;
  const int64_t rows = type.rank() > 0 ? type.shape[0] : 1;
  const int64_t per_row = rows > 0 ? type.numel() / rows : 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < per_row; ++k) {
      const int64_t global = ((tensor.batch_offset + r) * per_row + k) * 7919 + step * 104729;
      if (type.dtype == DType::kF32)
        static_cast<float*>(tensor.view.data)[r * per_row + k] = static_cast<float>(global % 2000) / 1000.0f - 1.0f;
      else if (type.dtype == DType::kI64)
        static_cast<int64_t*>(tensor.view.data)[r * per_row + k] =
            (tensor.batch_offset + r + step) % std::max<int64_t>(tensor.value_limit, 1);
    }
}

// Runs `steps` training steps of `plan` on CPU ranks, one thread each, over local communicators,
// wrapped in DeferredCommunicators when `deferred`.
RunResult train(const planpb::Plan& plan, int steps, bool deferred) {
  const int ranks = plan.ranks_size();
  auto local = createLocalCommunicators(ranks, 30);
  std::vector<std::unique_ptr<DeferredCommunicator>> wrappers;
  std::vector<std::unique_ptr<Device>> devices;
  std::vector<std::unique_ptr<RankExecutor>> executors;
  for (int r = 0; r < ranks; ++r) {
    Communicator* communicator = local[static_cast<size_t>(r)].get();
    if (deferred) communicator = wrappers.emplace_back(std::make_unique<DeferredCommunicator>(*communicator)).get();
    devices.push_back(createCpuDevice());
    ExecutorOptions options;
    options.threads = 1;
    options.communicator = communicator;
    auto executor = RankExecutor::create(plan, r, *devices.back(), options);
    EXPECT_TRUE(executor) << executor.status().message();
    if (!executor) return {};
    EXPECT_TRUE((*executor)->initializeParameters());
    executors.push_back(std::move(*executor));
  }
  RunResult result;
  result.losses.resize(ranks);
  std::vector<Status> statuses(ranks, Status::ok());
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      RankExecutor& executor = *executors[static_cast<size_t>(r)];
      for (int step = 0; step < steps && statuses[r].isOk(); ++step) {
        auto inputs = executor.inputs("train");
        if (!inputs) {
          statuses[r] = inputs.status();
          return;
        }
        for (const NamedTensor& input : *inputs) fillInput(input, step);
        statuses[r] = executor.run("train");
        auto loss = executor.output("train", plan.training().loss_output());
        if (statuses[r].isOk() && loss) {
          const auto* bytes = static_cast<const uint8_t*>(loss->data);
          result.losses[r].insert(result.losses[r].end(), bytes, bytes + loss->type.bytes());
        }
      }
    });
  for (auto& thread : threads) thread.join();
  for (int r = 0; r < ranks; ++r) {
    EXPECT_TRUE(statuses[r]) << "rank " << r << ": " << statuses[r].message();
    std::vector<uint8_t> bytes;
    for (const ParameterTensor& param : executors[r]->parameters()) {
      const auto* data = static_cast<const uint8_t*>(param.view.data);
      bytes.insert(bytes.end(), data, data + param.view.type.bytes());
    }
    result.parameters.push_back(std::move(bytes));
    if (deferred) {
      result.issued.push_back(wrappers[r]->issuedCount());
      result.waits.push_back(wrappers[r]->waits());
    }
  }
  return result;
}

struct Split {
  const char* name;
  int dp, tp, pp, microbatches;
};

class AsynchronousCommunication : public ::testing::TestWithParam<Split> {};

TEST_P(AsynchronousCommunication, DeferredTransfersGiveTheSynchronousResultsBitwise) {
  const Split split = GetParam();
  MlpSpec spec;
  spec.input = 12;
  spec.hidden = {16, 16};
  spec.classes = 4;
  spec.batch = 8;
  auto model = generateMlp(spec);
  ASSERT_TRUE(model) << model.status().message();
  CompileOptions options;
  options.model_file = "mlp";
  options.train = true;
  options.training.optimizer.momentum = 0.9;
  options.dp = split.dp;
  options.tp = split.tp;
  options.pp = split.pp;
  options.microbatches = split.microbatches;
  auto plan = compileModel(*model, options);
  ASSERT_TRUE(plan) << plan.status().message();
  ASSERT_TRUE(expandSharedPrograms(*plan).isOk());

  const RunResult synchronous = train(*plan, 3, false);
  const RunResult deferred = train(*plan, 3, true);
  ASSERT_EQ(deferred.parameters.size(), synchronous.parameters.size());
  for (size_t r = 0; r < synchronous.parameters.size(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(deferred.losses[r], synchronous.losses[r]);
    EXPECT_EQ(deferred.parameters[r], synchronous.parameters[r]);
    EXPECT_GT(deferred.issued[r], 0) << "the plan has no transfer on this rank";
    EXPECT_GT(deferred.waits[r], 0) << "no kernel waited for a transfer";
  }
}

INSTANTIATE_TEST_SUITE_P(Splits, AsynchronousCommunication,
                         ::testing::Values(Split{"dp2", 2, 1, 1, 1}, Split{"tp2", 1, 2, 1, 1},
                                           Split{"pp2_m4", 1, 1, 2, 4}, Split{"dp2_pp2_m2", 2, 1, 2, 2}),
                         [](const ::testing::TestParamInfo<Split>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace cleave::runtime
