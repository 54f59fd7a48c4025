// Tests of the local communicator: every collective against a naive reference, bitwise agreement
// across ranks, tagged sends, timeouts naming the missing rank, and aborts.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "runtime/comm/local_communicator.h"

namespace cleave::runtime {
namespace {

using Group = std::vector<int>;

// Runs body(rank, communicator) on one thread per rank of a fresh local world; returns the statuses.
std::vector<Status> runRanks(int ranks, double timeout_seconds, const std::function<Status(int, Communicator&)>& body) {
  auto endpoints = createLocalCommunicators(ranks, timeout_seconds);
  std::vector<Status> statuses(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank)
    threads.emplace_back([&, rank] { statuses[rank] = body(rank, *endpoints[rank]); });
  for (auto& thread : threads) thread.join();
  return statuses;
}

void expectAllOk(const std::vector<Status>& statuses) {
  for (size_t rank = 0; rank < statuses.size(); ++rank)
    EXPECT_TRUE(statuses[rank].isOk()) << "rank " << rank << ": " << statuses[rank].message();
}

std::vector<int> allRanks(int n) {
  std::vector<int> group;
  for (int rank = 0; rank < n; ++rank) group.push_back(rank);
  return group;
}

// Seeded values for rank `rank`: floats in [-1, 1) or integers in [-50, 50).
template <class T>
std::vector<T> valuesFor(int rank, int64_t count, uint32_t salt = 0) {
  std::mt19937 random(static_cast<uint32_t>(rank * 7919 + 13) + salt);
  std::vector<T> values(static_cast<size_t>(count));
  for (auto& value : values) {
    if constexpr (std::is_floating_point_v<T>)
      value = static_cast<T>(std::uniform_real_distribution<double>(-1, 1)(random));
    else
      value = static_cast<T>(std::uniform_int_distribution<int>(-50, 49)(random));
  }
  return values;
}

// Row-major index helpers for the references.
std::vector<int64_t> unravel(int64_t index, const Shape& shape) {
  std::vector<int64_t> position(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    position[d] = index % shape[d];
    index /= shape[d];
  }
  return position;
}
int64_t ravel(const std::vector<int64_t>& position, const Shape& shape) {
  int64_t index = 0;
  for (size_t d = 0; d < shape.size(); ++d) index = index * shape[d] + position[d];
  return index;
}
int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---- all-reduce ----

TEST(LocalCommunicatorTest, AllReduceSumsBucketsBitwiseAlikeOnEveryRankForOneToFourRanks) {
  const std::vector<int64_t> sizes = {1, 7, 1000, 1001, 3};  // uneven chunks, fewer elements than ranks
  for (int n = 1; n <= 4; ++n) {
    // Every rank's bucket of five f32 tensors, reduced in place for the first and into outputs for the rest.
    std::vector<std::vector<std::vector<float>>> inputs(n), outputs(n);
    for (int rank = 0; rank < n; ++rank)
      for (size_t t = 0; t < sizes.size(); ++t) {
        inputs[rank].push_back(valuesFor<float>(rank, sizes[t], static_cast<uint32_t>(t)));
        outputs[rank].push_back(std::vector<float>(static_cast<size_t>(sizes[t]), -7.0f));
      }
    auto statuses = runRanks(n, 30, [&](int rank, Communicator& comm) {
      std::vector<TensorView> in, out;
      for (size_t t = 0; t < sizes.size(); ++t) {
        TensorType type{DType::kF32, {sizes[t]}};
        float* target = t == 0 ? inputs[rank][t].data() : outputs[rank][t].data();
        in.push_back(TensorView{inputs[rank][t].data(), type});
        out.push_back(TensorView{target, type});
      }
      return comm.allReduce(allRanks(n), in, out, ReduceOp::kSum);
    });
    expectAllOk(statuses);
    for (size_t t = 0; t < sizes.size(); ++t) {
      for (int64_t i = 0; i < sizes[t]; ++i) {
        double expected = 0;
        for (int rank = 0; rank < n; ++rank) expected += valuesFor<float>(rank, sizes[t], static_cast<uint32_t>(t))[i];
        const auto& result0 = t == 0 ? inputs[0][t] : outputs[0][t];
        EXPECT_NEAR(result0[i], expected, 1e-5) << "n " << n << " tensor " << t << " element " << i;
        for (int rank = 1; rank < n; ++rank) {
          const auto& result = t == 0 ? inputs[rank][t] : outputs[rank][t];
          EXPECT_EQ(std::memcmp(&result[i], &result0[i], sizeof(float)), 0) << "n " << n << " rank " << rank;
        }
      }
    }
  }
}

TEST(LocalCommunicatorTest, AllReduceIsDeterministicAcrossRuns) {
  const int n = 3;
  const int64_t count = 4099;
  auto once = [&] {
    std::vector<std::vector<float>> data(n);
    for (int rank = 0; rank < n; ++rank) data[rank] = valuesFor<float>(rank, count);
    expectAllOk(runRanks(n, 30, [&](int rank, Communicator& comm) {
      TensorView view{data[rank].data(), {DType::kF32, {count}}};
      return comm.allReduce(allRanks(n), {&view, 1}, {&view, 1}, ReduceOp::kSum);
    }));
    return data[0];
  };
  std::vector<float> first = once();
  for (int run = 0; run < 5; ++run) EXPECT_EQ(std::memcmp(once().data(), first.data(), sizeof(float) * count), 0);
}

template <class T>
void checkAllReduce(DType dtype, ReduceOp op) {
  for (int n = 1; n <= 4; ++n) {
    const int64_t count = 37;
    std::vector<std::vector<T>> data(n);
    for (int rank = 0; rank < n; ++rank) data[rank] = valuesFor<T>(rank, count);
    expectAllOk(runRanks(n, 30, [&](int rank, Communicator& comm) {
      TensorView view{data[rank].data(), {dtype, {count}}};
      return comm.allReduce(allRanks(n), {&view, 1}, {&view, 1}, op);
    }));
    for (int64_t i = 0; i < count; ++i) {
      double sum = 0, max = -1e300;
      for (int rank = 0; rank < n; ++rank) {
        double v = static_cast<double>(valuesFor<T>(rank, count)[i]);
        sum += v;
        max = std::max(max, v);
      }
      double expected = op == ReduceOp::kMax ? max : op == ReduceOp::kSum ? sum : sum / n;
      if constexpr (std::is_integral_v<T>) {
        if (op == ReduceOp::kMean) expected = static_cast<double>(static_cast<int64_t>(sum) / n);
        for (int rank = 0; rank < n; ++rank) EXPECT_EQ(static_cast<double>(data[rank][i]), expected) << n << " " << i;
      } else {
        for (int rank = 0; rank < n; ++rank) EXPECT_NEAR(static_cast<double>(data[rank][i]), expected, 1e-6) << n;
      }
    }
  }
}

TEST(LocalCommunicatorTest, AllReduceMeanAndMaxOverSeveralDtypes) {
  checkAllReduce<float>(DType::kF32, ReduceOp::kMean);
  checkAllReduce<float>(DType::kF32, ReduceOp::kMax);
  checkAllReduce<double>(DType::kF64, ReduceOp::kSum);
  checkAllReduce<double>(DType::kF64, ReduceOp::kMean);
  checkAllReduce<int64_t>(DType::kI64, ReduceOp::kSum);
  checkAllReduce<int64_t>(DType::kI64, ReduceOp::kMax);
  checkAllReduce<int64_t>(DType::kI64, ReduceOp::kMean);
  checkAllReduce<int32_t>(DType::kI32, ReduceOp::kSum);
}

TEST(LocalCommunicatorTest, DisjointGroupsRunConcurrently) {
  // Four ranks as a 2x2 mesh: first all-reduce over {0,2} and {1,3}, then over {0,1} and {2,3}.
  std::vector<std::vector<int64_t>> data = {{1}, {10}, {100}, {1000}};
  expectAllOk(runRanks(4, 30, [&](int rank, Communicator& comm) {
    TensorView view{data[rank].data(), {DType::kI64, {1}}};
    std::vector<int> column = {rank % 2, rank % 2 + 2}, row = {rank / 2 * 2, rank / 2 * 2 + 1};
    CLEAVE_TRY(comm.allReduce(column, {&view, 1}, {&view, 1}, ReduceOp::kSum));
    return comm.allReduce(row, {&view, 1}, {&view, 1}, ReduceOp::kSum);
  }));
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(data[rank][0], 1111);
}

// ---- all-gather, reduce-scatter, all-to-all ----

TEST(LocalCommunicatorTest, AllGatherConcatenatesInGroupOrderAlongAnyDim) {
  const Shape local = {2, 3, 4};
  for (int n = 1; n <= 4; ++n) {
    for (int64_t dim = 0; dim < 3; ++dim) {
      Shape global = local;
      global[dim] *= n;
      std::vector<std::vector<float>> in(n), out(n, std::vector<float>(static_cast<size_t>(numel(global))));
      for (int rank = 0; rank < n; ++rank) in[rank] = valuesFor<float>(rank, numel(local));
      expectAllOk(runRanks(n, 30, [&](int rank, Communicator& comm) {
        return comm.allGather(allRanks(n), {in[rank].data(), {DType::kF32, local}},
                              {out[rank].data(), {DType::kF32, global}}, dim);
      }));
      for (int64_t i = 0; i < numel(global); ++i) {
        std::vector<int64_t> at = unravel(i, global);
        int source = static_cast<int>(at[dim] / local[dim]);
        at[dim] %= local[dim];
        for (int rank = 0; rank < n; ++rank)
          ASSERT_EQ(out[rank][i], in[source][ravel(at, local)]) << "n " << n << " dim " << dim << " element " << i;
      }
    }
  }
}

TEST(LocalCommunicatorTest, ReduceScatterGivesEachRankItsBlockOfTheSum) {
  for (int n = 1; n <= 4; ++n) {
    for (int64_t dim = 0; dim < 2; ++dim) {
      Shape block = {3, 5};
      Shape global = block;
      global[dim] *= n;
      std::vector<std::vector<int64_t>> in(n), out(n, std::vector<int64_t>(static_cast<size_t>(numel(block))));
      std::vector<std::vector<float>> in_f(n), out_f(n, std::vector<float>(static_cast<size_t>(numel(block))));
      for (int rank = 0; rank < n; ++rank) {
        in[rank] = valuesFor<int64_t>(rank, numel(global));
        in_f[rank] = valuesFor<float>(rank, numel(global));
      }
      expectAllOk(runRanks(n, 30, [&](int rank, Communicator& comm) {
        CLEAVE_TRY(comm.reduceScatter(allRanks(n), {in[rank].data(), {DType::kI64, global}},
                                      {out[rank].data(), {DType::kI64, block}}, dim, ReduceOp::kSum));
        return comm.reduceScatter(allRanks(n), {in_f[rank].data(), {DType::kF32, global}},
                                  {out_f[rank].data(), {DType::kF32, block}}, dim, ReduceOp::kMean);
      }));
      for (int rank = 0; rank < n; ++rank) {
        for (int64_t i = 0; i < numel(block); ++i) {
          std::vector<int64_t> at = unravel(i, block);
          at[dim] += rank * block[dim];
          int64_t sum = 0;
          double sum_f = 0;
          for (int source = 0; source < n; ++source) {
            sum += in[source][ravel(at, global)];
            sum_f += in_f[source][ravel(at, global)];
          }
          EXPECT_EQ(out[rank][i], sum) << "n " << n << " dim " << dim << " rank " << rank;
          EXPECT_NEAR(out_f[rank][i], sum_f / n, 1e-6) << "n " << n << " dim " << dim << " rank " << rank;
        }
      }
    }
  }
}

TEST(LocalCommunicatorTest, AllToAllSplitsAndConcatenatesAlongAnyDims) {
  for (int n = 1; n <= 4; ++n) {
    for (auto dims : std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {1, 0}, {1, 1}, {2, 0}}) {
      const int64_t split_dim = dims.first, concat_dim = dims.second;  // lambdas cannot capture bindings (clang 14)
      Shape in_shape = {2, 3, 2};
      in_shape[split_dim] *= n;
      Shape block = in_shape;
      block[split_dim] /= n;
      Shape out_shape = block;
      out_shape[concat_dim] *= n;
      std::vector<std::vector<int64_t>> in(n), out(n, std::vector<int64_t>(static_cast<size_t>(numel(out_shape))));
      for (int rank = 0; rank < n; ++rank) in[rank] = valuesFor<int64_t>(rank, numel(in_shape));
      expectAllOk(runRanks(n, 30, [&](int rank, Communicator& comm) {
        return comm.allToAll(allRanks(n), {in[rank].data(), {DType::kI64, in_shape}},
                             {out[rank].data(), {DType::kI64, out_shape}}, split_dim, concat_dim);
      }));
      // Output element at `at` of rank r: block number at[concat_dim] / block[concat_dim] = source rank q;
      // it is q's input at the same place within the block, in q's block r along split_dim.
      for (int rank = 0; rank < n; ++rank) {
        for (int64_t i = 0; i < numel(out_shape); ++i) {
          std::vector<int64_t> at = unravel(i, out_shape);
          int source = static_cast<int>(at[concat_dim] / block[concat_dim]);
          at[concat_dim] %= block[concat_dim];
          at[split_dim] += rank * block[split_dim];
          ASSERT_EQ(out[rank][i], in[source][ravel(at, in_shape)])
              << "n " << n << " split " << split_dim << " concat " << concat_dim << " rank " << rank;
        }
      }
    }
  }
}

TEST(LocalCommunicatorTest, CollectivesRejectShapesThatDoNotFit) {
  std::vector<float> a(6), b(6);
  auto statuses = runRanks(2, 30, [&](int rank, Communicator& comm) {
    return comm.allGather(Group{0, 1}, {a.data(), {DType::kF32, {2, 3}}}, {b.data(), {DType::kF32, {2, 3}}}, 0);
  });
  EXPECT_EQ(statuses[0].kind(), ErrorKind::kBadInput);
  EXPECT_EQ(statuses[0].message(),
            "all_gather over ranks {0,1}: gathering f32[2,3] along dim 0 over 2 ranks does not "
            "give f32[2,3]");
}

// ---- send, recv, barrier ----

TEST(LocalCommunicatorTest, SendsAreBufferedAndMatchedByTagInAnyOrder) {
  expectAllOk(runRanks(2, 30, [&](int rank, Communicator& comm) -> Status {
    if (rank == 0) {
      for (auto [tag, value] : std::vector<std::pair<int, int32_t>>{{1, 100}, {2, 200}, {3, 300}, {2, 201}})
        CLEAVE_TRY(comm.send(1, tag, {reinterpret_cast<const uint8_t*>(&value), sizeof value}));
      return Status::ok();
    }
    for (auto [tag, expected] : std::vector<std::pair<int, int32_t>>{{3, 300}, {2, 200}, {1, 100}, {2, 201}}) {
      int32_t value = 0;
      CLEAVE_TRY(comm.recv(0, tag, {reinterpret_cast<uint8_t*>(&value), sizeof value}));
      if (value != expected) return Status::internal("tag " + std::to_string(tag) + " gave " + std::to_string(value));
    }
    return Status::ok();
  }));
}

TEST(LocalCommunicatorTest, RecvOfTheWrongSizeIsAnError) {
  auto statuses = runRanks(2, 30, [&](int rank, Communicator& comm) -> Status {
    int64_t value = 5;
    if (rank == 0) return comm.send(1, 0, {reinterpret_cast<const uint8_t*>(&value), 4});
    return comm.recv(0, 0, {reinterpret_cast<uint8_t*>(&value), sizeof value});
  });
  EXPECT_EQ(statuses[1].message(), "recv from rank 0 (tag 0): the message has 4 bytes, the buffer 8");
}

TEST(LocalCommunicatorTest, BarrierWaitsForEveryRank) {
  std::atomic<int> arrived = 0;
  expectAllOk(runRanks(3, 30, [&](int rank, Communicator& comm) -> Status {
    if (rank == 2) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ++arrived;
    CLEAVE_TRY(comm.barrier(Group{0, 1, 2}));
    return arrived == 3 ? Status::ok() : Status::internal("left the barrier before every rank arrived");
  }));
}

// ---- timeouts and aborts ----

TEST(LocalCommunicatorTest, TimeoutsNameTheMissingRank) {
  auto statuses = runRanks(3, 0.2, [&](int rank, Communicator& comm) -> Status {
    float value = 1;
    TensorView view{&value, {DType::kF32, {1}}};
    if (rank == 1) return Status::ok();  // never arrives
    return comm.allReduce(Group{0, 1, 2}, {&view, 1}, {&view, 1}, ReduceOp::kSum);
  });
  for (int rank : {0, 2}) {
    EXPECT_EQ(statuses[rank].kind(), ErrorKind::kRemoteRank);
    EXPECT_EQ(statuses[rank].message(), "all_reduce over ranks {0,1,2} timed out after 0.2 s waiting for rank 1");
  }

  statuses = runRanks(2, 0.2, [&](int rank, Communicator& comm) -> Status {
    int32_t value = 0;
    if (rank == 0) return comm.recv(1, 4, {reinterpret_cast<uint8_t*>(&value), sizeof value});
    return comm.send(0, 5, {reinterpret_cast<const uint8_t*>(&value), sizeof value});  // another tag
  });
  EXPECT_EQ(statuses[0].message(), "recv from rank 1 (tag 4) timed out after 0.2 s waiting for rank 1");
  EXPECT_TRUE(statuses[1].isOk());
}

TEST(LocalCommunicatorTest, AnAbortStopsWaitingRanksPromptly) {
  auto start = std::chrono::steady_clock::now();
  auto statuses = runRanks(3, 60, [&](int rank, Communicator& comm) -> Status {
    std::vector<float> values(1000, 1.0f);
    TensorView view{values.data(), {DType::kF32, {1000}}};
    if (rank == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      Status failure = Status::badInput("a kernel failed");
      comm.abort(failure);
      return failure;
    }
    CLEAVE_TRY(comm.barrier(Group{0, 1}));
    return comm.allReduce(Group{0, 1, 2}, {&view, 1}, {&view, 1}, ReduceOp::kSum);
  });
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 10);
  for (int rank : {0, 1}) {
    EXPECT_EQ(statuses[rank].kind(), ErrorKind::kRemoteRank);
    EXPECT_EQ(statuses[rank].message(), "all_reduce over ranks {0,1,2} stopped: rank 2 failed");
    EXPECT_EQ(statuses[rank].exitCode(), 3);  // a remote rank's failure exits as a runtime one
  }
}

