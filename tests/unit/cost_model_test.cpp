// Unit tests of the cost model (roofline, alpha-beta, graph nodes) and the plan schedule simulator.
#include "analysis/cost_model.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "analysis/cache_reuse.h"
#include "analysis/cluster_json.h"
#include "analysis/plan_prediction.h"
#include "analysis/plan_timeline.h"
#include "tests/unit/plan_test_builder.h"

namespace cleave {
namespace {

using plan_testing::PlanBuilder;

TensorType f32(Shape shape) { return {DType::kF32, std::move(shape)}; }

// A cluster with round figures: 1 GFLOP/s, 1 TB/s memory (so kernels are compute-bound), no kernel
// overhead; 8 devices per host linked at 1 GB/s and 1 us, hosts at 0.1 GB/s and 10 us.
ClusterSpec roundCluster(int hosts = 1) {
  ClusterSpec cluster;
  cluster.name = "round";
  cluster.device.peak_flops = {{DType::kF32, 1e9}};
  cluster.device.memory_bandwidth = 1e12;
  cluster.hosts = hosts;
  cluster.devices_per_host = 8;
  cluster.intra_host = {"fast", 1e9, 1e-6};
  cluster.inter_host = {"slow", 1e8, 1e-5};
  return cluster;
}

TEST(CostModel, MatmulFlopsAndBytesComeFromTheOpTable) {
  // a[64,128] x b[128,256]: 2·64·128·256 FLOPs; (64·128 + 128·256 + 64·256)·4 bytes.
  const OpDef& matmul = opDef(OpId::matmul);
  std::vector<TensorType> operands = {f32({64, 128}), f32({128, 256})};
  std::vector<TensorType> results = {f32({64, 256})};
  AttrMap attrs;
  OpCost cost = matmul.cost(OpContext{matmul, operands, results, attrs});
  EXPECT_DOUBLE_EQ(cost.flops, 4194304.0);
  EXPECT_DOUBLE_EQ(cost.bytes, 229376.0);

  // Compute-bound on the round cluster: 4194304 FLOPs / 1e9 FLOP/s.
  CostModel model(roundCluster());
  EXPECT_DOUBLE_EQ(model.kernelTime(matmul, operands, results, attrs), 4194304.0 / 1e9);
}

TEST(CostModel, RooflineTakesTheSlowerOfComputeAndMemoryPlusOverhead) {
  DeviceSpec device;
  device.peak_flops = {{DType::kF32, 1e9}, {DType::kF64, 5e8}};
  device.memory_bandwidth = 1e9;
  device.kernel_overhead_s = 1e-6;
  EXPECT_DOUBLE_EQ(rooflineTime({1000, 12000}, DType::kF32, device), 12000 / 1e9 + 1e-6);  // memory-bound
  EXPECT_DOUBLE_EQ(rooflineTime({1e6, 1000}, DType::kF32, device), 1e6 / 1e9 + 1e-6);      // compute-bound
  EXPECT_DOUBLE_EQ(rooflineTime({1e6, 1000}, DType::kF64, device), 1e6 / 5e8 + 1e-6);      // its own peak
  EXPECT_DOUBLE_EQ(device.peakFlops(DType::kBF16), 1e9);                                   // falls back to f32
}

TEST(CostModel, WithACacheModelMissedBytesComeFromMemoryOnTopOfTheRest) {
  DeviceSpec device;
  device.peak_flops = {{DType::kF32, 1e9}};
  device.memory_bandwidth = 1e9;
  device.cache_bytes = 1 << 20;
  device.cache_bandwidth = 4e9;
  device.kernel_overhead_s = 1e-6;
  // All hits: the cache's bandwidth is the roofline's memory side.
  EXPECT_DOUBLE_EQ(rooflineTime({1000, 12000}, DType::kF32, device), 12000 / 4e9 + 1e-6);
  // A compute-bound kernel missing 8000 of its bytes waits for them after computing.
  EXPECT_DOUBLE_EQ(rooflineTime({1e6, 12000}, DType::kF32, device, 1, 8000), 1e6 / 1e9 + 8000 / 1e9 + 1e-6);
  // Efficiency scales the cached part only; misses beyond the kernel's bytes are clamped.
  EXPECT_DOUBLE_EQ(rooflineTime({1000, 12000}, DType::kF32, device, 0.5, 4000), 8000 / 4e9 / 0.5 + 4000 / 1e9 + 1e-6);
  EXPECT_DOUBLE_EQ(rooflineTime({0, 12000}, DType::kF32, device, 1, 1e9), 12000 / 1e9 + 1e-6);
  // Without a cache model the misses change nothing.
  device.cache_bandwidth = 0;
  EXPECT_DOUBLE_EQ(rooflineTime({0, 12000}, DType::kF32, device, 1, 12000), 12000 / 1e9 + 1e-6);
}

TEST(CacheModel, ReusedBuffersHitAndBuffersEvictedSinceTheirLastUseMiss) {
  // One rank whose cache holds 4 chunks. a and b (one chunk each) are used every step; big (8
  // chunks) passes through between their uses once a step.
  PlanBuilder b(1);
  auto place = [&](const std::string& name, int64_t floats, int64_t chunk) {
    int id = b.buffer(0, name, {floats});
    b.rank(0).mutable_buffers(id)->set_offset(chunk * kCacheChunkBytes);
    return id;
  };
  const int64_t chunk_floats = kCacheChunkBytes / 4;
  int a = place("a", chunk_floats, 0);
  int c = place("c", chunk_floats, 1);
  int big = place("big", 8 * chunk_floats, 2);
  int d = place("d", chunk_floats, 10);
  b.kernel(0, "relu", {a}, {c});      // 0: a was used last (by 3); c was evicted by big since 1: misses
  b.kernel(0, "relu", {c}, {d});      // 1: c just used; d used by 3 with only a and c since: hits
  b.kernel(0, "relu", {big}, {big});  // 2: 8 chunks streamed through a cache of 4 (LRU): each was
                                      //    evicted by the others since, so all miss, read and written back
  b.kernel(0, "relu", {d}, {a});      // 3: d and a were evicted by big: both miss
  const double chunk = static_cast<double>(kCacheChunkBytes);
  std::vector<double> missed = cacheMissBytes(b.rank(0), b.program(0), 4 * kCacheChunkBytes);
  ASSERT_EQ(missed.size(), 4u);
  EXPECT_DOUBLE_EQ(missed[0], chunk);
  EXPECT_DOUBLE_EQ(missed[1], 0);
  EXPECT_DOUBLE_EQ(missed[2], 2 * 8 * chunk);
  EXPECT_DOUBLE_EQ(missed[3], 2 * chunk);
  // A cache that holds everything misses nothing in the steady state; no cache model: zeros.
  for (double bytes : cacheMissBytes(b.rank(0), b.program(0), 16 * kCacheChunkBytes)) EXPECT_EQ(bytes, 0);
  for (double bytes : cacheMissBytes(b.rank(0), b.program(0), 0)) EXPECT_EQ(bytes, 0);
}

TEST(CacheModel, SimulatedKernelsPayForTheirMisses) {
  // In-place kernels on a (1 chunk) and big (8 chunks) through a cache of 4 chunks: missed bytes
  // move at memory bandwidth, the rest at the cache's (compute is free here).
  PlanBuilder b(1);
  const int64_t chunk_floats = kCacheChunkBytes / 4;
  int a = b.buffer(0, "a", {chunk_floats});
  int big = b.buffer(0, "big", {8 * chunk_floats});
  b.rank(0).mutable_buffers(big)->set_offset(kCacheChunkBytes);
  b.kernel(0, "relu", {a}, {a});
  b.kernel(0, "relu", {big}, {big});
  ClusterSpec cluster = roundCluster();
  cluster.device.peak_flops = {{DType::kF32, 1e15}};
  cluster.device.memory_bandwidth = 1e9;
  cluster.device.cache_bytes = 4 * kCacheChunkBytes;
  cluster.device.cache_bandwidth = 1e10;
  auto timeline = simulateProgram(b.plan, "train", CostModel(cluster));
  ASSERT_TRUE(timeline.hasValue()) << timeline.status().message();
  const auto& events = timeline->ranks[0].events;
  ASSERT_EQ(events.size(), 2u);
  const double chunk = static_cast<double>(kCacheChunkBytes);
  // a was evicted by big: read and written back from memory.
  EXPECT_NEAR(events[0].duration_s, 2 * chunk / 1e9, 1e-9);
  // big streams 8 chunks through 4 in every step: all miss.
  EXPECT_NEAR(events[1].duration_s, 2 * 8 * chunk / 1e9, 1e-9);
  // With a cache of 16 chunks everything stays: the cache's bandwidth only.
  cluster.device.cache_bytes = 16 * kCacheChunkBytes;
  timeline = simulateProgram(b.plan, "train", CostModel(cluster));
  ASSERT_TRUE(timeline.hasValue()) << timeline.status().message();
  EXPECT_NEAR(timeline->ranks[0].events[1].duration_s, 2 * 8 * chunk / 1e10, 1e-9);
}

TEST(CostModel, CollectiveTrafficFollowsTheAlgorithm) {
  // Ring all-reduce: each rank sends 2(n-1)/n of the buffer.
  EXPECT_DOUBLE_EQ(commBytesPerRank(CommKind::kAllReduce, 2, 1000), 1000);
  EXPECT_DOUBLE_EQ(commBytesPerRank(CommKind::kAllReduce, 4, 1000), 1500);
  EXPECT_DOUBLE_EQ(commBytesPerRank(CommKind::kAllReduce, 8, 1000), 1750);
  // All-gather, reduce-scatter and all-to-all: (n-1)/n of the whole tensor.
  EXPECT_DOUBLE_EQ(commBytesPerRank(CommKind::kAllGather, 4, 1000), 750);
  EXPECT_DOUBLE_EQ(commBytesPerRank(CommKind::kReduceScatter, 4, 1000), 750);
  EXPECT_DOUBLE_EQ(commBytesPerRank(CommKind::kAllToAll, 2, 1000), 500);
  // Point to point moves everything; a group of one moves nothing.
  EXPECT_DOUBLE_EQ(commBytesPerRank(CommKind::kSend, 2, 1000), 1000);
  EXPECT_DOUBLE_EQ(commBytesPerRank(CommKind::kRecv, 2, 1000), 1000);
  EXPECT_DOUBLE_EQ(commBytesPerRank(CommKind::kAllReduce, 1, 1000), 0);

  // Alpha-beta: ring all-reduce over 4 ranks is 2·3 latency steps plus 1.5 × 4 MB at 1 GB/s.
  LinkSpec link{"test", 1e9, 1e-5};
  EXPECT_DOUBLE_EQ(commTime(CommKind::kAllReduce, 4, 4e6, link), 6 * 1e-5 + 6e6 / 1e9);
  EXPECT_DOUBLE_EQ(commTime(CommKind::kAllGather, 4, 4e6, link), 3 * 1e-5 + 3e6 / 1e9);
  EXPECT_DOUBLE_EQ(commTime(CommKind::kSend, 2, 4e6, link), 1e-5 + 4e6 / 1e9);
  EXPECT_DOUBLE_EQ(commTime(CommKind::kAllReduce, 1, 4e6, link), 0);
}

TEST(CostModel, GroupsSpanningHostsUseTheSlowerLink) {
  ClusterSpec cluster = roundCluster(2);
  std::vector<int32_t> same_host = {0, 7}, across = {7, 8};
  EXPECT_EQ(cluster.linkFor(same_host).name, "fast");
  EXPECT_EQ(cluster.linkFor(across).name, "slow");
}

TEST(CostModel, BuiltinCpuLocalAndUnknownNames) {
  auto cluster = builtinCluster("cpu-local");
  ASSERT_TRUE(cluster.hasValue());
  EXPECT_DOUBLE_EQ(cluster->device.peakFlops(DType::kF32), 65e9);
  EXPECT_EQ(cluster->devices_per_host, 2);
  EXPECT_DOUBLE_EQ(cluster->intra_host.bandwidth, 5e9);
  EXPECT_DOUBLE_EQ(cluster->intra_host.latency, 5e-6);
  auto unknown = builtinCluster("dgx-z");
  ASSERT_FALSE(unknown.hasValue());
  EXPECT_NE(unknown.status().message().find("cpu-local"), std::string::npos) << unknown.status().message();
}

TEST(CostModel, GraphNodeTimes) {
  Graph graph;
  ValueId x = *graph.addInput("x", f32({64, 128}));
  ValueId w = *graph.addParam("w", f32({128, 256}), Initializer{});
  ValueId y = (*graph.addNode(OpId::matmul, {x, w}))[0];
  ValueId flat = (*graph.addNode(OpId::reshape, {y}, {{"shape", std::vector<int64_t>{64 * 256}}}))[0];
  (void)*graph.addNode(OpId::all_reduce, {flat}, {{"axis", std::string("dp")}, {"group_size", int64_t{4}}});
  (void)*graph.addNode(OpId::all_reduce, {flat}, {{"axis", std::string("dp")}, {"group_size", int64_t{16}}});
  (void)*graph.addNode(OpId::send, {flat}, {{"peer_stage", int64_t{1}}, {"tag", int64_t{0}}});

  CostModel model(roundCluster(2));
  EXPECT_DOUBLE_EQ(model.nodeTime(graph, 0), 4194304.0 / 1e9);  // matmul: roofline
  EXPECT_DOUBLE_EQ(model.nodeTime(graph, 1), 0);                // reshape: a view
  const double bytes = 64 * 256 * 4;
  // 4 ranks fit in one host; 16 do not.
  EXPECT_DOUBLE_EQ(model.nodeTime(graph, 2), 6 * 1e-6 + 1.5 * bytes / 1e9);
  EXPECT_DOUBLE_EQ(model.nodeTime(graph, 3), 30 * 1e-5 + (2.0 * 15 / 16) * bytes / 1e8);
  // A send between stages crosses hosts when the cluster has several.
  EXPECT_DOUBLE_EQ(model.nodeTime(graph, 4), 1e-5 + bytes / 1e8);
}

// Two ranks each compute, then all-reduce their [8,32] result on stream 1.
// Rank 0's matmul takes 2·8·16·32 = 8192 FLOPs (8.192 us), rank 1's 2·8·64·32 = 32768 (32.768 us).
PlanBuilder computeThenAllReduce() {
  PlanBuilder b(2);
  for (int r = 0; r < 2; ++r) {
    int64_t k = r == 0 ? 16 : 64;
    int x = b.buffer(r, "x", {8, k}, planpb::BUFFER_INPUT);
    int w = b.buffer(r, "w", {k, 32}, planpb::BUFFER_PARAM);
    int y = b.buffer(r, "y", {8, 32});
    int reduced = b.buffer(r, "y.reduced", {8, 32});
    int other = b.buffer(r, "other", {8, 32});
    int after = b.buffer(r, "after", {8, 32});
    b.kernel(r, "matmul", {x, w}, {y});
    b.collective(r, planpb::ALL_REDUCE, {y}, {reduced}, {0, 1});
    b.kernel(r, "relu", {y}, {other});        // independent of the all-reduce: overlaps it
    b.kernel(r, "relu", {reduced}, {after});  // waits for it
  }
  return b;
}

TEST(PlanTimeline, AllReduceStartsWhenTheLastRankArrives) {
  PlanBuilder b = computeThenAllReduce();
  ClusterSpec cluster = roundCluster();
  cluster.device.memory_bandwidth = 1e9;  // relu of 1 KB: 2 KB moved, 2 us
  CostModel model(cluster);
  auto timeline = simulateProgram(b.plan, "train", model);
  ASSERT_TRUE(timeline.hasValue()) << timeline.status().message();

  const double rank0_matmul = 8192 / 1e9, rank1_matmul = 32768 / 1e9;
  const double all_reduce = 2 * 1e-6 + 1024 / 1e9;  // n = 2: 2 latency steps, 2(n-1)/n = 1 × 1 KB
  const double relu = 2048 / 1e9;
  auto event = [&](int rank, int instruction) {
    for (const TimelineEvent& e : timeline->ranks[rank].events)
      if (e.instruction == instruction) return e;
    ADD_FAILURE() << "no event for instruction " << instruction;
    return TimelineEvent{};
  };
  for (int r = 0; r < 2; ++r) {
    EXPECT_DOUBLE_EQ(event(r, 1).start_s, rank1_matmul) << "rank " << r;     // the later arrival
    EXPECT_NEAR(event(r, 1).duration_s, all_reduce, 1e-15) << "rank " << r;  // end - start rounds
    EXPECT_EQ(event(r, 1).stream, 1);
    EXPECT_EQ(event(r, 1).name, "all_reduce 1.0 KB");
    EXPECT_NEAR(event(r, 3).start_s, rank1_matmul + all_reduce, 1e-15) << "rank " << r;
  }
  // The independent relu overlaps the all-reduce on the compute stream.
  EXPECT_DOUBLE_EQ(event(0, 2).start_s, rank0_matmul);
  EXPECT_DOUBLE_EQ(event(1, 2).start_s, rank1_matmul);
  EXPECT_EQ(event(0, 0).name, "matmul y");
  EXPECT_NEAR(timeline->step_time_s, rank1_matmul + all_reduce + relu, 1e-15);
  EXPECT_DOUBLE_EQ(timeline->ranks[0].end_s, timeline->step_time_s);
}

TEST(PlanTimeline, TwoStagePipelineRecvWaitsForTheSend) {
  // Stage 0 computes h and sends it; stage 1 receives it and computes on it.
  PlanBuilder b(2);
  b.rank(1).set_stage(1);
  int x = b.buffer(0, "x", {8, 16}, planpb::BUFFER_INPUT);
  int w0 = b.buffer(0, "w0", {16, 32}, planpb::BUFFER_PARAM);
  int h = b.buffer(0, "h", {8, 32});
  b.kernel(0, "matmul", {x, w0}, {h});
  b.send(0, h, 1, 7);
  int h_in = b.buffer(1, "h", {8, 32});
  int w1 = b.buffer(1, "w1", {32, 32}, planpb::BUFFER_PARAM);
  int out = b.buffer(1, "out", {8, 32}, planpb::BUFFER_OUTPUT);
  b.recv(1, h_in, 0, 7);
  b.kernel(1, "matmul", {h_in, w1}, {out});

  CostModel model(roundCluster());
  auto timeline = simulateProgram(b.plan, "train", model);
  ASSERT_TRUE(timeline.hasValue()) << timeline.status().message();
  const double stage0 = 8192 / 1e9, transfer = 1e-6 + 1024 / 1e9, stage1 = 2.0 * 8 * 32 * 32 / 1e9;
  const auto &sender = timeline->ranks[0].events, &receiver = timeline->ranks[1].events;
  ASSERT_EQ(sender.size(), 2u);
  ASSERT_EQ(receiver.size(), 2u);
  EXPECT_EQ(sender[1].name, "send 1.0 KB to rank 1");
  EXPECT_DOUBLE_EQ(sender[1].start_s, stage0);
  EXPECT_NEAR(sender[1].duration_s, transfer, 1e-15);
  EXPECT_EQ(receiver[0].name, "recv 1.0 KB from rank 0");
  EXPECT_DOUBLE_EQ(receiver[0].start_s, 0);  // posted at once, waits for the data
  EXPECT_NEAR(receiver[0].start_s + receiver[0].duration_s, stage0 + transfer, 1e-15);
  EXPECT_NEAR(receiver[1].start_s, stage0 + transfer, 1e-15);
  EXPECT_NEAR(timeline->step_time_s, stage0 + transfer + stage1, 1e-15);
}

TEST(PlanTimeline, CrossedReceivesDeadlockAndNameWhereEachRankWaits) {
  PlanBuilder b(2);
  for (int r = 0; r < 2; ++r) {
    int in = b.buffer(r, "in", {4});
    int out = b.buffer(r, "out", {4});
    b.recv(r, in, 1 - r, r == 0 ? 1 : 2);  // each waits for the other's send, which comes after
    b.send(r, out, 1 - r, r == 0 ? 2 : 1);
  }
  auto timeline = simulateProgram(b.plan, "train", CostModel(roundCluster()));
  ASSERT_FALSE(timeline.hasValue());
  const std::string& message = timeline.status().message();
  EXPECT_NE(message.find("deadlock"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 0 waits at instruction 0 (recv 16 B from rank 1)"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 1 waits at instruction 0"), std::string::npos) << message;
}

TEST(PlanTimeline, UnmatchedCommunicationIsAnError) {
  PlanBuilder recv_only(2);
  int in = recv_only.buffer(1, "in", {4});
  recv_only.recv(1, in, 0, 3);
  auto timeline = simulateProgram(recv_only.plan, "train", CostModel(roundCluster()));
  ASSERT_FALSE(timeline.hasValue());
  EXPECT_NE(timeline.status().message().find("rank 1: instruction 0 (recv 16 B from rank 0): no matching send"),
            std::string::npos)
      << timeline.status().message();

  PlanBuilder half_collective(2);
  int g = half_collective.buffer(0, "g", {4});
  half_collective.collective(0, planpb::ALL_REDUCE, {g}, {g}, {0, 1});
  timeline = simulateProgram(half_collective.plan, "train", CostModel(roundCluster()));
  ASSERT_FALSE(timeline.hasValue());
  EXPECT_NE(timeline.status().message().find("has no counterpart on rank 1"), std::string::npos)
      << timeline.status().message();
}

TEST(PlanTimeline, DependenciesFollowStorageThroughAliases) {
  // y.view aliases y: reading it depends on the kernel that wrote y.
  PlanBuilder b(1);
  int x = b.buffer(0, "x", {4}, planpb::BUFFER_INPUT);
  int y = b.buffer(0, "y", {4});
  int view = b.buffer(0, "y.view", {2, 2});
  b.rank(0).mutable_buffers(view)->set_alias_of(y);
  int z = b.buffer(0, "z", {2, 2});
  b.kernel(0, "relu", {x}, {y});
  b.kernel(0, "relu", {x}, {x});
  b.kernel(0, "relu", {view}, {z});
  auto dependencies = instructionDependencies(b.rank(0), b.program(0));
  ASSERT_EQ(dependencies.size(), 3u);
  EXPECT_TRUE(dependencies[0].empty());
  EXPECT_TRUE(dependencies[1].empty());
  EXPECT_EQ(dependencies[2], std::vector<int32_t>{0});
}

TEST(ClusterSpecs, BuiltinGpuHostsCarryTheDatasheetFigures) {
  auto a100 = builtinCluster("a100x8");
  ASSERT_TRUE(a100.hasValue()) << a100.status().message();
  EXPECT_DOUBLE_EQ(a100->device.peakFlops(DType::kBF16), 312e12);
  EXPECT_DOUBLE_EQ(a100->device.peakFlops(DType::kF32), 19.5e12);
  EXPECT_DOUBLE_EQ(a100->device.memory_bandwidth, 2.039e12);
  EXPECT_DOUBLE_EQ(a100->intra_host.bandwidth, 300e9);  // NVLink 3: 600 GB/s both ways
  EXPECT_EQ(a100->deviceCount(), 8);

  auto h100 = builtinCluster("h100x8");
  ASSERT_TRUE(h100.hasValue());
  EXPECT_DOUBLE_EQ(h100->device.peakFlops(DType::kBF16), 989e12);
  EXPECT_DOUBLE_EQ(h100->device.peakFlops(DType::kF32), 67e12);
  EXPECT_DOUBLE_EQ(h100->device.memory_bandwidth, 3.35e12);
  EXPECT_EQ(h100->device.memory_bytes, int64_t{80} << 30);
  EXPECT_DOUBLE_EQ(h100->intra_host.bandwidth, 450e9);  // NVLink 4: 900 GB/s both ways
  EXPECT_DOUBLE_EQ(h100->inter_host.bandwidth, 50e9);   // NDR: 400 Gb/s

  auto h200 = builtinCluster("h200x8");
  ASSERT_TRUE(h200.hasValue());
  EXPECT_DOUBLE_EQ(h200->device.memory_bandwidth, 4.8e12);
  EXPECT_EQ(h200->device.memory_bytes, int64_t{141'000'000'000});
  EXPECT_EQ(builtinClusterNames(), (std::vector<std::string>{"cpu-local", "a100x8", "h100x8", "h200x8"}));
}

TEST(ClusterSpecs, MultiHostNamesRepeatAOneHostBuiltin) {
  auto cluster = builtinCluster("h100x8x128");
  ASSERT_TRUE(cluster.hasValue()) << cluster.status().message();
  EXPECT_EQ(cluster->name, "h100x8x128");
  EXPECT_EQ(cluster->hosts, 128);
  EXPECT_EQ(cluster->deviceCount(), 1024);
  std::vector<int32_t> within = {0, 7}, across = {7, 8};
  EXPECT_EQ(cluster->linkFor(within).name, "NVLink 4");
  EXPECT_EQ(cluster->linkFor(across).name, "InfiniBand NDR 400 Gb/s");
  EXPECT_EQ(builtinCluster("a100x8x2")->deviceCount(), 16);

  for (const char* bad : {"h100x8x0", "h100x8xx2", "h100x9x2", "h100x8x"}) {
    auto rejected = builtinCluster(bad);
    EXPECT_FALSE(rejected.hasValue()) << bad;
  }
  EXPECT_NE(builtinCluster("h100x8x0").status().message().find("host count"), std::string::npos);
}

TEST(ClusterSpecs, JsonRoundTripsEveryBuiltin) {
  for (const std::string& name : builtinClusterNames()) {
    ClusterSpec cluster = *builtinCluster(name);
    auto read = clusterFromJson(clusterToJson(cluster), name + ".json");
    ASSERT_TRUE(read.hasValue()) << read.status().message();
    EXPECT_EQ(read->name, cluster.name);
    EXPECT_EQ(read->hosts, cluster.hosts);
    EXPECT_EQ(read->devices_per_host, cluster.devices_per_host);
    EXPECT_EQ(read->device.name, cluster.device.name);
    EXPECT_EQ(read->device.peak_flops, cluster.device.peak_flops);
    EXPECT_DOUBLE_EQ(read->device.memory_bandwidth, cluster.device.memory_bandwidth);
    EXPECT_EQ(read->device.memory_bytes, cluster.device.memory_bytes);
    EXPECT_DOUBLE_EQ(read->device.kernel_overhead_s, cluster.device.kernel_overhead_s);
    EXPECT_EQ(read->intra_host.name, cluster.intra_host.name);
    EXPECT_DOUBLE_EQ(read->intra_host.bandwidth, cluster.intra_host.bandwidth);
    EXPECT_DOUBLE_EQ(read->inter_host.latency, cluster.inter_host.latency);
  }
  ClusterSpec cached = *builtinCluster("cpu-local");
  cached.device.cache_bytes = 16 << 20;
  cached.device.cache_bandwidth = 5e10;
  auto read = clusterFromJson(clusterToJson(cached), "cached.json");
  ASSERT_TRUE(read.hasValue()) << read.status().message();
  EXPECT_EQ(read->device.cache_bytes, 16 << 20);
  EXPECT_DOUBLE_EQ(read->device.cache_bandwidth, 5e10);
}

TEST(ClusterSpecs, JsonErrorsNameTheKey) {
  const std::string good = R"({"name": "lab", "hosts": 2, "devices_per_host": 4,
    "device": {"peak_flops": {"f32": 1e12, "bf16": 8e12}, "memory_bandwidth": 1e12, "memory_bytes": 1e10},
    "intra_host": {"bandwidth": 1e11, "latency": 1e-6}})";
  auto read = clusterFromJson(good, "lab.json");
  ASSERT_TRUE(read.hasValue()) << read.status().message();
  EXPECT_DOUBLE_EQ(read->device.peakFlops(DType::kBF16), 8e12);
  EXPECT_DOUBLE_EQ(read->inter_host.bandwidth, 1e11);  // defaults to the host's link
  EXPECT_EQ(read->deviceCount(), 8);

  auto expectError = [](const std::string& text, const std::string& expected) {
    auto result = clusterFromJson(text, "c.json");
    ASSERT_FALSE(result.hasValue()) << text;
    EXPECT_EQ(result.status().message(), expected);
  };
  expectError("{", "c.json: not valid JSON");
  expectError(R"({"name": "x", "device": {}, "intra_host": {}, "gpus": 8})",
              "c.json: gpus: unknown key (known: name, description, hosts, devices_per_host, device, intra_host, "
              "inter_host)");
  expectError(R"({"name": "x", "device": {"peak_flops": {"fp32": 1}, "memory_bandwidth": 1, "memory_bytes": 1},
                  "intra_host": {"bandwidth": 1, "latency": 0}})",
              "c.json: device.peak_flops.fp32: unknown float dtype (expected f32, f16, bf16 or f64)");
  expectError(R"({"name": "x", "device": {"peak_flops": {"bf16": 1}, "memory_bandwidth": 1, "memory_bytes": 1},
                  "intra_host": {"bandwidth": 1, "latency": 0}})",
              "c.json: device.peak_flops.f32: missing (the figure of every dtype not listed)");
  expectError(R"({"name": "x", "device": {"peak_flops": {"f32": 1}, "memory_bandwidth": "fast", "memory_bytes": 1},
                  "intra_host": {"bandwidth": 1, "latency": 0}})",
              "c.json: device.memory_bandwidth: must be a number");
  expectError(R"({"name": "x", "hosts": 0, "device": {"peak_flops": {"f32": 1}, "memory_bandwidth": 1,
                  "memory_bytes": 1}, "intra_host": {"bandwidth": 1, "latency": 0}})",
              "c.json: hosts: must be an integer in [1, 1048576]");
  expectError(R"({"name": "x", "device": {"peak_flops": {"f32": 1}, "memory_bandwidth": 1, "memory_bytes": 1},
                  "intra_host": {"bandwidth": 0, "latency": 0}})",
              "c.json: intra_host.bandwidth: must be a positive number");
  expectError(R"({"device": {}})", "c.json: name: missing");
  expectError(R"({"name": "x", "device": {"peak_flops": {"f32": 1}, "memory_bandwidth": 1, "memory_bytes": 1,
                  "cache_bytes": 1048576}, "intra_host": {"bandwidth": 1, "latency": 0}})",
              "c.json: device.cache_bytes: and device.cache_bandwidth go together: both above 0, or neither");
}

