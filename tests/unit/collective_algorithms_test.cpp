// Tests of the transport-agnostic collective algorithms: flat runs of buckets, and the ring all-reduce
// over a message-passing transport (chunks packed and copied, as MPI sends them) giving bitwise the
// local communicator's results.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "runtime/comm/collective_algorithms.h"
#include "runtime/comm/local_communicator.h"

namespace cleave::runtime {
namespace {

TEST(CollectiveAlgorithmsTest, FlatRunsCutTheBucketAtTensorBoundaries) {
  std::vector<float> a(3), b(5), c(2);
  std::vector<TensorView> bucket = {{a.data(), TensorType{DType::kF32, {3}}},
                                    {b.data(), TensorType{DType::kF32, {5}}},
                                    {c.data(), TensorType{DType::kF32, {2}}}};
  std::vector<ElementRun> runs = flatRuns(bucket, 2, 9);  // a[2], b[0..5), c[0]
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].data, reinterpret_cast<uint8_t*>(a.data() + 2));
  EXPECT_EQ(runs[0].count, 1);
  EXPECT_EQ(runs[1].data, reinterpret_cast<uint8_t*>(b.data()));
  EXPECT_EQ(runs[1].count, 5);
  EXPECT_EQ(runs[2].data, reinterpret_cast<uint8_t*>(c.data()));
  EXPECT_EQ(runs[2].count, 1);
  EXPECT_TRUE(flatRuns(bucket, 4, 4).empty());
}

// Messages between ranks, as a network delivers them: (from, to, step) -> bytes.
struct Mailboxes {
  std::mutex mutex;
  std::condition_variable arrived;
  std::map<std::tuple<int, int, int64_t>, std::vector<uint8_t>> messages;
};

// A ring transport that packs this rank's chunk into a message and waits for the predecessor's.
class MessageRing final : public RingTransport {
 public:
  MessageRing(Mailboxes& mailboxes, std::vector<TensorView> bucket, int rank, int n)
      : mailboxes_(mailboxes), bucket_(std::move(bucket)), rank_(rank), n_(n) {}
  Expected<std::vector<ElementRun>> exchange(int64_t step, int64_t send_begin, int64_t send_end, int64_t receive_begin,
                                             int64_t receive_end) override {
    const int64_t element_bytes = dtypeSize(bucket_[0].type.dtype);
    std::vector<uint8_t> packed;
    for (const ElementRun& run : flatRuns(bucket_, send_begin, send_end))
      packed.insert(packed.end(), run.data, run.data + run.count * element_bytes);
    std::unique_lock lock(mailboxes_.mutex);
    mailboxes_.messages[{rank_, (rank_ + 1) % n_, step}] = std::move(packed);
    mailboxes_.arrived.notify_all();
    auto key = std::make_tuple((rank_ + n_ - 1) % n_, rank_, step);
    mailboxes_.arrived.wait(lock, [&] { return mailboxes_.messages.count(key) > 0; });
    received_ = std::move(mailboxes_.messages[key]);
    mailboxes_.messages.erase(key);
    if (static_cast<int64_t>(received_.size()) != (receive_end - receive_begin) * element_bytes)
      return Status::internal("the predecessor's chunk has the wrong size");
    return std::vector<ElementRun>{ElementRun{received_.data(), receive_end - receive_begin}};
  }
  void stepDone(int64_t) override {}

 private:
  Mailboxes& mailboxes_;
  std::vector<TensorView> bucket_;
  int rank_, n_;
  std::vector<uint8_t> received_;
};

// Seeded bucket values of rank `rank`: tensors of `sizes` elements, floats in [-1, 1).
std::vector<std::vector<float>> bucketValues(int rank, const std::vector<int64_t>& sizes) {
  std::mt19937 random(static_cast<uint32_t>(rank * 104729 + 5));
  std::vector<std::vector<float>> tensors;
  for (int64_t size : sizes) {
    auto& tensor = tensors.emplace_back(static_cast<size_t>(size));
    for (float& value : tensor) value = std::uniform_real_distribution<float>(-1, 1)(random);
  }
  return tensors;
}

std::vector<TensorView> viewsOf(std::vector<std::vector<float>>& tensors) {
  std::vector<TensorView> views;
  for (auto& tensor : tensors)
    views.push_back(TensorView{tensor.data(), TensorType{DType::kF32, {static_cast<int64_t>(tensor.size())}}});
  return views;
}

TEST(CollectiveAlgorithmsTest, RingOverPackedMessagesMatchesTheLocalCommunicatorBitwise) {
  // Uneven tensors, so chunks span tensor boundaries and are packed from several runs.
  const std::vector<int64_t> sizes = {5, 1003, 2, 777};
  for (int n : {2, 3, 4}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax}) {
      // 1. The local communicator's result, rank by rank.
      std::vector<std::vector<std::vector<float>>> local(static_cast<size_t>(n)), messages(static_cast<size_t>(n));
      for (int rank = 0; rank < n; ++rank) local[rank] = messages[rank] = bucketValues(rank, sizes);
      std::vector<int> group;
      for (int rank = 0; rank < n; ++rank) group.push_back(rank);
      auto endpoints = createLocalCommunicators(n, 30);
      std::vector<std::thread> threads;
      std::vector<Status> statuses(static_cast<size_t>(n));
      for (int rank = 0; rank < n; ++rank)
        threads.emplace_back([&, rank] {
          std::vector<TensorView> views = viewsOf(local[rank]);
          statuses[rank] = endpoints[rank]->allReduce(group, views, views, op);
        });
      for (auto& thread : threads) thread.join();
      threads.clear();
      // 2. The same ring over packed messages.
      Mailboxes mailboxes;
      int64_t total = 0;
      for (int64_t size : sizes) total += size;
      for (int rank = 0; rank < n; ++rank)
        threads.emplace_back([&, rank] {
          MessageRing ring(mailboxes, viewsOf(messages[rank]), rank, n);
          Status status = ringAllReduce(viewsOf(messages[rank]), total, rank, n, op, ring);
          if (!status.isOk()) statuses[rank] = status;
        });
      for (auto& thread : threads) thread.join();
      for (int rank = 0; rank < n; ++rank) {
        ASSERT_TRUE(statuses[rank].isOk()) << statuses[rank].message();
        for (size_t t = 0; t < sizes.size(); ++t)
          EXPECT_EQ(std::memcmp(local[rank][t].data(), messages[rank][t].data(), sizes[t] * sizeof(float)), 0)
              << "n=" << n << " op " << reduceOpName(op) << " rank " << rank << " tensor " << t;
      }
    }
  }
}

}  // namespace
}  // namespace cleave::runtime