TEST(LocalCommunicatorTest, RanksCallingDifferentCollectivesStopWithAnError) {
  auto statuses = runRanks(2, 60, [&](int rank, Communicator& comm) -> Status {
    float value = 1, gathered[2];
    TensorView view{&value, {DType::kF32, {1}}};
    if (rank == 0) return comm.allReduce(Group{0, 1}, {&view, 1}, {&view, 1}, ReduceOp::kSum);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return comm.allGather(Group{0, 1}, view, {gathered, {DType::kF32, {2}}}, 0);
  });
  EXPECT_EQ(statuses[1].message(),
            "all_gather over ranks {0,1}: rank 1 calls all_gather where another rank called "
            "all_reduce");
  EXPECT_EQ(statuses[0].message(), "all_reduce over ranks {0,1} stopped: rank 1 failed");
}

TEST(LocalCommunicatorTest, GroupsMustHoldTheCallerAndExistingRanks) {
  auto statuses = runRanks(2, 1, [&](int rank, Communicator& comm) -> Status {
    return rank == 0 ? comm.barrier(Group{1}) : comm.barrier(Group{1, 2});
  });
  EXPECT_EQ(statuses[0].message(), "barrier over ranks {1}: rank 0 is not in the group");
  EXPECT_EQ(statuses[1].message(), "barrier over ranks {1,2}: rank 2 is not one of the 2 ranks");
}

}  // namespace
}  // namespace cleave::runtime
