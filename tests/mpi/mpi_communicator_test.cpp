// Tests of the MPI communicator, run under mpirun (tests/e2e/mpi.sh): every collective gives bitwise
// the local communicator's result for the same inputs, tagged sends match in any order, a missing
// peer times out naming it, and a mismatch in sizes is an error.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "runtime/comm/local_communicator.h"
#include "runtime/comm/mpi_communicator.h"

namespace cleave::runtime {
namespace {

Communicator* mpi = nullptr;  // this process's endpoint, made in main()
MpiJob* job = nullptr;

std::vector<int> everyone() {
  std::vector<int> group;
  for (int rank = 0; rank < mpi->worldSize(); ++rank) group.push_back(rank);
  return group;
}

// Seeded values of rank `rank` (the same in every process): floats in [-1, 1).
std::vector<float> valuesFor(int rank, int64_t count, uint32_t salt) {
  std::mt19937 random(static_cast<uint32_t>(rank * 7919 + 13) + salt);
  std::vector<float> values(static_cast<size_t>(count));
  for (float& value : values) value = std::uniform_real_distribution<float>(-1, 1)(random);
  return values;
}

// What rank `mpi->rank()` gets from `collective` on the local communicator: every rank of the job
// played by a thread of this process, with the same inputs.
std::vector<float> localResult(const std::function<Status(int, Communicator&, std::vector<float>&)>& collective) {
  const int n = mpi->worldSize();
  auto endpoints = createLocalCommunicators(n, 30);
  std::vector<std::vector<float>> results(static_cast<size_t>(n));
  std::vector<Status> statuses(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank)
    threads.emplace_back([&, rank] { statuses[rank] = collective(rank, *endpoints[rank], results[rank]); });
  for (auto& thread : threads) thread.join();
  for (const Status& status : statuses) EXPECT_TRUE(status.isOk()) << status.message();
  return results[static_cast<size_t>(mpi->rank())];
}

void expectBitwiseEqual(const std::vector<float>& expected, const std::vector<float>& actual) {
  ASSERT_EQ(expected.size(), actual.size());
  EXPECT_EQ(std::memcmp(expected.data(), actual.data(), expected.size() * sizeof(float)), 0)
      << "rank " << mpi->rank() << ": the MPI result differs from the local communicator's";
}

TEST(MpiCommunicatorTest, AllReduceBucketsMatchTheLocalCommunicatorBitwise) {
  const std::vector<int64_t> sizes = {3, 1001, 1, 4096};  // chunks that span tensors
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax}) {
    auto run = [&](int rank, Communicator& communicator, std::vector<float>& result) {
      std::vector<std::vector<float>> tensors;
      std::vector<TensorView> views;
      for (size_t t = 0; t < sizes.size(); ++t) tensors.push_back(valuesFor(rank, sizes[t], static_cast<uint32_t>(t)));
      for (auto& tensor : tensors)
        views.push_back(TensorView{tensor.data(), TensorType{DType::kF32, {static_cast<int64_t>(tensor.size())}}});
      std::vector<int> group;
      for (int r = 0; r < communicator.worldSize(); ++r) group.push_back(r);
      Status status = communicator.allReduce(group, views, views, op);
      for (auto& tensor : tensors) result.insert(result.end(), tensor.begin(), tensor.end());
      return status;
    };
    std::vector<float> expected = localResult(run);
    std::vector<float> actual;
    ASSERT_TRUE(run(mpi->rank(), *mpi, actual).isOk());
    expectBitwiseEqual(expected, actual);
  }
}

TEST(MpiCommunicatorTest, AllGatherReduceScatterAndAllToAllMatchTheLocalCommunicator) {
  const int64_t n = mpi->worldSize();
  const Shape block = {3, 2 * n, 5};
  auto gather = [&](int rank, Communicator& communicator, std::vector<float>& result) {
    std::vector<float> input = valuesFor(rank, 3 * 2 * n * 5, 1);
    result.resize(input.size() * static_cast<size_t>(n));
    std::vector<int> group;
    for (int r = 0; r < communicator.worldSize(); ++r) group.push_back(r);
    return communicator.allGather(group, TensorView{input.data(), TensorType{DType::kF32, block}},
                                  TensorView{result.data(), TensorType{DType::kF32, {3, 2 * n * n, 5}}}, 1);
  };
  auto scatter = [&](int rank, Communicator& communicator, std::vector<float>& result) {
    std::vector<float> input = valuesFor(rank, 3 * 2 * n * 5, 2);
    result.resize(input.size() / static_cast<size_t>(n));
    std::vector<int> group;
    for (int r = 0; r < communicator.worldSize(); ++r) group.push_back(r);
    return communicator.reduceScatter(group, TensorView{input.data(), TensorType{DType::kF32, block}},
                                      TensorView{result.data(), TensorType{DType::kF32, {3, 2, 5}}}, 1,
                                      ReduceOp::kMean);
  };
  auto exchange = [&](int rank, Communicator& communicator, std::vector<float>& result) {
    std::vector<float> input = valuesFor(rank, 3 * 2 * n * 5, 3);
    result.resize(input.size());
    std::vector<int> group;
    for (int r = 0; r < communicator.worldSize(); ++r) group.push_back(r);
    return communicator.allToAll(group, TensorView{input.data(), TensorType{DType::kF32, block}},
                                 TensorView{result.data(), TensorType{DType::kF32, {3 * n, 2, 5}}}, 1, 0);
  };
  for (const auto& collective : {std::function(gather), std::function(scatter), std::function(exchange)}) {
    std::vector<float> expected = localResult(collective);
    std::vector<float> actual;
    ASSERT_TRUE(collective(mpi->rank(), *mpi, actual).isOk());
    expectBitwiseEqual(expected, actual);
  }
}

