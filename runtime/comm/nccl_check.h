// Checking NCCL results: a failed call becomes a kRuntime Status naming the call, the rank and NCCL's error text.
// Only files that include <nccl.h> anyway include this header.
#pragma once

#include <nccl.h>

#include <string>
#include <string_view>

#include "ir/status.h"

namespace cleave::runtime {

// Whether an NCCL result means the call failed (ncclInProgress is a non-blocking call still working).
inline bool ncclFailed(ncclResult_t result) { return result != ncclSuccess && result != ncclInProgress; }

// Ok for ncclSuccess and ncclInProgress, else kRuntime: "rank R: <what>: <call> failed: NCCL error
// <ncclGetErrorString>: <ncclGetLastError(comm)>" (without "rank R: " when `rank` is negative).
// `call` may be the whole call expression: its name is what comes before the first '('.
inline Status ncclStatus(ncclResult_t result, std::string_view call, int rank, std::string_view what,
                         ncclComm_t comm = nullptr) {
  if (!ncclFailed(result)) return Status::ok();
  std::string text = rank >= 0 ? "rank " + std::to_string(rank) + ": " : std::string();
  if (!what.empty()) text += std::string(what) + ": ";
  text += std::string(call.substr(0, call.find('('))) + " failed: NCCL error " + ncclGetErrorString(result) + ": " +
          ncclGetLastError(comm);
  return Status::runtime(std::move(text));
}

}  // namespace cleave::runtime

// Runs the NCCL call `call` and returns its error Status (ncclStatus) from the enclosing function when
// it fails, as NCCL's own NCCLCHECK does: CLEAVE_NCCL_CHECK(ncclGetUniqueId(&id), rank, "creating the communicators").
#define CLEAVE_NCCL_CHECK(call, rank, what) CLEAVE_TRY(::cleave::runtime::ncclStatus((call), #call, (rank), (what)))
