// Communicator: the collectives and point-to-point transfers ranks of a plan use, over explicit groups.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/status.h"
#include "runtime/exec/executor.h"

namespace cleave::runtime {

// How a reduction combines the ranks' values. kMean is the sum divided by the group size.
enum class ReduceOp { kSum, kMean, kMax };

// The reduce op named `name` ("sum", "mean", "max"); kBadInput naming it otherwise.
Expected<ReduceOp> parseReduceOp(std::string_view name);
// The name of a reduce op ("sum", "mean", "max").
std::string_view reduceOpName(ReduceOp op);
// A group as text, e.g. "{0,1}".
std::string groupText(std::span<const int> group);

// Checks of a collective's tensors that every communicator makes before moving bytes: kBadInput
// "<what>: ..." when the output is not the shape the collective over `group_size` ranks gives,
// or when it overlaps the input; for an all-reduce bucket, when its tensors do not share one
// dtype, an output's size differs from its input's, or an output overlaps its input without being it.
Status checkAllReduceBucket(std::string_view what, std::span<const TensorView> inputs,
                            std::span<const TensorView> outputs);
Status checkAllGather(std::string_view what, int64_t group_size, const TensorView& input, const TensorView& output,
                      int64_t dim);
Status checkReduceScatter(std::string_view what, int64_t group_size, const TensorView& input,
                          const TensorView& output, int64_t dim);
Status checkAllToAll(std::string_view what, int64_t group_size, const TensorView& input, const TensorView& output,
                     int64_t split_dim, int64_t concat_dim);
// True when the bytes of `a` and `b` overlap.
bool tensorsOverlap(const TensorView& a, const TensorView& b);

// One rank's endpoint. Every collective names its group: the global ranks taking part, in
// increasing order (a rank's position in the group is its coordinate on the group's mesh axis);
// every member calls the same collectives of a group in the same order. A call waits at most the
// communicator's timeout; then it fails (kRemoteRank) naming the collective, the group and the ranks
// that did not arrive, e.g. "all_reduce over ranks {0,1} timed out after 300 s waiting for rank 1".
// Tensors are views into this rank's memory (host-accessible).
class Communicator {
 public:
  virtual ~Communicator() = default;
  // This endpoint's global rank.
  virtual int rank() const = 0;
  // The number of ranks.
  virtual int worldSize() const = 0;

  // outputs[i] = the reduction over the group of every rank's inputs[i]; the tensors of one call
  // (a bucket) share one dtype and are reduced as one flat buffer. outputs[i] may be inputs[i]
  // (in place) or must not overlap it. Every rank gets bitwise the same result.
  virtual Status allReduce(std::span<const int> group, std::span<const TensorView> inputs,
                           std::span<const TensorView> outputs, ReduceOp op) = 0;
  // output = the group's inputs concatenated along `dim` in group order (output.shape[dim] =
  // group size x input.shape[dim]).
  virtual Status allGather(std::span<const int> group, const TensorView& input, const TensorView& output,
                           int64_t dim) = 0;
  // output = block number (this rank's position) along `dim` of the reduction of the group's inputs
  // (input.shape[dim] = group size x output.shape[dim]).
  virtual Status reduceScatter(std::span<const int> group, const TensorView& input, const TensorView& output,
                               int64_t dim, ReduceOp op) = 0;
  // Splits input along `split_dim` into group-size blocks, sends block j to the group's j-th rank,
  // and concatenates the blocks received along `concat_dim` in group order.
  virtual Status allToAll(std::span<const int> group, const TensorView& input, const TensorView& output,
                          int64_t split_dim, int64_t concat_dim) = 0;
  // Sends `bytes` to rank `peer` under `tag`; buffered: returns without waiting for the receiver.
  virtual Status send(int peer, int tag, std::span<const uint8_t> bytes) = 0;
  // Receives the oldest message rank `peer` sent under `tag` into `bytes` (sizes must agree);
  // waits for it at most the timeout.
  virtual Status recv(int peer, int tag, std::span<uint8_t> bytes) = 0;
  // Returns once every rank of the group has called it.
  virtual Status barrier(std::span<const int> group) = 0;

  // Tells every rank that this one failed with `error`: their pending and later calls fail promptly
  // (kRemoteRank, naming this rank) instead of waiting for it.
  virtual void abort(const Status& error) = 0;
  // The rank whose abort stopped the communicator (the first to abort), or -1 while none has.
  virtual int abortedBy() const = 0;

  // Asynchronous communicators (NCCL) work on device memory: a call makes the transfer wait for
  // the device work launched before it, enqueues it on the device's communication stream and
  // returns once it is issued, not done. The executor calls them from the thread running the
  // program (no communication thread), calls deviceWaitForIssued() before an instruction that
  // touches bytes of an issued transfer, and finishIssued() at the end of every program run.
  // Synchronous ones (local, MPI) have finished the transfer when a call returns.
  virtual bool asynchronous() const { return false; }
  // Asynchronous: makes device work launched after this wait (on the device, not the host) until
  // every transfer issued so far no longer reads or writes the caller's bytes: collectives and
  // receives have finished (a send copies its bytes when it is issued).
  virtual Status deviceWaitForIssued() { return Status::ok(); }
  // Asynchronous: blocks until every transfer issued so far has finished, polling for the
  // library's asynchronous errors (kRuntime), for aborts and for the timeout (kRemoteRank naming the
  // transfer, its group and the rank waited for, as the synchronous ones do).
  virtual Status finishIssued() { return Status::ok(); }
};

}  // namespace cleave::runtime
