// NCCL communicators: collectives and transfers between GPUs (cleave run --device cuda --backend nccl).
// Declared in builds with the CUDA path only (CLEAVE_HAVE_CUDA); no CUDA header is included here.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "ir/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/device/device.h"

namespace cleave::runtime {

// One asynchronous communicator per rank of this process, rank r working on devices[r] (cuda
// devices, one per GPU; one thread per rank). A transfer that has not finished `timeout_seconds`
// after finishIssued() began waiting for it fails and aborts the communicators.
Expected<std::vector<std::unique_ptr<Communicator>>> createNcclCommunicators(std::span<Device* const> devices,
                                                                             double timeout_seconds);

// This process's communicator in an mpirun job: its rank is the MPI rank, it works on `device`
// (a cuda device); NCCL's unique id is broadcast over MPI_COMM_WORLD.
Expected<std::unique_ptr<Communicator>> createNcclCommunicatorForProcess(Device& device, double timeout_seconds);

}  // namespace cleave::runtime
