// Loss heads: attach a training loss (and the input it compares against) to a model's output.
#pragma once

#include <string_view>

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// The losses `cleave compile --train --loss` offers.
enum class LossKind { kSoftmaxCrossEntropy, kMse };

// Names the loss head gives what it adds (data loaders and plan lowering rely on them).
inline constexpr std::string_view kLabelsInputName = "labels";    // softmax_cross_entropy's class labels
inline constexpr std::string_view kTargetsInputName = "targets";  // mse's targets
inline constexpr std::string_view kLossValueName = "loss";

// Parses "softmax_cross_entropy" or "mse"; anything else is a usage error listing both.
Expected<LossKind> parseLossKind(std::string_view text);
// The op name of `kind` ("softmax_cross_entropy", "mse").
std::string_view lossKindName(LossKind kind);

// Attaches a loss to the model output named `output_name` (empty: the model's only float output):
// softmax_cross_entropy adds the input `labels` (i64, the output's shape without its last dim), mse
// adds the input `targets` (the output's type). The loss, named `loss`, becomes the only graph output.
// Errors: no such output, several float outputs and none chosen, or a name already taken.
Expected<ValueId> attachLoss(Graph& graph, LossKind kind, std::string_view output_name = {});

}  // namespace cleave
