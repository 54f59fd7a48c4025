// DataSource: batches for a program's named inputs from Fashion-MNIST, .npy files, or seeded noise.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/status.h"
#include "runtime/exec/executor.h"

namespace cleave::runtime {

// Which part of a data set a source reads, and how: training batches are shuffled (Fashion-MNIST)
// and the last partial batch of an epoch is dropped; evaluation batches are in order and the last
// one is padded (only its real rows count).
enum class DataSplit { kTrain, kEval };

// Where a source is: the next batch it will produce. Saved in checkpoints and restored exactly.
struct DataPosition {
  int64_t epoch = 0;
  int64_t batch = 0;  // index within the epoch
  bool operator==(const DataPosition&) const = default;
};

// How to open a source.
struct DataSourceOptions {
  DataSplit split = DataSplit::kTrain;
  uint64_t seed = 0;         // shuffling and synthetic values
  std::string labels_input;  // the input that takes class labels (Fashion-MNIST); empty: none
};

// Fills a program's inputs batch after batch. The global batch size is each input's dim 0.
class DataSource {
 public:
  virtual ~DataSource() = default;
  // What the source reads, e.g. "fashion-mnist train split (60000 images) from /usr/share/...".
  virtual std::string description() const = 0;
  // Batches in one epoch; 0 for an endless source.
  virtual int64_t batchesPerEpoch() const = 0;
  // Writes the batch at position() into the inputs and advances to the next batch (the next epoch
  // after the last). Returns how many rows are real: the batch size, or fewer in the padded last
  // batch of an evaluation split.
  virtual Expected<int64_t> next() = 0;

  // The next batch next() will produce.
  DataPosition position() const { return position_; }
  // Moves to `position`; kBadInput when the batch index is past the epoch's end.
  Status seek(DataPosition position);

 protected:
  // Moves position_ one batch on.
  void advance();
  DataPosition position_;
};

// Opens the source `spec` for `inputs` (views of host memory, written by next(): a GlobalBatch's
// inputs, which stage batches in host memory for devices the host cannot access):
//   fashion-mnist[:DIR]  the IDX files in DIR (default /usr/share/datasets/fashion-mnist): images
//                        as f32 pixel/255 into the one non-label input, labels into the labels input;
//   npy:DIR              DIR/<input-name>.npy for every input, consecutive rows along dim 0;
//   synthetic            float inputs standard normal, integer inputs uniform in [0, value_limit).
// Errors name the spec, file and input at fault.
Expected<std::unique_ptr<DataSource>> openDataSource(std::string_view spec, std::span<const NamedTensor> inputs,
                                                     const DataSourceOptions& options);

}  // namespace cleave::runtime
