#include "trainer/compute/cpu_layers.hpp"

#include "common/random.hpp"
#include "trainer/compute/elementwise.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <cblas.h>

namespace pstrain::compute {

bool resolve_padding(window2d& w, bool same)
{
    if (same) {
        w.out_h = (w.height + w.sh - 1) / w.sh;
        w.out_w = (w.width + w.sw - 1) / w.sw;
        w.pad_top = std::max((w.out_h - 1) * w.sh + w.kh - w.height, 0) / 2;
        w.pad_left = std::max((w.out_w - 1) * w.sw + w.kw - w.width, 0) / 2;
        return true;
    }
    w.pad_top = w.pad_left = 0;
    if (w.kh > w.height || w.kw > w.width) return false;
    w.out_h = (w.height - w.kh) / w.sh + 1;
    w.out_w = (w.width - w.kw) / w.sw + 1;
    return true;
}

namespace cpu {
namespace {

// The output columns [lo, hi) whose input column ox * s - pad + k is inside 0..in-1.
inline void inside(int out, int in, int s, int pad, int k, int& lo, int& hi)
{
    // ox * s >= pad - k  and  ox * s <= in - 1 + pad - k
    const int a = pad - k;
    lo = a <= 0 ? 0 : (a + s - 1) / s;
    const int b = in - 1 + pad - k;
    hi = b < 0 ? 0 : b / s + 1;
    lo = std::min(lo, out);
    hi = std::clamp(hi, lo, out);
}

// One image's C x H x W into rows (c, ki, kj) of out_h * out_w columns,
// rows `ld` floats apart (the images of a chunk side by side).
void im2col(const float* x, const window2d& w, float* col, std::size_t ld)
{
    const int plane = w.out_h * w.out_w;
    for (int c = 0; c < w.channels; ++c) {
        const float* xc = x + std::size_t(c) * w.height * w.width;
        for (int ki = 0; ki < w.kh; ++ki) {
            int ylo, yhi;
            inside(w.out_h, w.height, w.sh, w.pad_top, ki, ylo, yhi);
            for (int kj = 0; kj < w.kw; ++kj) {
                int xlo, xhi;
                inside(w.out_w, w.width, w.sw, w.pad_left, kj, xlo, xhi);
                float* row = col + (std::size_t(c * w.kh + ki) * w.kw + kj) * ld;
                std::fill(row, row + std::size_t(ylo) * w.out_w, 0.0f);
                for (int oy = ylo; oy < yhi; ++oy) {
                    float* out = row + std::size_t(oy) * w.out_w;
                    const float* in = xc + std::size_t(oy * w.sh - w.pad_top + ki) * w.width - w.pad_left + kj;
                    std::fill(out, out + xlo, 0.0f);
                    if (w.sw == 1) std::memcpy(out + xlo, in + xlo, sizeof(float) * std::size_t(xhi - xlo));
                    else
                        for (int ox = xlo; ox < xhi; ++ox) out[ox] = in[ox * w.sw];
                    std::fill(out + xhi, out + w.out_w, 0.0f);
                }
                std::fill(row + std::size_t(yhi) * w.out_w, row + plane, 0.0f);
            }
        }
    }
}

// The adjoint of im2col: adds the columns back into one image (dx zeroed by the caller).
void col2im(const float* col, const window2d& w, float* dx, std::size_t ld)
{
    for (int c = 0; c < w.channels; ++c) {
        float* dc = dx + std::size_t(c) * w.height * w.width;
        for (int ki = 0; ki < w.kh; ++ki) {
            int ylo, yhi;
            inside(w.out_h, w.height, w.sh, w.pad_top, ki, ylo, yhi);
            for (int kj = 0; kj < w.kw; ++kj) {
                int xlo, xhi;
                inside(w.out_w, w.width, w.sw, w.pad_left, kj, xlo, xhi);
                const float* row = col + (std::size_t(c * w.kh + ki) * w.kw + kj) * ld;
                for (int oy = ylo; oy < yhi; ++oy) {
                    const float* in = row + std::size_t(oy) * w.out_w;
                    float* out = dc + std::size_t(oy * w.sh - w.pad_top + ki) * w.width - w.pad_left + kj;
                    for (int ox = xlo; ox < xhi; ++ox) out[ox * w.sw] += in[ox];
                }
            }
        }
    }
}

}  // namespace

// Images per sgemm: the im2col columns of a chunk of images side by side
// make one large product instead of one small product per image (OpenBLAS
// runs far below its peak on a 64 x 196 x 800 product); the chunk keeps the
// columns within ~8 MB.
int conv2d_chunk(const window2d& w, int n)
{
    const std::size_t per_image = std::size_t(w.channels) * w.kh * w.kw * w.out_h * w.out_w;
    const std::size_t budget = std::size_t(1) << 21;  // floats
    return static_cast<int>(
        std::clamp<std::size_t>(budget / std::max<std::size_t>(per_image, 1), 1, std::size_t(std::max(n, 1))));
}

std::size_t conv2d_workspace(const window2d& w, int filters, int max_batch)
{
    const std::size_t chunk = std::size_t(conv2d_chunk(w, max_batch));
    const std::size_t plane = std::size_t(w.out_h) * w.out_w;
    return chunk * plane * (std::size_t(w.channels) * w.kh * w.kw + std::size_t(filters));
}

void conv2d_forward(const float* x, const float* k, const float* b, float* y, int n, int filters, const window2d& w,
                    float* workspace)
{
    const std::size_t plane = std::size_t(w.out_h) * w.out_w;
    const int depth = w.channels * w.kh * w.kw;
    const std::size_t in_size = std::size_t(w.channels) * w.height * w.width;
    const int chunk = conv2d_chunk(w, n);
    for (int i0 = 0; i0 < n; i0 += chunk) {
        const int m = std::min(chunk, n - i0);
        const std::size_t ld = std::size_t(m) * plane;
        float* col = workspace;
        float* out = workspace + std::size_t(depth) * ld;  // filters x (m images x plane)
        for (int j = 0; j < m; ++j) im2col(x + (i0 + j) * in_size, w, col + j * plane, ld);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, filters, static_cast<int>(ld), depth, 1.0f, k, depth,
                    col, static_cast<int>(ld), 0.0f, out, static_cast<int>(ld));
        for (int j = 0; j < m; ++j) {
            float* yi = y + std::size_t(i0 + j) * filters * plane;
            for (int o = 0; o < filters; ++o) {
                const float* src = out + o * ld + j * plane;
                float* dst = yi + o * plane;
                const float bias = b[o];
                for (std::size_t p = 0; p < plane; ++p) dst[p] = src[p] + bias;
            }
        }
    }
}

void conv2d_backward(const float* x, const float* k, const float* dy, float* dx, float* dk, float* db, int n,
                     int filters, const window2d& w, float* workspace)
{
    const std::size_t plane = std::size_t(w.out_h) * w.out_w;
    const int depth = w.channels * w.kh * w.kw;
    const std::size_t in_size = std::size_t(w.channels) * w.height * w.width;
    const int chunk = conv2d_chunk(w, n);
    std::fill(db, db + filters, 0.0f);
    if (n == 0) std::fill(dk, dk + std::size_t(filters) * depth, 0.0f);
    for (int i0 = 0; i0 < n; i0 += chunk) {
        const int m = std::min(chunk, n - i0);
        const std::size_t ld = std::size_t(m) * plane;
        float* col = workspace;
        float* grad = workspace + std::size_t(depth) * ld;  // dy as filters x (m images x plane)
        for (int j = 0; j < m; ++j) {
            const float* dyi = dy + std::size_t(i0 + j) * filters * plane;
            for (int o = 0; o < filters; ++o) {
                const float* src = dyi + o * plane;
                std::memcpy(grad + o * ld + j * plane, src, plane * sizeof(float));
                float s = 0.0f;
                for (std::size_t p = 0; p < plane; ++p) s += src[p];
                db[o] += s;
            }
            im2col(x + (i0 + j) * in_size, w, col + j * plane, ld);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, filters, depth, static_cast<int>(ld), 1.0f, grad,
                    static_cast<int>(ld), col, static_cast<int>(ld), i0 == 0 ? 0.0f : 1.0f, dk, depth);
        if (!dx) continue;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, depth, static_cast<int>(ld), filters, 1.0f, k, depth, grad,
                    static_cast<int>(ld), 0.0f, col, static_cast<int>(ld));
        for (int j = 0; j < m; ++j) {
            float* dxi = dx + (i0 + j) * in_size;
            std::fill(dxi, dxi + in_size, 0.0f);
            col2im(col + j * plane, w, dxi, ld);
        }
    }
}

