// What the CUDA executor needs to know about a Program before it maps it onto CUDA: the
// host-only checks of CudaExecutor::check() and the helpers the mapping shares with them.
#pragma once

#include <cstdint>
#include <string>

#include "tide/program/program.hpp"
#include "transport/message.hpp"

namespace tide::exec::cuda_detail {

// "CudaExecutor: op 12 'label' (rank 1, stream 'sum'): " for error messages.
std::string op_where(const program::Program& program, int op);

// The size a program gives a buffer, or -1 when the buffer does not exist.
std::int64_t buffer_size(const program::Program& program, const program::Buffer& buffer);

using transport::contiguous;

// Bytes between consecutive staged contributions of a kSum (0 with fewer than two).
std::int64_t staged_stride(const program::SumOp& op);

// Every check of CudaExecutor::check().
void check_program(const program::Program& program);

}  // namespace tide::exec::cuda_detail
