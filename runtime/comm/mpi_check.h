// Checking MPI results: a failed call becomes a kRuntime Status naming the call, the rank and MPI's error text.
// Only files that include <mpi.h> anyway include this header.
#pragma once

#include <mpi.h>

#include <string>
#include <string_view>

#include "ir/status.h"

namespace cleave::runtime {

// MPI's text for the error code `code` (MPI_Error_string).
inline std::string mpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<size_t>(length));
}

// Ok for MPI_SUCCESS, else kRuntime: "rank R: <what>: <call> failed: <MPI's text>" (without
// "rank R: " when `rank` is negative, e.g. before MPI knows it). `call` may be the whole call
// expression: its name is what comes before the first '('.
inline Status mpiStatus(int result, std::string_view call, int rank, std::string_view what) {
  if (result == MPI_SUCCESS) return Status::ok();
  std::string text = rank >= 0 ? "rank " + std::to_string(rank) + ": " : std::string();
  if (!what.empty()) text += std::string(what) + ": ";
  text += std::string(call.substr(0, call.find('('))) + " failed: " + mpiErrorText(result);
  return Status::runtime(std::move(text));
}

}  // namespace cleave::runtime

// Runs the MPI call `call` and returns its error Status (mpiStatus) from the enclosing function when
// it fails, as NCCL's NCCLCHECK does: CLEAVE_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm), rank, "setting up").
#define CLEAVE_MPI_CHECK(call, rank, what) CLEAVE_TRY(::cleave::runtime::mpiStatus((call), #call, (rank), (what)))