TEST(ClusterSpecs, LoadClusterTakesANameOrAFile) {
  EXPECT_EQ(loadCluster("h200x8x2")->deviceCount(), 16);
  const std::string path = ::testing::TempDir() + "cleave_cluster_test.json";
  ClusterSpec custom = *builtinCluster("a100x8");
  custom.name = "my-lab";
  custom.hosts = 3;
  {
    std::ofstream file(path);
    file << clusterToJson(custom);
  }
  auto loaded = loadCluster(path);
  ASSERT_TRUE(loaded.hasValue()) << loaded.status().message();
  EXPECT_EQ(loaded->name, "my-lab");
  EXPECT_EQ(loaded->deviceCount(), 24);
  std::remove(path.c_str());
  auto missing = loadCluster("/nonexistent/cluster.json");
  ASSERT_FALSE(missing.hasValue());
  EXPECT_NE(missing.status().message().find("cannot read cluster spec '/nonexistent/cluster.json'"), std::string::npos);
}

TEST(PlanPrediction, ThroughputFlopsAndMfuFollowTheSimulatedStep) {
  PlanBuilder b = computeThenAllReduce();
  b.plan.set_global_batch(16);
  ClusterSpec cluster = roundCluster();
  cluster.device.memory_bytes = 1 << 20;
  b.rank(0).mutable_programs(0)->set_peak_bytes(4096);
  b.rank(1).mutable_programs(0)->set_peak_bytes(2 << 20);  // over the 1 MiB device
  auto prediction = predictPlan(b.plan, CostModel(cluster));
  ASSERT_TRUE(prediction.hasValue()) << prediction.status().message();
  EXPECT_EQ(prediction->program, "train");
  EXPECT_DOUBLE_EQ(prediction->step_time_s, prediction->timeline.step_time_s);
  EXPECT_DOUBLE_EQ(prediction->samples_per_s, 16 / prediction->step_time_s);
  // Matmuls 8192 + 32768 FLOPs, and two relus of [8,32] per rank by the op table's cost rule.
  std::vector<TensorType> relu_types = {f32({8, 32})};
  const OpCost relu = CostModel::kernelCost(opDef(OpId::relu), relu_types, relu_types, AttrMap{});
  EXPECT_DOUBLE_EQ(prediction->model_flops, 8192 + 32768 + 4 * relu.flops);
  EXPECT_DOUBLE_EQ(prediction->peak_flops_per_device, 1e9);
  EXPECT_DOUBLE_EQ(prediction->mfu, prediction->model_flops / prediction->step_time_s / (2 * 1e9));
  ASSERT_EQ(prediction->ranks.size(), 2u);
  EXPECT_EQ(prediction->ranks[1].peak_memory_bytes, 2 << 20);
  EXPECT_EQ(prediction->max_memory_bytes, 2 << 20);
  EXPECT_FALSE(prediction->fits_memory);
  // Rank 1's compute stream: its matmul and two relus.
  const CostModel model(cluster);
  std::vector<TensorType> operands = {f32({8, 64}), f32({64, 32})}, results = {f32({8, 32})};
  const double busy = model.kernelTime(opDef(OpId::matmul), operands, results, AttrMap{}) +
                      2 * model.kernelTime(opDef(OpId::relu), relu_types, relu_types, AttrMap{});
  EXPECT_NEAR(prediction->ranks[1].busy_s, busy, 1e-15);
}

}  // namespace
}  // namespace cleave
