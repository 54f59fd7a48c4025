// DataSource: batches for a program's named inputs from Fashion-MNIST, .npy files, or seeded noise.
#include "runtime/io/data_source.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <optional>

#include "runtime/device/element_access.h"
#include "runtime/io/idx.h"
#include "runtime/io/npy.h"
#include "runtime/train/random.h"

namespace cleave::runtime {
namespace {

constexpr const char* kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";
constexpr int64_t kImagePixels = 28 * 28;

// The global batch size: dim 0, shared by every input; errors name the input at fault.
Expected<int64_t> batchSizeOf(std::span<const NamedTensor> inputs, const std::string& source) {
  if (inputs.empty()) return Status::badInput(source + ": the program has no inputs to fill");
  int64_t batch = -1;
  for (const auto& input : inputs) {
    if (input.view.type.rank() == 0)
      return Status::badInput(source + ": input '" + input.name + "' is a scalar (" + input.view.type.str() +
                              "); batches are taken along dim 0");
    int64_t rows = input.view.type.shape[0];
    if (batch >= 0 && rows != batch)
      return Status::badInput(source + ": inputs '" + inputs[0].name + "' and '" + input.name +
                              "' have different batch sizes (" + std::to_string(batch) + " and " +
                              std::to_string(rows) + ")");
    batch = rows;
  }
  if (batch <= 0) return Status::badInput(source + ": the batch size (dim 0 of the inputs) is 0");
  return batch;
}

// Checks that every value of a data file an integer input reads lies in [0, input.value_limit) when
// the plan knows the limit (class labels, token ids); the error names the file and its row, as
// `row_name` calls rows ("row", "image").
Status checkValueLimit(const NamedTensor& input, DType dtype, const void* data, int64_t count, int64_t per_row,
                       const std::string& path, const std::string& row_name) {
  if (input.value_limit <= 0 || !isInteger(input.view.type.dtype)) return Status::ok();
  for (int64_t i = 0; i < count; ++i) {
    double value = loadElement(dtype, data, i);
    if (value >= 0 && value < static_cast<double>(input.value_limit)) continue;
    std::string element = per_row == 1 ? "" : " (element " + std::to_string(i % per_row) + " of the row)";
    return Status::badInput("'" + path + "': " + row_name + " " + std::to_string(i / per_row) + " holds " +
                            std::to_string(static_cast<int64_t>(value)) + element + ", outside [0, " +
                            std::to_string(input.value_limit) + ") for input '" + input.name + "'");
  }
  return Status::ok();
}

// ---- fashion-mnist ----

class FashionMnistSource final : public DataSource {
 public:
  static Expected<std::unique_ptr<DataSource>> open(const std::string& dir, std::span<const NamedTensor> inputs,
                                                    const DataSourceOptions& options);

  std::string description() const override {
    return std::string("fashion-mnist ") + (split_ == DataSplit::kTrain ? "train" : "test") + " split (" +
           std::to_string(count_) + " images) from " + dir_;
  }
  int64_t batchesPerEpoch() const override {
    return split_ == DataSplit::kTrain ? count_ / batch_ : (count_ + batch_ - 1) / batch_;
  }
  Expected<int64_t> next() override;

 private:
  // The sample at row `row` of the current batch (padding rows of an evaluation batch wrap around).
  int64_t sampleAt(int64_t row);

