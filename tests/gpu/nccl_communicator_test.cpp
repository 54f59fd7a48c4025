// GPU tests of the NCCL communicators: one rank on one GPU, and (with two GPUs) every collective against
// host-computed values, crossing sends, lazily created groups, timeouts and aborts.
#include "runtime/comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/cuda_device.h"

namespace cleave::runtime {
namespace {

using Clock = std::chrono::steady_clock;

#define SKIP_WITHOUT_GPUS(count)                                                                           \
  if (cudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount found none or no driver)"; \
  if (cudaDeviceCount() < (count))                                                                         \
  GTEST_SKIP() << "needs " << (count) << " CUDA devices, this machine has " << cudaDeviceCount()

// The ranks of a test: rank r on GPU r. The communicators go before the devices they use.
struct Ranks {
  std::vector<std::unique_ptr<Device>> devices;
  std::vector<std::unique_ptr<Communicator>> communicators;
  Communicator& operator[](int rank) { return *communicators[static_cast<size_t>(rank)]; }
};

Status makeRanks(int count, double timeout_seconds, Ranks& ranks) {
  std::vector<Device*> raw;
  for (int rank = 0; rank < count; ++rank) {
    auto device = createCudaDevice(rank);
    if (!device.hasValue()) return device.status();
    ranks.devices.push_back(std::move(*device));
    raw.push_back(ranks.devices.back().get());
  }
  auto communicators = createNcclCommunicators(raw, timeout_seconds);
  if (!communicators.hasValue()) return communicators.status();
  ranks.communicators = std::move(*communicators);
  return Status::ok();
}

// Runs job(rank) on a thread per rank (as RankGroup does) and returns each rank's status.
std::vector<Status> onEachRank(int count, const std::function<Status(int)>& job) {
  std::vector<Status> statuses(static_cast<size_t>(count), Status::ok());
  std::vector<std::thread> threads;
  for (int rank = 0; rank < count; ++rank)
    threads.emplace_back([&, rank] { statuses[static_cast<size_t>(rank)] = job(rank); });
  for (std::thread& thread : threads) thread.join();
  return statuses;
}

// Values in device memory of GPU `ordinal`.
template <class T>
class DeviceArray {
 public:
  DeviceArray(int ordinal, const std::vector<T>& values) : ordinal_(ordinal), count_(values.size()) {
    EXPECT_EQ(cudaSetDevice(ordinal), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&data_, std::max<size_t>(bytes(), 8)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data_, values.data(), bytes(), cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  DeviceArray(int ordinal, size_t count) : DeviceArray(ordinal, std::vector<T>(count, T{})) {}
  ~DeviceArray() {
    (void)cudaSetDevice(ordinal_);
    (void)cudaFree(data_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  size_t bytes() const { return count_ * sizeof(T); }
  TensorView view(DType dtype, Shape shape) const { return {data_, TensorType{dtype, std::move(shape)}}; }
  std::span<const uint8_t> constBytes() const { return {static_cast<const uint8_t*>(data_), bytes()}; }
  std::span<uint8_t> mutableBytes() { return {static_cast<uint8_t*>(data_), bytes()}; }
  std::vector<T> read() const {
    std::vector<T> values(count_);
    EXPECT_EQ(cudaSetDevice(ordinal_), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(values.data(), data_, bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    return values;
  }

 private:
  int ordinal_;
  size_t count_;
  void* data_ = nullptr;
};

// Rank r's test values: r·100 + i.
std::vector<float> rankValues(int rank, size_t count) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = static_cast<float>(rank * 100 + static_cast<int>(i));
  return values;
}

std::span<const TensorView> one(const TensorView& view) { return {&view, 1}; }

// ---- one rank ----

TEST(NcclCommunicatorTest, OneRankCollectivesAreCopiesAndSelfSendArrives) {
  SKIP_WITHOUT_GPUS(1);
  Ranks ranks;
  Status made = makeRanks(1, 60, ranks);
  ASSERT_TRUE(made.isOk()) << made.message();
  Communicator& communicator = ranks[0];
  EXPECT_TRUE(communicator.asynchronous());
  EXPECT_EQ(communicator.worldSize(), 1);
  const std::vector<int> group = {0};
  const std::vector<float> values = {1, -2, 3.5f, 4, 5, 6};
  DeviceArray<float> input(0, values), output(0, values.size());
  const TensorView in = input.view(DType::kF32, {2, 3});
  const TensorView out = output.view(DType::kF32, {2, 3});
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax}) {
    ASSERT_TRUE(communicator.allReduce(group, one(in), one(out), op).isOk());
    ASSERT_TRUE(communicator.finishIssued().isOk());
    EXPECT_EQ(output.read(), values) << reduceOpName(op);
  }
  ASSERT_TRUE(communicator.allReduce(group, one(in), one(in), ReduceOp::kSum).isOk());  // in place
  ASSERT_TRUE(communicator.finishIssued().isOk());
  EXPECT_EQ(input.read(), values);

  for (int64_t dim : {0, 1}) {
    DeviceArray<float> gathered(0, values.size()), scattered(0, values.size()), exchanged(0, values.size());
    ASSERT_TRUE(communicator.allGather(group, in, gathered.view(DType::kF32, {2, 3}), dim).isOk());
    ASSERT_TRUE(communicator.reduceScatter(group, in, scattered.view(DType::kF32, {2, 3}), dim, ReduceOp::kSum).isOk());
    ASSERT_TRUE(communicator.allToAll(group, in, exchanged.view(DType::kF32, {2, 3}), dim, 1 - dim).isOk());
    ASSERT_TRUE(communicator.finishIssued().isOk());
    EXPECT_EQ(gathered.read(), values) << "all_gather along " << dim;
    EXPECT_EQ(scattered.read(), values) << "reduce_scatter along " << dim;
    EXPECT_EQ(exchanged.read(), values) << "all_to_all splitting " << dim;
  }

  DeviceArray<float> received(0, values.size());
  ASSERT_TRUE(communicator.send(0, 7, input.constBytes()).isOk());
  ASSERT_TRUE(communicator.deviceWaitForIssued().isOk());
  ASSERT_TRUE(communicator.recv(0, 7, received.mutableBytes()).isOk());
  ASSERT_TRUE(communicator.finishIssued().isOk());
  EXPECT_EQ(received.read(), values);
  EXPECT_TRUE(communicator.barrier(group).isOk());
  EXPECT_EQ(communicator.abortedBy(), -1);
}

// Needs no GPU: the devices are checked before CUDA or NCCL is touched.
TEST(NcclCommunicatorTest, RefusesDevicesThatAreNotGpus) {
  std::unique_ptr<Device> cpu = createCpuDevice();
  std::vector<Device*> devices = {cpu.get()};
  auto communicators = createNcclCommunicators(devices, 10);
  ASSERT_FALSE(communicators.hasValue());
  EXPECT_EQ(communicators.status().kind(), ErrorKind::kUsage);
  EXPECT_NE(communicators.status().message().find("rank 0"), std::string::npos) << communicators.status().message();
}

// ---- two ranks ----

// Host references for 2-D tensors of two ranks: rank q's input `inputs[q]` of shape rows x cols.
using Matrix = std::vector<float>;

// The concatenation of the ranks' inputs along `dim`.
Matrix gatherReference(const std::vector<Matrix>& inputs, int64_t rows, int64_t cols, int64_t dim) {
  const auto n = static_cast<int64_t>(inputs.size());
  const int64_t out_cols = dim == 1 ? cols * n : cols;
  Matrix gathered(static_cast<size_t>(rows * cols * n));
  for (int64_t q = 0; q < n; ++q)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t row = dim == 0 ? q * rows + r : r, col = dim == 1 ? q * cols + c : c;
        gathered[static_cast<size_t>(row * out_cols + col)] = inputs[static_cast<size_t>(q)][static_cast<size_t>(r * cols + c)];
      }
  return gathered;
}

// Block `position` along `dim` of the element-wise sum of the inputs (rows x cols each).
Matrix reduceScatterReference(const std::vector<Matrix>& inputs, int64_t rows, int64_t cols, int64_t dim,
                              int64_t position) {
  const auto n = static_cast<int64_t>(inputs.size());
  const int64_t out_rows = dim == 0 ? rows / n : rows, out_cols = dim == 1 ? cols / n : cols;
  Matrix block(static_cast<size_t>(out_rows * out_cols), 0.0f);
  for (int64_t r = 0; r < out_rows; ++r)
    for (int64_t c = 0; c < out_cols; ++c) {
      const int64_t row = dim == 0 ? position * out_rows + r : r, col = dim == 1 ? position * out_cols + c : c;
      for (const Matrix& input : inputs)
        block[static_cast<size_t>(r * out_cols + c)] += input[static_cast<size_t>(row * cols + col)];
    }
  return block;
}

// What rank `position` holds after an all-to-all of the inputs (rows x cols each).
Matrix allToAllReference(const std::vector<Matrix>& inputs, int64_t rows, int64_t cols, int64_t split_dim,
                         int64_t concat_dim, int64_t position) {
  const auto n = static_cast<int64_t>(inputs.size());
  const int64_t block_rows = split_dim == 0 ? rows / n : rows, block_cols = split_dim == 1 ? cols / n : cols;
  const int64_t out_cols = concat_dim == 1 ? block_cols * n : block_cols;
  Matrix output(static_cast<size_t>(rows * cols));
  for (int64_t q = 0; q < n; ++q)
    for (int64_t r = 0; r < block_rows; ++r)
      for (int64_t c = 0; c < block_cols; ++c) {
        const int64_t in_row = split_dim == 0 ? position * block_rows + r : r;
        const int64_t in_col = split_dim == 1 ? position * block_cols + c : c;
        const int64_t out_row = concat_dim == 0 ? q * block_rows + r : r;
        const int64_t out_col = concat_dim == 1 ? q * block_cols + c : c;
        output[static_cast<size_t>(out_row * out_cols + out_col)] =
            inputs[static_cast<size_t>(q)][static_cast<size_t>(in_row * cols + in_col)];
      }
  return output;
}

void expectAllOk(const std::vector<Status>& statuses) {
  for (size_t rank = 0; rank < statuses.size(); ++rank)
    EXPECT_TRUE(statuses[rank].isOk()) << "rank " << rank << ": " << statuses[rank].message();
}

TEST(NcclCommunicatorTest, TwoRanksAllReduceBucketsWithEveryOp) {
  SKIP_WITHOUT_GPUS(2);
  Ranks ranks;
  Status made = makeRanks(2, 60, ranks);
  ASSERT_TRUE(made.isOk()) << made.message();
  const std::vector<int> group = {0, 1};
  expectAllOk(onEachRank(2, [&](int rank) -> Status {
    DeviceArray<float> first(rank, rankValues(rank, 5)), second(rank, rankValues(rank, 6));
    DeviceArray<float> first_out(rank, 5), second_out(rank, 6);
    std::vector<TensorView> inputs = {first.view(DType::kF32, {5}), second.view(DType::kF32, {2, 3})};
    std::vector<TensorView> outputs = {first_out.view(DType::kF32, {5}), second_out.view(DType::kF32, {2, 3})};
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax}) {
      CLEAVE_TRY(ranks[rank].allReduce(group, inputs, outputs, op));
      CLEAVE_TRY(ranks[rank].finishIssued());
      for (auto [array, count] : {std::pair{&first_out, 5}, std::pair{&second_out, 6}}) {
        std::vector<float> expected(static_cast<size_t>(count));
        for (int i = 0; i < count; ++i)
          expected[static_cast<size_t>(i)] = op == ReduceOp::kSum    ? static_cast<float>(100 + 2 * i)
                                             : op == ReduceOp::kMean ? static_cast<float>(50 + i)
                                                                     : static_cast<float>(100 + i);
        EXPECT_EQ(array->read(), expected) << "rank " << rank << ", " << reduceOpName(op);
      }
    }
    // In place, 64-bit integers.
    std::vector<int64_t> integers = {int64_t{1} << 40, -3, static_cast<int64_t>(rank)};
    DeviceArray<int64_t> values(rank, integers);
    const TensorView view = values.view(DType::kI64, {3});
    CLEAVE_TRY(ranks[rank].allReduce(group, one(view), one(view), ReduceOp::kSum));
    CLEAVE_TRY(ranks[rank].finishIssued());
    EXPECT_EQ(values.read(), (std::vector<int64_t>{int64_t{1} << 41, -6, 1})) << "rank " << rank;
    return ranks[rank].barrier(group);
  }));
}

TEST(NcclCommunicatorTest, TwoRanksGatherScatterAndAllToAllAlongBothDims) {
  SKIP_WITHOUT_GPUS(2);
  Ranks ranks;
  Status made = makeRanks(2, 60, ranks);
  ASSERT_TRUE(made.isOk()) << made.message();
  const std::vector<int> group = {0, 1};
  const int64_t rows = 2, cols = 4;
  const std::vector<Matrix> inputs = {rankValues(0, rows * cols), rankValues(1, rows * cols)};
  expectAllOk(onEachRank(2, [&](int rank) -> Status {
    DeviceArray<float> input(rank, inputs[static_cast<size_t>(rank)]);
    const TensorView in = input.view(DType::kF32, {rows, cols});
    for (int64_t dim : {0, 1}) {
      DeviceArray<float> gathered(rank, static_cast<size_t>(rows * cols * 2));
      CLEAVE_TRY(ranks[rank].allGather(group, in, gathered.view(DType::kF32, {dim == 0 ? rows * 2 : rows,
                                                                              dim == 1 ? cols * 2 : cols}),
                                       dim));
      DeviceArray<float> scattered(rank, static_cast<size_t>(rows * cols / 2));
      CLEAVE_TRY(ranks[rank].reduceScatter(group, in,
                                           scattered.view(DType::kF32, {dim == 0 ? rows / 2 : rows,
                                                                        dim == 1 ? cols / 2 : cols}),
                                           dim, ReduceOp::kSum));
      const int64_t concat_dim = 1 - dim;
      const int64_t block_rows = dim == 0 ? rows / 2 : rows, block_cols = dim == 1 ? cols / 2 : cols;
      DeviceArray<float> exchanged(rank, static_cast<size_t>(rows * cols));
      CLEAVE_TRY(ranks[rank].allToAll(group, in,
                                      exchanged.view(DType::kF32, {concat_dim == 0 ? block_rows * 2 : block_rows,
                                                                   concat_dim == 1 ? block_cols * 2 : block_cols}),
                                      dim, concat_dim));
      CLEAVE_TRY(ranks[rank].finishIssued());
      EXPECT_EQ(gathered.read(), gatherReference(inputs, rows, cols, dim)) << "rank " << rank << ", dim " << dim;
      EXPECT_EQ(scattered.read(), reduceScatterReference(inputs, rows, cols, dim, rank))
          << "rank " << rank << ", dim " << dim;
      EXPECT_EQ(exchanged.read(), allToAllReference(inputs, rows, cols, dim, concat_dim, rank))
          << "rank " << rank << ", split dim " << dim;
    }
    return Status::ok();
  }));
}

// Each rank sends to the other, then receives (the 1F1B pattern): buffered sends must not deadlock.
// Several messages follow, received in the order sent.
TEST(NcclCommunicatorTest, TwoRanksCrossingSendsDoNotDeadlock) {
  SKIP_WITHOUT_GPUS(2);
  Ranks ranks;
  Status made = makeRanks(2, 60, ranks);
  ASSERT_TRUE(made.isOk()) << made.message();
  const size_t count = size_t{1} << 18;  // 1 MiB of floats
  expectAllOk(onEachRank(2, [&](int rank) -> Status {
    const int peer = 1 - rank;
    DeviceArray<float> outgoing(rank, rankValues(rank, count)), incoming(rank, count);
    CLEAVE_TRY(ranks[rank].send(peer, 3, outgoing.constBytes()));
    CLEAVE_TRY(ranks[rank].recv(peer, 3, incoming.mutableBytes()));
    CLEAVE_TRY(ranks[rank].finishIssued());
    EXPECT_EQ(incoming.read(), rankValues(peer, count)) << "rank " << rank;

    std::vector<std::unique_ptr<DeviceArray<float>>> messages, arrivals;
    for (int message = 0; message < 3; ++message) {
      messages.push_back(std::make_unique<DeviceArray<float>>(rank, rankValues(rank * 10 + message, 16)));
      CLEAVE_TRY(ranks[rank].send(peer, 10 + message, messages.back()->constBytes()));
    }
    for (int message = 0; message < 3; ++message) {
      arrivals.push_back(std::make_unique<DeviceArray<float>>(rank, 16));
      CLEAVE_TRY(ranks[rank].recv(peer, 10 + message, arrivals.back()->mutableBytes()));
    }
    CLEAVE_TRY(ranks[rank].finishIssued());
    for (int message = 0; message < 3; ++message)
      EXPECT_EQ(arrivals[static_cast<size_t>(message)]->read(), rankValues(peer * 10 + message, 16))
          << "rank " << rank << ", message " << message;
    return Status::ok();
  }));
}

// Groups that are not every rank get their own NCCL communicator on first use.
TEST(NcclCommunicatorTest, TwoRanksCollectivesOverGroupsOfOne) {
  SKIP_WITHOUT_GPUS(2);
  Ranks ranks;
  Status made = makeRanks(2, 60, ranks);
  ASSERT_TRUE(made.isOk()) << made.message();
  expectAllOk(onEachRank(2, [&](int rank) -> Status {
    const std::vector<int> group = {rank};
    DeviceArray<float> values(rank, rankValues(rank, 8)), result(rank, 8);
    for (int repeat = 0; repeat < 2; ++repeat) {
      CLEAVE_TRY(ranks[rank].allReduce(group, one(values.view(DType::kF32, {8})), one(result.view(DType::kF32, {8})),
                                       ReduceOp::kSum));
      CLEAVE_TRY(ranks[rank].finishIssued());
      EXPECT_EQ(result.read(), rankValues(rank, 8)) << "rank " << rank;
    }
    return Status::ok();
  }));
}

TEST(NcclCommunicatorTest, ReceivingOutOfSendOrderIsReported) {
  SKIP_WITHOUT_GPUS(2);
  Ranks ranks;
  Status made = makeRanks(2, 60, ranks);
  ASSERT_TRUE(made.isOk()) << made.message();
  DeviceArray<float> first(0, 4), second(0, 4), arrival(1, 4);
  ASSERT_TRUE(ranks[0].send(1, 1, first.constBytes()).isOk());
  ASSERT_TRUE(ranks[0].send(1, 2, second.constBytes()).isOk());
  Status received = ranks[1].recv(0, 2, arrival.mutableBytes());
  ASSERT_FALSE(received.isOk());
  EXPECT_EQ(received.kind(), ErrorKind::kBadInput);
  EXPECT_NE(received.message().find("in the order they were sent"), std::string::npos) << received.message();
  // Rank 0's sends wait on the device for receives that will not come: abort them before the
  // arrays are freed (cudaFree waits for the device).
  ranks[0].abort(Status::runtime("the test is over"));
}

TEST(NcclCommunicatorTest, RankThatNeverJoinsTimesOut) {
  SKIP_WITHOUT_GPUS(2);
  const double timeout = 5;
  Ranks ranks;
  Status made = makeRanks(2, timeout, ranks);
  ASSERT_TRUE(made.isOk()) << made.message();
  DeviceArray<float> values(0, rankValues(0, 64));
  const TensorView view = values.view(DType::kF32, {64});
  const std::vector<int> group = {0, 1};
  const Clock::time_point start = Clock::now();
  Status status = ranks[0].allReduce(group, one(view), one(view), ReduceOp::kSum);  // rank 1 never calls it
  if (status.isOk()) status = ranks[0].finishIssued();
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.kind(), ErrorKind::kRemoteRank);
  EXPECT_NE(status.message().find("all_reduce over ranks {0,1}"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("timed out"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("rank 0"), std::string::npos) << status.message();
  EXPECT_LT(waited, timeout + 2) << status.message();
  // The communicators are aborted now: later calls fail at once.
  EXPECT_FALSE(ranks[0].allReduce(group, one(view), one(view), ReduceOp::kSum).isOk());
}

TEST(NcclCommunicatorTest, AbortStopsTheOtherRanksPromptly) {
  SKIP_WITHOUT_GPUS(2);
  Ranks ranks;
  Status made = makeRanks(2, 120, ranks);
  ASSERT_TRUE(made.isOk()) << made.message();
  const std::vector<int> group = {0, 1};
  double waited = 0;
  std::vector<Status> statuses = onEachRank(2, [&](int rank) -> Status {
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      ranks[1].abort(Status::runtime("rank 1: out of memory"));
      return Status::ok();
    }
    DeviceArray<float> values(0, rankValues(0, 64));
    const TensorView view = values.view(DType::kF32, {64});
    const Clock::time_point start = Clock::now();
    Status status = ranks[0].allReduce(group, one(view), one(view), ReduceOp::kSum);
    if (status.isOk()) status = ranks[0].finishIssued();
    waited = std::chrono::duration<double>(Clock::now() - start).count();
    return status;
  });
  ASSERT_FALSE(statuses[0].isOk());
  EXPECT_NE(statuses[0].message().find("stopped: rank 1 failed"), std::string::npos) << statuses[0].message();
  EXPECT_LT(waited, 10.0);
  EXPECT_EQ(ranks[0].abortedBy(), 1);
  EXPECT_EQ(ranks[1].abortedBy(), 1);
  Status again = ranks[0].barrier(group);
  ASSERT_FALSE(again.isOk());
  EXPECT_NE(again.message().find("stopped: rank 1 failed"), std::string::npos) << again.message();
}

}  // namespace
}  // namespace cleave::runtime