namespace {

// Calls f(in, out, window) for every output of every one of `planes`
// channel planes: `in` and `out` the offsets of the plane's first input and
// of the output, `window` the output's window inside the image.
template <typename F>
void for_each_window(const window2d& w, std::size_t planes, F&& f)
{
    const std::size_t in_plane = std::size_t(w.height) * w.width;
    const std::size_t out_plane = std::size_t(w.out_h) * w.out_w;
    for (std::size_t p = 0; p < planes; ++p)
        for (int oy = 0; oy < w.out_h; ++oy)
            for (int ox = 0; ox < w.out_w; ++ox)
                f(p * in_plane, p * out_plane + std::size_t(oy) * w.out_w + ox, w.under(oy, ox));
}

}  // namespace

void maxpool_forward(const float* x, float* y, std::int32_t* argmax, int n, const window2d& w)
{
    for_each_window(w, std::size_t(n) * w.channels, [&](std::size_t in, std::size_t o, window2d::span2d s) {
        const float* xp = x + in;
        float best = -std::numeric_limits<float>::infinity();
        std::int32_t at = s.y0 * w.width + s.x0;
        for (int iy = s.y0; iy < s.y1; ++iy)
            for (int ix = s.x0; ix < s.x1; ++ix) {
                const float v = xp[iy * w.width + ix];
                if (v > best) {
                    best = v;
                    at = iy * w.width + ix;
                }
            }
        y[o] = best;
        argmax[o] = at;
    });
}