TEST(MpiCommunicatorTest, SendsAreBufferedAndMatchedByTagInAnyOrder) {
  const int n = mpi->worldSize(), rank = mpi->rank();
  const int next = (rank + 1) % n, previous = (rank + n - 1) % n;
  // Every rank sends two messages before receiving anything; the receiver takes them in reverse.
  std::vector<uint8_t> first(100000, static_cast<uint8_t>(rank)), second(7, static_cast<uint8_t>(rank + 100));
  ASSERT_TRUE(mpi->send(next, 5, first).isOk());
  ASSERT_TRUE(mpi->send(next, 9, second).isOk());
  std::vector<uint8_t> got_second(7), got_first(100000);
  ASSERT_TRUE(mpi->recv(previous, 9, got_second).isOk());
  ASSERT_TRUE(mpi->recv(previous, 5, got_first).isOk());
  EXPECT_EQ(got_second, std::vector<uint8_t>(7, static_cast<uint8_t>(previous + 100)));
  EXPECT_EQ(got_first, std::vector<uint8_t>(100000, static_cast<uint8_t>(previous)));
  ASSERT_TRUE(mpi->barrier(everyone()).isOk());
}

TEST(MpiCommunicatorTest, AMessageOfTheWrongSizeIsAnError) {
  const int n = mpi->worldSize(), rank = mpi->rank();
  std::vector<uint8_t> bytes(16, 1);
  ASSERT_TRUE(mpi->send((rank + 1) % n, 11, bytes).isOk());
  std::vector<uint8_t> larger(32);
  Status status = mpi->recv((rank + n - 1) % n, 11, larger);
  EXPECT_EQ(status.exitCode(), 1) << status.message();
  EXPECT_NE(status.message().find("sent 16 bytes where rank " + std::to_string(rank) + " expects 32"),
            std::string::npos)
      << status.message();
  ASSERT_TRUE(mpi->barrier(everyone()).isOk());
}

TEST(MpiCommunicatorTest, AMissingPeerTimesOutNamingIt) {
  // A second endpoint with a 1 s timeout: rank 0 waits for a message rank 1 never sends; rank 1 is
  // alive (its service thread answers pings), so rank 0 names it as running but not arrived.
  auto created = job->createCommunicator(1.0);
  ASSERT_TRUE(created.hasValue()) << created.status().message();
  std::unique_ptr<Communicator> quick = std::move(*created);
  if (mpi->rank() == 0) {
    std::vector<uint8_t> bytes(4);
    auto start = std::chrono::steady_clock::now();
    Status status = quick->recv(1, 3, bytes);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(status.exitCode(), 3);
    EXPECT_NE(status.message().find("recv from rank 1 (tag 3) timed out after 1 s waiting for rank 1; rank 1 is "
                                    "running but has not arrived"),
              std::string::npos)
        << status.message();
    EXPECT_LE(seconds, 1.2);
  }
  ASSERT_TRUE(mpi->barrier(everyone()).isOk());
}

}  // namespace
}  // namespace cleave::runtime

// Joins the job, runs the tests in every process, and exits 1 when any process had a failure.
int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  auto joined = cleave::runtime::MpiJob::join();
  if (!joined) {
    std::fprintf(stderr, "%s\n", joined.status().message().c_str());
    return 1;
  }
  std::unique_ptr<cleave::runtime::MpiJob> job = std::move(*joined);
  if (job->size() < 2) {
    std::fprintf(stderr, "run under mpirun -np 2 or more\n");
    return 1;
  }
  if (job->rank() != 0) testing::GTEST_FLAG(brief) = true;
  auto communicator = job->createCommunicator(30);
  if (!communicator) {
    std::fprintf(stderr, "%s\n", communicator.status().message().c_str());
    return 1;
  }
  cleave::runtime::mpi = communicator->get();
  cleave::runtime::job = job.get();
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  cleave::runtime::mpi = nullptr;
  communicator->reset();
  return failed;
}