  std::string dir_;
  DataSplit split_ = DataSplit::kTrain;
  uint64_t seed_ = 0;
  int64_t batch_ = 0;
  int64_t count_ = 0;
  IdxArray images_;
  IdxArray labels_;
  NamedTensor image_input_;
  std::optional<NamedTensor> label_input_;
  std::vector<int64_t> order_;  // the training split's permutation for order_epoch_
  int64_t order_epoch_ = -1;
};

// The path of an IDX file: the .gz one, or an uncompressed one when only that exists.
std::string idxPath(const std::string& dir, const std::string& stem) {
  std::string gz = (std::filesystem::path(dir) / (stem + ".gz")).string();
  std::string plain = (std::filesystem::path(dir) / stem).string();
  std::error_code ec;
  return !std::filesystem::exists(gz, ec) && std::filesystem::exists(plain, ec) ? plain : gz;
}

// Steps: bind the inputs (one image input, optionally one label input), read the IDX files, check them.
Expected<std::unique_ptr<DataSource>> FashionMnistSource::open(const std::string& dir,
                                                               std::span<const NamedTensor> inputs,
                                                               const DataSourceOptions& options) {
  auto source = std::make_unique<FashionMnistSource>();
  source->dir_ = dir;
  source->split_ = options.split;
  source->seed_ = options.seed;
  const std::string where = "--data fashion-mnist";
  CLEAVE_ASSIGN_OR_RETURN(source->batch_, batchSizeOf(inputs, where));

  // 1. Inputs: the labels input (if the program has it) takes labels; exactly one other input takes images.
  std::vector<const NamedTensor*> image_inputs;
  for (const auto& input : inputs) {
    const TensorType& type = input.view.type;
    int64_t per_row = type.numel() / type.shape[0];
    if (!options.labels_input.empty() && input.name == options.labels_input) {
      if (!isInteger(type.dtype) || per_row != 1)
        return Status::badInput(where + ": labels input '" + input.name + "' is " + type.str() +
                                "; class labels need an integer [batch] input");
      source->label_input_ = input;
      continue;
    }
    if (!isFloat(type.dtype) || per_row != kImagePixels)
      return Status::badInput(where + ": input '" + input.name + "' is " + type.str() +
                              "; images need a float input of 784 (1x28x28) values per row");
    image_inputs.push_back(&input);
  }
  if (image_inputs.size() != 1)
    return Status::badInput(where + ": the program needs exactly one image input, it has " +
                            std::to_string(image_inputs.size()));
  source->image_input_ = *image_inputs[0];

  // 2. The IDX files of the split.
  std::string prefix = options.split == DataSplit::kTrain ? "train" : "t10k";
  std::string images_path = idxPath(dir, prefix + "-images-idx3-ubyte");
  std::string labels_path = idxPath(dir, prefix + "-labels-idx1-ubyte");
  CLEAVE_ASSIGN_OR_RETURN(source->images_, readIdx(images_path));
  CLEAVE_ASSIGN_OR_RETURN(source->labels_, readIdx(labels_path));
  const Shape& dims = source->images_.dims;
  if (dims.size() != 3 || dims[1] * dims[2] != kImagePixels)
    return Status::badInput("'" + images_path + "' holds " + shapeStr(dims) + ", expected [count,28,28] images");
  if (source->labels_.dims.size() != 1 || source->labels_.dims[0] != dims[0])
    return Status::badInput("'" + labels_path + "' holds " + shapeStr(source->labels_.dims) + ", expected [" +
                            std::to_string(dims[0]) + "] labels for the images of '" + images_path + "'");
  if (source->label_input_)
    CLEAVE_TRY(checkValueLimit(*source->label_input_, DType::kU8, source->labels_.data.data(), dims[0], 1, labels_path,
                               "label of image"));
  source->count_ = dims[0];
  if (source->count_ == 0) return Status::badInput("'" + images_path + "' holds no images");
  if (options.split == DataSplit::kTrain && source->count_ < source->batch_)
    return Status::badInput(where + ": the batch size " + std::to_string(source->batch_) + " exceeds the " +
                            std::to_string(source->count_) + " training images");
  return std::unique_ptr<DataSource>(std::move(source));
}

int64_t FashionMnistSource::sampleAt(int64_t row) {
  int64_t slot = position_.batch * batch_ + row;
  if (split_ == DataSplit::kEval) return slot % count_;  // padding rows repeat the first samples
  // A fresh permutation per epoch, from (seed, epoch) only, so a restored position sees the same one.
  if (order_epoch_ != position_.epoch) {
    order_.resize(static_cast<size_t>(count_));
    std::iota(order_.begin(), order_.end(), int64_t{0});
    Random random(mixSeed({seed_, static_cast<uint64_t>(position_.epoch), 0x5348554646ull}));
    for (int64_t i = count_ - 1; i > 0; --i)  // Fisher–Yates
      std::swap(order_[i], order_[random.below(static_cast<uint64_t>(i) + 1)]);
    order_epoch_ = position_.epoch;
  }
  return order_[slot];
}

Expected<int64_t> FashionMnistSource::next() {
  const TensorType& image_type = image_input_.view.type;
  for (int64_t row = 0; row < batch_; ++row) {
    int64_t sample = sampleAt(row);
    const uint8_t* pixels = images_.data.data() + sample * kImagePixels;
    int64_t base = row * kImagePixels;
    if (image_type.dtype == DType::kF32) {
      // As torchvision's ToTensor: float(pixel) / 255 in f32.
      auto* out = static_cast<float*>(image_input_.view.data) + base;
      for (int64_t p = 0; p < kImagePixels; ++p) out[p] = static_cast<float>(pixels[p]) / 255.0f;
    } else {
      for (int64_t p = 0; p < kImagePixels; ++p)
        storeElement(image_type.dtype, image_input_.view.data, base + p, pixels[p] / 255.0);
    }
    if (label_input_) storeElement(label_input_->view.type.dtype, label_input_->view.data, row, labels_.data[sample]);
  }
  int64_t real_rows = split_ == DataSplit::kEval ? std::min(batch_, count_ - position_.batch * batch_) : batch_;
  advance();
  return real_rows;
}

// ---- npy ----

class NpySource final : public DataSource {
 public:
  static Expected<std::unique_ptr<DataSource>> open(const std::string& dir, std::span<const NamedTensor> inputs,
                                                    const DataSourceOptions& options);

