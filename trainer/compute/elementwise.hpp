// Element-wise math written once for both backends: the CPU backend and the
// PS call these on the host, the CUDA kernels call them on the device, so the
// CPU unit tests exercise the formulas the GPU runs.
#pragma once

#include "common/random.hpp"

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define PSTRAIN_HD __host__ __device__ __forceinline__
#else
#define PSTRAIN_HD inline
#endif

namespace pstrain::compute {

PSTRAIN_HD float relu(float z) { return z > 0.0f ? z : 0.0f; }

// d loss / d z given d loss / d relu(z); the kink at 0 takes gradient 0.
PSTRAIN_HD float relu_grad(float z, float upstream) { return z > 0.0f ? upstream : 0.0f; }

// Softmax cross-entropy of one row, numerically stable: with m = max(logits)
// and s = sum(exp(logit - m)), loss = log(s) + m - logit[label].
PSTRAIN_HD float row_max(const float* logits, int classes)
{
    float m = logits[0];
    for (int c = 1; c < classes; ++c) m = logits[c] > m ? logits[c] : m;
    return m;
}

PSTRAIN_HD float row_sum_exp(const float* logits, int classes, float m)
{
    float s = 0.0f;
    for (int c = 0; c < classes; ++c) s += expf(logits[c] - m);
    return s;
}

PSTRAIN_HD float xent_loss(const float* logits, int classes, int label, float m, float sum_exp)
{
    return logf(sum_exp) + m - logits[label];
}

// d loss / d logit[c], scaled by `scale` (1/batch for a mean loss).
PSTRAIN_HD float xent_grad(float logit, float m, float sum_exp, bool is_label, float scale)
{
    return (expf(logit - m) / sum_exp - (is_label ? 1.0f : 0.0f)) * scale;
}

PSTRAIN_HD float sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }

// d loss / d z of tanh and sigmoid, from their output y.
PSTRAIN_HD float tanh_grad(float y, float upstream) { return upstream * (1.0f - y * y); }
PSTRAIN_HD float sigmoid_grad(float y, float upstream) { return upstream * y * (1.0f - y); }

// dropout_factor's threshold for a rate: the keep probability in 2^-24 units.
PSTRAIN_HD std::uint32_t dropout_threshold(float rate)
{
    return static_cast<std::uint32_t>(static_cast<double>(1.0f - rate) * (1u << 24));
}

// Inverted dropout's factor of element i: 24 random bits (half of the
// (i / 2 + 1)-th draw) against keep * 2^24; the kept get `scale`.
PSTRAIN_HD float dropout_factor(std::uint64_t seed, std::uint64_t i, std::uint32_t threshold, float scale)
{
    const std::uint64_t bits = random::splitmix64_at(seed, i / 2 + 1);
    const auto u = static_cast<std::uint32_t>(bits >> ((i % 2) * 32)) >> 8;
    return u < threshold ? scale : 0.0f;
}

// Index of the largest logit (the first on ties).
PSTRAIN_HD int row_argmax(const float* logits, int classes)
{
    int best = 0;
    for (int c = 1; c < classes; ++c)
        if (logits[c] > logits[best]) best = c;
    return best;
}

}  // namespace pstrain::compute
