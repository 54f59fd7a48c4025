// Unit tests of held layouts (ir/held_layout.h): grouped shapes and the copies between a held
// tensor and the model's.
#include "ir/held_layout.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

namespace cleave {
namespace {

std::vector<float> iota(size_t n) {
  std::vector<float> values(n);
  std::iota(values.begin(), values.end(), 1.0f);
  return values;
}

// Phi-3's qkv_proj read transposed, [q 4 rows, k 2, v 2] x 2 inputs, in 2 groups: group g holds
// rows block g of q, of k and of v.
TEST(HeldLayout, GroupsHoldABlockOfEveryPart) {
  const HeldLayout layout{{8, 2}, {4, 2, 2}, 0};
  auto held_shape = groupedShape(layout, 2);
  ASSERT_TRUE(held_shape.hasValue()) << held_shape.status().message();
  EXPECT_EQ(*held_shape, (Shape{2, 4, 2}));
  const std::vector<float> model = iota(16);
  std::vector<float> held(16), back(16);
  modelToHeldOrder(layout, *held_shape, reinterpret_cast<const uint8_t*>(model.data()),
                   reinterpret_cast<uint8_t*>(held.data()), sizeof(float));
  EXPECT_EQ(held, (std::vector<float>{1, 2, 3, 4, 9, 10, 13, 14, 5, 6, 7, 8, 11, 12, 15, 16}));
  heldToModelOrder(layout, *held_shape, reinterpret_cast<const uint8_t*>(held.data()),
                   reinterpret_cast<uint8_t*>(back.data()), sizeof(float));
  EXPECT_EQ(back, model);
}

// Along the last dim of [in, width] (GPT-2's Conv1D layout), with dims before and after it in a
// 3-D model, the copies invert each other for every group count dividing the parts.
TEST(HeldLayout, CopiesInvertEachOtherAlongAnyDim) {
  for (int64_t axis : {0, 1, 2}) {
    Shape model_shape = {3, 5, 2};
    model_shape[static_cast<size_t>(axis)] = 24;
    const HeldLayout layout{model_shape, {12, 8, 4}, axis};
    for (int64_t groups : {1, 2, 4}) {
      auto held_shape = groupedShape(layout, groups);
      ASSERT_TRUE(held_shape.hasValue()) << held_shape.status().message();
      EXPECT_TRUE(checkHeldShape(layout, *held_shape).isOk());
      const size_t n = static_cast<size_t>(TensorType{DType::kF32, model_shape}.numel());
      const std::vector<float> model = iota(n);
      std::vector<float> held(n), back(n);
      modelToHeldOrder(layout, *held_shape, reinterpret_cast<const uint8_t*>(model.data()),
                       reinterpret_cast<uint8_t*>(held.data()), sizeof(float));
      if (groups > 1) EXPECT_NE(held, model) << "axis " << axis << ", " << groups << " groups";
      heldToModelOrder(layout, *held_shape, reinterpret_cast<const uint8_t*>(held.data()),
                       reinterpret_cast<uint8_t*>(back.data()), sizeof(float));
      EXPECT_EQ(back, model) << "axis " << axis << ", " << groups << " groups";
    }
  }
}

TEST(HeldLayout, BadLayoutsAreErrors) {
  EXPECT_FALSE(groupedShape(HeldLayout{{8, 2}, {4, 2, 2}, 0}, 4).hasValue());  // 2 rows in 4 groups
  EXPECT_FALSE(groupedShape(HeldLayout{{8, 2}, {4, 2}, 0}, 2).hasValue());     // parts add up to 6
  EXPECT_FALSE(groupedShape(HeldLayout{{8, 2}, {4, 4}, 2}, 2).hasValue());     // no dim 2
  EXPECT_FALSE(checkHeldShape(HeldLayout{{8, 2}, {4, 2, 2}, 0}, Shape{2, 2, 4}).isOk());
  EXPECT_TRUE(checkHeldShape(HeldLayout{{8, 2}, {}, 0}, Shape{2, 4, 2}).isOk());  // a reshape
  EXPECT_FALSE(checkHeldShape(HeldLayout{{8, 2}, {}, 0}, Shape{3, 5}).isOk());
}

}  // namespace
}  // namespace cleave