  std::string description() const override {
    return "npy files in " + dir_ + " (" + std::to_string(rows_) + " rows)";
  }
  int64_t batchesPerEpoch() const override {
    return split_ == DataSplit::kTrain ? rows_ / batch_ : (rows_ + batch_ - 1) / batch_;
  }
  Expected<int64_t> next() override;

 private:
  std::string dir_;
  DataSplit split_ = DataSplit::kTrain;
  int64_t batch_ = 0;
  int64_t rows_ = 0;
  std::vector<NamedTensor> inputs_;
  std::vector<NpyArray> arrays_;  // parallel to inputs_
};

// Steps: for each input read DIR/<name>.npy, check dtype, trailing shape and row count.
Expected<std::unique_ptr<DataSource>> NpySource::open(const std::string& dir, std::span<const NamedTensor> inputs,
                                                      const DataSourceOptions& options) {
  auto source = std::make_unique<NpySource>();
  source->dir_ = dir;
  source->split_ = options.split;
  const std::string where = "--data npy:" + dir;
  CLEAVE_ASSIGN_OR_RETURN(source->batch_, batchSizeOf(inputs, where));
  std::string first_path;
  for (const auto& input : inputs) {
    std::string path = (std::filesystem::path(dir) / (input.name + ".npy")).string();
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
      return Status::badInput(where + ": missing '" + path + "' for input '" + input.name + "' (" +
                              input.view.type.str() + ")");
    CLEAVE_ASSIGN_OR_RETURN(NpyArray array, readNpy(path));
    CLEAVE_TRY(checkNpyFinite(array, path));
    const TensorType& want = input.view.type;
    if (array.type.dtype == want.dtype && !array.type.shape.empty() && array.type.shape[0] > 0)
      CLEAVE_TRY(checkValueLimit(input, array.type.dtype, array.data.data(), array.type.numel(),
                                 array.type.numel() / array.type.shape[0], path, "row"));
    Shape want_row(want.shape.begin() + 1, want.shape.end());
    Shape got_row = array.type.shape.empty() ? Shape{} : Shape(array.type.shape.begin() + 1, array.type.shape.end());
    if (array.type.dtype != want.dtype || array.type.shape.empty() || got_row != want_row)
      return Status::badInput("'" + path + "' holds " + array.type.str() + "; input '" + input.name + "' needs " +
                              std::string(dtypeName(want.dtype)) + "[rows" +
                              (want_row.empty() ? "]" : "," + shapeStr(want_row).substr(1)));
    int64_t rows = array.type.shape[0];
    if (rows < source->batch_ && options.split == DataSplit::kTrain)
      return Status::badInput("'" + path + "' has " + std::to_string(rows) + " rows, fewer than one batch of " +
                              std::to_string(source->batch_) + " for input '" + input.name + "'");
    if (rows == 0) return Status::badInput("'" + path + "' has no rows for input '" + input.name + "'");
    if (!first_path.empty() && rows != source->rows_)
      return Status::badInput("'" + path + "' has " + std::to_string(rows) + " rows but '" + first_path + "' has " +
                              std::to_string(source->rows_));
    if (first_path.empty()) first_path = path;
    source->rows_ = rows;
    source->inputs_.push_back(input);
    source->arrays_.push_back(std::move(array));
  }
  return std::unique_ptr<DataSource>(std::move(source));
}

Expected<int64_t> NpySource::next() {
  // Training: batch g of the run starts at row g·B, wrapping around the end of the files.
  // Evaluation: batch k covers rows k·B.., the last one padded with rows from the start.
  int64_t first = position_.batch * batch_;
  if (split_ == DataSplit::kTrain) {
    int64_t global_batch = position_.epoch * batchesPerEpoch() + position_.batch;
    first = (global_batch % rows_) * (batch_ % rows_) % rows_;
  }
  for (size_t k = 0; k < inputs_.size(); ++k) {
    int64_t row_bytes = inputs_[k].view.type.bytes() / batch_;
    auto* out = static_cast<uint8_t*>(inputs_[k].view.data);
    for (int64_t row = 0; row < batch_; ++row) {
      int64_t source_row = (first + row) % rows_;
      std::memcpy(out + row * row_bytes, arrays_[k].data.data() + source_row * row_bytes, static_cast<size_t>(row_bytes));
    }
  }
  int64_t real_rows = split_ == DataSplit::kEval ? std::min(batch_, rows_ - first) : batch_;
  advance();
  return real_rows;
}

// ---- synthetic ----

class SyntheticSource final : public DataSource {
 public:
  static Expected<std::unique_ptr<DataSource>> open(std::span<const NamedTensor> inputs,
                                                    const DataSourceOptions& options) {
    if (options.split == DataSplit::kEval)
      return Status::usage("synthetic data is endless and cannot be evaluated over; give --eval-data npy:DIR or "
                           "fashion-mnist");
    auto source = std::make_unique<SyntheticSource>();
    source->seed_ = options.seed;
    for (const auto& input : inputs) {
      if (isInteger(input.view.type.dtype) && input.value_limit <= 0)
        return Status::badInput("synthetic data: integer input '" + input.name + "' (" + input.view.type.str() +
                                ") has no value limit in the plan, so its values cannot be chosen");
      source->inputs_.push_back(input);
    }
    return std::unique_ptr<DataSource>(std::move(source));
  }