void maxpool_backward(const float* dy, const std::int32_t* argmax, float* dx, int n, const window2d& w)
{
    const std::size_t in_plane = std::size_t(w.height) * w.width;
    const std::size_t out_plane = std::size_t(w.out_h) * w.out_w;
    const std::size_t planes = std::size_t(n) * w.channels;
    std::fill(dx, dx + planes * in_plane, 0.0f);
    for (std::size_t p = 0; p < planes; ++p) {
        float* dxp = dx + p * in_plane;
        const float* dyp = dy + p * out_plane;
        const std::int32_t* ap = argmax + p * out_plane;
        for (std::size_t o = 0; o < out_plane; ++o) dxp[ap[o]] += dyp[o];
    }
}

void avgpool_forward(const float* x, float* y, int n, const window2d& w)
{
    for_each_window(w, std::size_t(n) * w.channels, [&](std::size_t in, std::size_t o, window2d::span2d s) {
        const float* xp = x + in;
        float sum = 0.0f;
        for (int iy = s.y0; iy < s.y1; ++iy)
            for (int ix = s.x0; ix < s.x1; ++ix) sum += xp[iy * w.width + ix];
        y[o] = sum / static_cast<float>(s.cells());
    });
}

void avgpool_backward(const float* dy, float* dx, int n, const window2d& w)
{
    const std::size_t planes = std::size_t(n) * w.channels;
    std::fill(dx, dx + planes * std::size_t(w.height) * w.width, 0.0f);
    for_each_window(w, planes, [&](std::size_t in, std::size_t o, window2d::span2d s) {
        float* dxp = dx + in;
        const float g = dy[o] / static_cast<float>(s.cells());
        for (int iy = s.y0; iy < s.y1; ++iy)
            for (int ix = s.x0; ix < s.x1; ++ix) dxp[iy * w.width + ix] += g;
    });
}

