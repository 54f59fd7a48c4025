// Plans: reading, writing and checking .cplan files (the schema is ir/plan.proto).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ir/attribute.h"
#include "ir/held_layout.h"
#include "ir/status.h"
#include "ir/tensor_type.h"

namespace cleave {
namespace planpb {
class Plan;
class TensorType;
class Attribute;
class Parameter;
}  // namespace planpb

// The .cplan format version this build writes and reads.
constexpr uint32_t kPlanFormatVersion = 1;

// What readPlanFile does with ranks that run another rank's programs (RankPlan.same_program_as).
enum class SharedRanks {
  kDerive,  // give each its own copy (ir/shared_programs.h): every rank holds its programs
  kKeep,    // leave them as the file has them (inspect and simulate, which read the shared ones)
};

// Reads a .cplan file and validates it; errors name the file (kBadInput).
Expected<std::unique_ptr<planpb::Plan>> readPlanFile(const std::string& path,
                                                     SharedRanks shared = SharedRanks::kDerive);
// Writes a plan atomically (temporary file, fsync, rename); errors name the file.
Status writePlanFile(const planpb::Plan& plan, const std::string& path);
// Checks a plan is self-consistent: version, buffer ids, offsets within arenas, known ops, types.
Status validatePlan(const planpb::Plan& plan);

// Conversions between ir types and their protobuf form.
void toProto(const TensorType& type, planpb::TensorType* out);
Expected<TensorType> fromProto(const planpb::TensorType& type);
void toProto(const Attribute& attr, planpb::Attribute* out);
Expected<Attribute> fromProto(const planpb::Attribute& attr);
// A parameter's held layout (Param::model) in the plan: model_shape, model_parts and model_part_axis.
void toProto(const HeldLayout& layout, planpb::Parameter* out);
HeldLayout heldLayoutOf(const planpb::Parameter& param);

}  // namespace cleave