  std::string description() const override { return "synthetic data (seed " + std::to_string(seed_) + ")"; }
  int64_t batchesPerEpoch() const override { return 0; }

  Expected<int64_t> next() override {
    // Batches cycle through a pool of kPoolBatches, each made once from (seed, pool index, input)
    // alone, so any position can be restored and steps do not pay for making random numbers
    // (the PyTorch peer likewise reuses one batch).
    int64_t slot = position_.batch % kPoolBatches;
    if (pool_.empty()) pool_.resize(kPoolBatches);
    if (pool_[slot].empty()) pool_[slot] = makeBatch(slot);
    for (size_t k = 0; k < inputs_.size(); ++k)
      std::memcpy(inputs_[k].view.data, pool_[slot][k].data(), pool_[slot][k].size());
    advance();
    return inputs_.empty() || inputs_[0].view.type.rank() == 0 ? int64_t{1} : inputs_[0].view.type.shape[0];
  }

 private:
  static constexpr int64_t kPoolBatches = 8;

  // The bytes of every input for pool slot `slot`.
  std::vector<std::vector<uint8_t>> makeBatch(int64_t slot) const {
    std::vector<std::vector<uint8_t>> batch;
    for (size_t k = 0; k < inputs_.size(); ++k) {
      const TensorType& type = inputs_[k].view.type;
      batch.emplace_back(static_cast<size_t>(type.bytes()));
      Random random(mixSeed({seed_, static_cast<uint64_t>(slot), k, 0x53594e5448ull}));
      for (int64_t i = 0; i < type.numel(); ++i) {
        double value = isFloat(type.dtype) ? random.normal()
                       : isInteger(type.dtype)
                           ? static_cast<double>(random.below(static_cast<uint64_t>(inputs_[k].value_limit)))
                           : static_cast<double>(random.below(2));
        storeElement(type.dtype, batch.back().data(), i, value);
      }
    }
    return batch;
  }

  uint64_t seed_ = 0;
  std::vector<NamedTensor> inputs_;
  std::vector<std::vector<std::vector<uint8_t>>> pool_;  // [slot][input] -> bytes, made on first use
};

}  // namespace

Status DataSource::seek(DataPosition position) {
  int64_t per_epoch = batchesPerEpoch();
  if (position.epoch < 0 || position.batch < 0 || (per_epoch > 0 && position.batch >= per_epoch))
    return Status::badInput("data position epoch " + std::to_string(position.epoch) + " batch " +
                            std::to_string(position.batch) + " is outside " + description() + " (" +
                            std::to_string(per_epoch) + " batches per epoch)");
  position_ = position;
  return Status::ok();
}

void DataSource::advance() {
  ++position_.batch;
  int64_t per_epoch = batchesPerEpoch();
  if (per_epoch > 0 && position_.batch >= per_epoch) {
    ++position_.epoch;
    position_.batch = 0;
  }
}

Expected<std::unique_ptr<DataSource>> openDataSource(std::string_view spec, std::span<const NamedTensor> inputs,
                                                     const DataSourceOptions& options) {
  std::string_view kind = spec.substr(0, spec.find(':'));
  std::optional<std::string> argument;
  if (spec.find(':') != std::string_view::npos) argument = std::string(spec.substr(spec.find(':') + 1));
  if (kind == "fashion-mnist")
    return FashionMnistSource::open(argument && !argument->empty() ? *argument : kDefaultFashionMnistDir, inputs,
                                    options);
  if (kind == "npy") {
    if (!argument || argument->empty()) return Status::usage("data source 'npy' needs a folder: npy:DIR");
    return NpySource::open(*argument, inputs, options);
  }
  if (kind == "synthetic") {
    if (argument) return Status::usage("data source 'synthetic' takes no argument (got '" + std::string(spec) + "')");
    return SyntheticSource::open(inputs, options);
  }
  return Status::usage("unknown data source '" + std::string(spec) + "' (expected fashion-mnist[:DIR], npy:DIR or synthetic)");
}

}  // namespace cleave::runtime
