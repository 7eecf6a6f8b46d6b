// One parameter's update for each optimizer, as TensorFlow defines it;
// the optimizer loops (optimizer.cpp) apply them over a shard.
#pragma once

#include <cmath>

namespace pstrain::ps {

inline void sgd_update(float& p, float g, float lr) { p -= lr * g; }

// TensorFlow's MomentumOptimizer: a = mu * a + g; p -= lr * a.
inline void momentum_update(float& p, float& accum, float g, float lr, float mu)
{
    accum = mu * accum + g;
    p -= lr * accum;
}

// TensorFlow's AdagradOptimizer: a += g^2; p -= lr * g / sqrt(a).
inline void adagrad_update(float& p, float& accum, float g, float lr)
{
    accum += g * g;
    p -= lr * g / std::sqrt(accum);
}

// TensorFlow's AdamOptimizer, with the bias correction folded into lr_t =
// lr * sqrt(1 - beta2^t) / (1 - beta1^t) by the caller.
inline void adam_update(float& p, float& m, float& v, float g, float lr_t, float beta1, float beta2, float epsilon)
{
    // The new moments in registers: the step reads them back from there,
    // not from memory just written (a wide store read back at once stalls).
    const float m1 = beta1 * m + (1.0f - beta1) * g;
    const float v1 = beta2 * v + (1.0f - beta2) * g * g;
    m = m1;
    v = v1;
    p -= lr_t * m1 / (std::sqrt(v1) + epsilon);
}

}  // namespace pstrain::ps