void activation_forward(activation a, const float* x, float* y, std::size_t count)
{
    switch (a) {
    case activation::relu:
        for (std::size_t i = 0; i < count; ++i) y[i] = relu(x[i]);
        break;
    case activation::tanh:
        for (std::size_t i = 0; i < count; ++i) y[i] = std::tanh(x[i]);
        break;
    case activation::sigmoid:
        for (std::size_t i = 0; i < count; ++i) y[i] = sigmoid(x[i]);
        break;
    }
}

void activation_backward(activation a, const float* y, const float* dy, float* dx, std::size_t count)
{
    switch (a) {
    case activation::relu:
        // relu(z) > 0 exactly when z > 0: the output decides as the input would.
        for (std::size_t i = 0; i < count; ++i) dx[i] = relu_grad(y[i], dy[i]);
        break;
    case activation::tanh:
        for (std::size_t i = 0; i < count; ++i) dx[i] = tanh_grad(y[i], dy[i]);
        break;
    case activation::sigmoid:
        for (std::size_t i = 0; i < count; ++i) dx[i] = sigmoid_grad(y[i], dy[i]);
        break;
    }
}

void softmax_forward(const float* x, float* y, int rows, int classes)
{
    for (int r = 0; r < rows; ++r) {
        const float* xr = x + std::size_t(r) * classes;
        float* yr = y + std::size_t(r) * classes;
        const float m = row_max(xr, classes);
        const float s = row_sum_exp(xr, classes, m);
        for (int c = 0; c < classes; ++c) yr[c] = std::exp(xr[c] - m) / s;
    }
}

void softmax_backward(const float* y, const float* dy, float* dx, int rows, int classes)
{
    for (int r = 0; r < rows; ++r) {
        const float* yr = y + std::size_t(r) * classes;
        const float* dyr = dy + std::size_t(r) * classes;
        float* dxr = dx + std::size_t(r) * classes;
        float dot = 0.0f;
        for (int c = 0; c < classes; ++c) dot += yr[c] * dyr[c];
        for (int c = 0; c < classes; ++c) dxr[c] = yr[c] * (dyr[c] - dot);
    }
}

loss_sums mse_onehot(const float* pred, const std::int32_t* labels, float* dpred, int rows, int classes)
{
    loss_sums sums;
    const float scale = 2.0f / (static_cast<float>(rows) * static_cast<float>(classes));
    for (int r = 0; r < rows; ++r) {
        const float* p = pred + std::size_t(r) * classes;
        double row = 0;
        for (int c = 0; c < classes; ++c) {
            const float d = p[c] - (c == labels[r] ? 1.0f : 0.0f);
            row += double(d) * d;
            if (dpred) dpred[std::size_t(r) * classes + c] = scale * d;
        }
        sums.loss += row / classes;
        sums.correct += row_argmax(p, classes) == labels[r];
    }
    return sums;
}

void dropout_forward(const float* x, float* y, float* mask, std::size_t count, float rate, std::uint64_t seed)
{
    random::splitmix64 rng(seed);
    const float scale = 1.0f / (1.0f - rate);
    // 24 random bits per element against the keep probability (dropout_factor's draws, in order).
    const std::uint32_t threshold = dropout_threshold(rate);
    std::size_t i = 0;
    while (i < count) {
        std::uint64_t bits = rng();
        for (int j = 0; j < 2 && i < count; ++j, ++i) {
            const auto u = static_cast<std::uint32_t>(bits >> (j * 32)) >> 8;
            mask[i] = u < threshold ? scale : 0.0f;
            y[i] = x[i] * mask[i];
        }
    }
}

void dropout_backward(const float* dy, const float* mask, float* dx, std::size_t count)
{
    for (std::size_t i = 0; i < count; ++i) dx[i] = dy[i] * mask[i];
}

