// Unit tests of SPMD plans (ir/shared_programs.h): data-parallel replicas name one program, and
// the programs derived for them are exactly those lowered for each rank on its own.
#include "ir/shared_programs.h"

#include <gtest/gtest.h>

#include <google/protobuf/util/message_differencer.h>

#include <string>

#include "analysis/cluster_json.h"
#include "analysis/plan_prediction.h"
#include "frontend/model_generators.h"
#include "ir/plan.h"
#include "ir/plan.pb.h"
#include "passes/core/compile_pipeline.h"
#include "temp_dir.h"

namespace cleave {
namespace {

struct Split {
  const char* name;
  const char* model;  // "gpt" or "mlp"
  int dp, tp, pp, microbatches;
  const char* schedule;
  int zero = 0;
  double clip_grad_norm = 0;
  int programs = 0;  // rank programs the shared plan holds (0: one per stage)
};

std::ostream& operator<<(std::ostream& out, const Split& split) { return out << split.name; }

Graph model(const Split& split) {
  if (std::string(split.model) == "gpt") {
    GptSpec spec;
    spec.layers = 2;
    spec.hidden = 32;
    spec.heads = 2;
    spec.seq = 8;
    spec.vocab = 40;
    spec.batch = 16;
    return *generateGpt(spec);
  }
  MlpSpec spec;
  spec.input = 12;
  spec.hidden = {16, 16};
  spec.classes = 4;
  spec.batch = 24;
  return *generateMlp(spec);
}

planpb::Plan compile(const Split& split, bool share) {
  CompileOptions options;
  options.model_file = split.model;
  options.train = true;
  options.training.optimizer.momentum = 0.9;
  options.dp = split.dp;
  options.tp = split.tp;
  options.pp = split.pp;
  options.microbatches = split.microbatches;
  options.schedule = split.schedule;
  options.zero = split.zero;
  options.training.clip_grad_norm = split.clip_grad_norm;
  options.share_programs = share;
  auto plan = compileModel(model(split), options);
  EXPECT_TRUE(plan) << plan.status().message();
  return plan ? std::move(*plan) : planpb::Plan{};
}

class SharedPrograms : public ::testing::TestWithParam<Split> {};

TEST_P(SharedPrograms, DerivedRanksAreTheRanksLoweredOnTheirOwn) {
  const Split split = GetParam();
  const planpb::Plan own = compile(split, false);
  planpb::Plan shared = compile(split, true);
  ASSERT_EQ(shared.ranks_size(), own.ranks_size());

  // One program per stage (per tp index too, with clipping); every other rank names it.
  int holding = 0;
  for (const planpb::RankPlan& rank : shared.ranks()) {
    holding += isSharedRank(rank) ? 0 : 1;
    if (!isSharedRank(rank)) EXPECT_EQ(rank.dp_index(), 0) << "rank " << rank.rank();
  }
  const int programs = split.programs > 0 ? split.programs : split.pp;
  EXPECT_EQ(holding, programs);
  EXPECT_LT(shared.ByteSizeLong() * split.dp * split.tp * split.pp / programs, own.ByteSizeLong() * 11 / 10);

  ASSERT_TRUE(validatePlan(shared).isOk()) << validatePlan(shared).message();
  ASSERT_TRUE(expandSharedPrograms(shared).isOk());
  for (int r = 0; r < own.ranks_size(); ++r) {
    planpb::RankPlan derived = shared.ranks(r);
    derived.clear_same_program_as();
    std::string differences;
    google::protobuf::util::MessageDifferencer differ;
    differ.ReportDifferencesToString(&differences);
    EXPECT_TRUE(differ.Compare(own.ranks(r), derived)) << "rank " << r << ":\n" << differences.substr(0, 2000);
  }
}

INSTANTIATE_TEST_SUITE_P(Splits, SharedPrograms,
                         ::testing::Values(Split{"mlp_dp4", "mlp", 4, 1, 1, 1, "1f1b"},
                                           Split{"gpt_dp4", "gpt", 4, 1, 1, 1, "1f1b"},
                                           Split{"gpt_dp2_tp2", "gpt", 2, 2, 1, 1, "1f1b"},
                                           Split{"gpt_dp2_pp2_m2_gpipe", "gpt", 2, 1, 2, 2, "gpipe"},
                                           Split{"gpt_dp2_tp2_pp2_m4", "gpt", 2, 2, 2, 4, "1f1b"},
                                           Split{"mlp_dp3_pp2_m2", "mlp", 3, 1, 2, 2, "1f1b"},
                                           Split{"mlp_tp4", "mlp", 1, 4, 1, 1, "1f1b"},
                                           Split{"gpt_dp2_zero1", "gpt", 2, 1, 1, 1, "1f1b", 1},
                                           Split{"gpt_dp2_tp2_zero1", "gpt", 2, 2, 1, 1, "1f1b", 1},
                                           Split{"gpt_dp2_tp2_pp2_m2_zero1", "gpt", 2, 2, 2, 2, "1f1b", 1},
                                           Split{"mlp_dp2_tp2_clip", "mlp", 2, 2, 1, 1, "1f1b", 0, 1.0, 2},
                                           Split{"gpt_dp2_tp2_zero1_clip", "gpt", 2, 2, 1, 1, "1f1b", 1, 1.0, 2},
                                           Split{"gpt_dp4_m2_zero2", "gpt", 4, 1, 1, 2, "1f1b", 2},
                                           Split{"gpt_dp2_tp2_pp2_m4_zero2", "gpt", 2, 2, 2, 4, "1f1b", 2},
                                           Split{"gpt_dp4_zero3", "gpt", 4, 1, 1, 1, "1f1b", 3},
                                           Split{"gpt_dp2_tp2_pp2_m4_zero3", "gpt", 2, 2, 2, 4, "gpipe", 3},
                                           Split{"mlp_dp3_pp2_m2_zero3", "mlp", 3, 1, 2, 2, "1f1b", 3}),
                         [](const auto& info) { return std::string(info.param.name); });

// The simulation of a plan kept shared (inspect, simulate) predicts what that of its derived plan
// does: replicas mirror the rank whose programs they run.
TEST_P(SharedPrograms, TheSimulationOfSharedProgramsIsThatOfTheDerivedPlan) {
  const Split split = GetParam();
  planpb::Plan shared = compile(split, true);
  planpb::Plan derived = shared;
  ASSERT_TRUE(expandSharedPrograms(derived).isOk());
  auto cluster = loadCluster("h100x8");
  ASSERT_TRUE(cluster) << cluster.status().message();
  const CostModel model(*cluster);
  auto kept = predictPlan(shared, model);
  auto full = predictPlan(derived, model);
  ASSERT_TRUE(kept) << kept.status().message();
  ASSERT_TRUE(full) << full.status().message();
  EXPECT_DOUBLE_EQ(kept->step_time_s, full->step_time_s);
  EXPECT_DOUBLE_EQ(kept->model_flops, full->model_flops);
  EXPECT_DOUBLE_EQ(kept->mfu, full->mfu);
  EXPECT_EQ(kept->max_memory_bytes, full->max_memory_bytes);
  ASSERT_EQ(kept->ranks.size(), full->ranks.size());
  for (size_t r = 0; r < full->ranks.size(); ++r) {
    EXPECT_EQ(kept->ranks[r].rank, full->ranks[r].rank);
    EXPECT_DOUBLE_EQ(kept->ranks[r].end_s, full->ranks[r].end_s) << "rank " << r;
    EXPECT_DOUBLE_EQ(kept->ranks[r].busy_s, full->ranks[r].busy_s) << "rank " << r;
    EXPECT_EQ(kept->ranks[r].peak_memory_bytes, full->ranks[r].peak_memory_bytes) << "rank " << r;
  }
}

TEST(SharedProgramsFile, APlanFileHoldsOneCopyAndItsReaderDerivesTheRest) {
  const Split split{"gpt_dp4_tp2", "gpt", 4, 2, 1, 1, "1f1b"};
  const planpb::Plan own = compile(split, false);
  const planpb::Plan shared = compile(split, true);
  test::TempDir dir;
  ASSERT_TRUE(writePlanFile(shared, dir.file("p.cplan")).isOk());
  auto read = readPlanFile(dir.file("p.cplan"));
  ASSERT_TRUE(read) << read.status().message();
  for (int r = 0; r < own.ranks_size(); ++r) {
    const planpb::RankPlan& rank = (*read)->ranks(r);
    EXPECT_FALSE(isSharedRank(rank));
    EXPECT_EQ(rank.programs(0).instructions_size(), own.ranks(r).programs(0).instructions_size());
    EXPECT_EQ(rank.has_same_program_as(), r >= 1) << "rank " << r;  // rank 0 holds the one program
  }
  auto kept = readPlanFile(dir.file("p.cplan"), SharedRanks::kKeep);
  ASSERT_TRUE(kept) << kept.status().message();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(**kept, shared));
}

// A plan with ranks 0..3 at dp 0..3 (one stage, tp 1), ranks 1..3 naming rank 0.
planpb::Plan sharedDp4() { return compile(Split{"mlp_dp4", "mlp", 4, 1, 1, 1, "1f1b"}, true); }

void expectInvalid(const planpb::Plan& plan, const std::string& fragment) {
  Status status = validatePlan(plan);
  ASSERT_FALSE(status.isOk()) << "expected: " << fragment;
  EXPECT_EQ(status.kind(), ErrorKind::kBadInput);
  EXPECT_NE(status.message().find(fragment), std::string::npos) << status.message();
}

TEST(SharedProgramsValidation, BadReferencesAreRejectedNamingTheRank) {
  planpb::Plan plan = sharedDp4();
  ASSERT_TRUE(validatePlan(plan).isOk());

  planpb::Plan itself = plan;
  itself.mutable_ranks(2)->set_same_program_as(2);
  expectInvalid(itself, "rank 2: same_program_as names rank 2, itself");

  planpb::Plan missing = plan;
  missing.mutable_ranks(2)->set_same_program_as(9);
  expectInvalid(missing, "rank 2: same_program_as names rank 9, which the plan lacks");

  planpb::Plan chained = plan;
  chained.mutable_ranks(2)->set_same_program_as(1);
  expectInvalid(chained, "rank 2: same_program_as names rank 1, which runs another rank's programs itself");

  planpb::Plan twice = plan;
  twice.mutable_ranks(3)->set_dp_index(1);
  expectInvalid(twice, "rank 3: has the coordinates (dp 1, tp 0, stage 0) of rank 1 too");

  planpb::Plan outside = plan;
  outside.mutable_ranks(3)->set_stage(1);
  expectInvalid(outside, "rank 3: coordinates (dp 3, tp 0, stage 1) lie outside the dp 4 x tp 1 x pp 1 mesh");

  planpb::Plan half = plan;
  *half.mutable_ranks(3)->add_buffers() = plan.ranks(0).buffers(0);
  expectInvalid(half, "rank 3: holds buffers or parameters but runs the programs of rank 0");
}

TEST(SharedProgramsValidation, BlocksFromCoordinatesMustFitTheirTensorAndBeSlices) {
  planpb::Plan plan = compile(Split{"gpt_dp2_tp2_zero1", "gpt", 2, 2, 1, 1, "1f1b", 1}, true);
  ASSERT_TRUE(validatePlan(plan).isOk());
  planpb::RankPlan& rank = *plan.mutable_ranks(0);

  planpb::Plan bad_step = plan;
  planpb::Parameter* split = nullptr;
  for (planpb::Parameter& param : *bad_step.mutable_ranks(0)->mutable_parameters())
    if (param.shard_steps_size() > 0 && !split) split = &param;
  ASSERT_NE(split, nullptr) << "no parameter of the tp 2 plan is split";
  split->mutable_shard_steps(0)->set_dim(7);
  expectInvalid(bad_step, "parameter '" + split->name() + "': a shard step along dim 7 over axis '");

  planpb::Plan bad_axis = plan;
  for (planpb::Instruction& instruction : *bad_axis.mutable_ranks(0)->mutable_programs(0)->mutable_instructions())
    if (instruction.kind() == planpb::KERNEL && instruction.op() != "slice") {
      instruction.set_shard_axis("tp");
      break;
    }
  expectInvalid(bad_axis, "a block over axis 'tp' must be a slice, over dp or tp");

  // The blocks a shared rank derives: dp 1 of a zero-sharded state starts one block further.
  int slices = 0;
  for (const planpb::Instruction& instruction : rank.programs(0).instructions())
    slices += instruction.shard_axis().empty() ? 0 : 1;
  EXPECT_GT(slices, 0) << "the plan has no slice of a rank's block";
  auto derived = derivedRankPlan(plan, 3);  // dp 1, tp 1
  ASSERT_TRUE(derived) << derived.status().message();
  for (int p = 0; p < rank.parameters_size(); ++p) {
    const planpb::Parameter& mine = derived->parameters(p);
    for (int d = 0; d < mine.shard_offset_size(); ++d) {
      int64_t expected = rank.parameters(p).shard_offset(d);
      for (const planpb::ShardStep& step : mine.shard_steps())
        if (step.dim() == d) expected += step.step();  // index 1 on both dp and tp
      EXPECT_EQ(mine.shard_offset(d), expected) << mine.name() << " dim " << d;
    }
  }
}

TEST(SharedProgramsValidation, AnotherStageIsNotARankToShareWith) {
  planpb::Plan plan = compile(Split{"mlp_dp2_pp2", "mlp", 2, 1, 2, 2, "1f1b"}, true);
  int at_stage_1 = -1, shared_at_stage_0 = -1;
  for (const planpb::RankPlan& rank : plan.ranks()) {
    if (rank.stage() == 1 && !isSharedRank(rank)) at_stage_1 = rank.rank();
    if (rank.stage() == 0 && isSharedRank(rank)) shared_at_stage_0 = rank.rank();
  }
  ASSERT_GE(at_stage_1, 0);
  ASSERT_GE(shared_at_stage_0, 0);
  plan.mutable_ranks(shared_at_stage_0)->set_same_program_as(at_stage_1);
  expectInvalid(plan, "rank " + std::to_string(shared_at_stage_0) + ": runs the programs of rank " +
                          std::to_string(at_stage_1) + " at (dp 0, tp 0, stage 1), another stage");
}

TEST(SharedProgramsValidation, ABatchOffsetOffTheRuleIsRejectedWhenDerived) {
  planpb::Plan plan = sharedDp4();
  bool changed = false;
  for (planpb::NamedBuffer& input : *plan.mutable_ranks(0)->mutable_programs(0)->mutable_inputs())
    if (input.batch_split()) input.set_batch_offset(3), changed = true;
  ASSERT_TRUE(changed) << "the plan has no batch-split input";
  Status status = expandSharedPrograms(plan);
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("starts at row 3, not at dp_index * rows = 0"), std::string::npos)
      << status.message();
}

}  // namespace
}  // namespace cleave
