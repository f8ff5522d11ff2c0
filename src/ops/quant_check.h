// Validation of an MLX-quantized weight (quant family; shared by quant.cpp and embed.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "hybrid/ops/quant.h"
#include "ops/check.h"

namespace hybrid::ops {

// Checks the format of a quantized weight (argument `name`) over an input dimension of `in`
// (`in_name`): bits in {4, 8}, group_size in {32, 64, 128} dividing in.
void check_quant_format(Check& c, int bits, int group_size, const std::string& name, int64_t in,
                        const char* in_name);

// Checks `q` (argument `name`) as a quantized W [rows, in]: bits in {4, 8}, group_size in
// {32, 64, 128} dividing in, weight [rows, in·bits/32] u32, scales and biases [rows, in/group]
// of one float dtype, every tensor's last dimension contiguous. rows = -1: any number of rows.
// `in_name` is what the caller calls the input dimension ("in", "D").
void check_quantized(Check& c, const QuantizedWeight& q, const char* name, int64_t rows, int64_t in,
                     const char* in_name = "in");

}  // namespace hybrid::ops