void batchnorm_forward_train(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* var,
                             float* inv_std, int n, int channels, int inner, float eps)
{
    const double count = double(n) * inner;
    const std::size_t plane = std::size_t(channels) * inner;
    for (int c = 0; c < channels; ++c) {
        double sum = 0, sq = 0;
        for (int i = 0; i < n; ++i) {
            const float* xc = x + i * plane + std::size_t(c) * inner;
            for (int j = 0; j < inner; ++j) sum += xc[j];
        }
        const double m = sum / count;
        for (int i = 0; i < n; ++i) {
            const float* xc = x + i * plane + std::size_t(c) * inner;
            for (int j = 0; j < inner; ++j) sq += (xc[j] - m) * (xc[j] - m);
        }
        const double v = sq / count;
        mean[c] = static_cast<float>(m);
        var[c] = static_cast<float>(v);
        inv_std[c] = static_cast<float>(1.0 / std::sqrt(v + eps));
        const float scale = gamma[c] * inv_std[c];
        for (int i = 0; i < n; ++i) {
            const float* xc = x + i * plane + std::size_t(c) * inner;
            float* yc = y + i * plane + std::size_t(c) * inner;
            for (int j = 0; j < inner; ++j) yc[j] = (xc[j] - mean[c]) * scale + beta[c];
        }
    }
}

void batchnorm_forward_eval(const float* x, const float* gamma, const float* beta, const float* moving_mean,
                            const float* moving_var, float* y, int n, int channels, int inner, float eps)
{
    const std::size_t plane = std::size_t(channels) * inner;
    for (int c = 0; c < channels; ++c) {
        const float scale = gamma[c] / std::sqrt(moving_var[c] + eps);
        const float shift = beta[c] - moving_mean[c] * scale;
        for (int i = 0; i < n; ++i) {
            const float* xc = x + i * plane + std::size_t(c) * inner;
            float* yc = y + i * plane + std::size_t(c) * inner;
            for (int j = 0; j < inner; ++j) yc[j] = xc[j] * scale + shift;
        }
    }
}

void batchnorm_backward(const float* x, const float* gamma, const float* mean, const float* inv_std, const float* dy,
                        float* dx, float* dgamma, float* dbeta, int n, int channels, int inner)
{
    const double count = double(n) * inner;
    const std::size_t plane = std::size_t(channels) * inner;
    for (int c = 0; c < channels; ++c) {
        double sdy = 0, sdyx = 0;
        for (int i = 0; i < n; ++i) {
            const float* xc = x + i * plane + std::size_t(c) * inner;
            const float* dyc = dy + i * plane + std::size_t(c) * inner;
            for (int j = 0; j < inner; ++j) {
                sdy += dyc[j];
                sdyx += double(dyc[j]) * (xc[j] - mean[c]);
            }
        }
        dbeta[c] = static_cast<float>(sdy);
        dgamma[c] = static_cast<float>(sdyx * inv_std[c]);
        if (!dx) continue;
        // dx = gamma * inv_std * (dy - mean(dy) - xhat * mean(dy * xhat))
        const float k = gamma[c] * inv_std[c];
        const float mdy = static_cast<float>(sdy / count);
        const float mdyx = static_cast<float>(sdyx * inv_std[c] / count);
        for (int i = 0; i < n; ++i) {
            const float* xc = x + i * plane + std::size_t(c) * inner;
            const float* dyc = dy + i * plane + std::size_t(c) * inner;
            float* dxc = dx + i * plane + std::size_t(c) * inner;
            for (int j = 0; j < inner; ++j) {
                const float xhat = (xc[j] - mean[c]) * inv_std[c];
                dxc[j] = k * (dyc[j] - mdy - xhat * mdyx);
            }
        }
    }
}

void moving_average_delta(const float* batch, const float* moving, float* delta, int count, float momentum)
{
    for (int i = 0; i < count; ++i) delta[i] = (1.0f - momentum) * (batch[i] - moving[i]);
}

}  // namespace cpu
}  // namespace pstrain::compute
