// The CPU oracle of the kernels: each layer written the direct way, in
// double, straight from its definition (no im2col, no BLAS, no code shared
// with the rest of trainer/compute), so that a kernel is compared with an
// independent implementation: by the unit tests, and by `pstrain selftest`
// on the node it runs on.  Tensors are NCHW, kernels OIHW, matrices
// row-major.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace pstrain::compute::oracle {

struct geometry {
    int n = 1, c = 1, h = 1, w = 1;  // input
    int kh = 1, kw = 1, sh = 1, sw = 1;
    bool same = false;
    // derived
    int oh = 0, ow = 0, pt = 0, pl = 0;

    geometry& resolve()
    {
        if (same) {
            oh = (h + sh - 1) / sh;
            ow = (w + sw - 1) / sw;
            pt = std::max((oh - 1) * sh + kh - h, 0) / 2;
            pl = std::max((ow - 1) * sw + kw - w, 0) / 2;
        } else {
            oh = (h - kh) / sh + 1;
            ow = (w - kw) / sw + 1;
            pt = pl = 0;
        }
        return *this;
    }
    std::size_t in_index(int i, int ch, int y, int x) const { return ((std::size_t(i) * c + ch) * h + y) * w + x; }
};

using vec = std::vector<double>;

// y[i][o][oy][ox] = b[o] + sum over ch, ky, kx of x[i][ch][oy*sh-pt+ky][ox*sw-pl+kx] * k[o][ch][ky][kx]
inline vec conv2d_forward(const geometry& g, int filters, const vec& x, const vec& k, const vec& b)
{
    vec y(std::size_t(g.n) * filters * g.oh * g.ow);
    for (int i = 0; i < g.n; ++i)
        for (int o = 0; o < filters; ++o)
            for (int oy = 0; oy < g.oh; ++oy)
                for (int ox = 0; ox < g.ow; ++ox) {
                    double s = b[o];
                    for (int ch = 0; ch < g.c; ++ch)
                        for (int ky = 0; ky < g.kh; ++ky)
                            for (int kx = 0; kx < g.kw; ++kx) {
                                const int iy = oy * g.sh - g.pt + ky, ix = ox * g.sw - g.pl + kx;
                                if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
                                s += x[g.in_index(i, ch, iy, ix)] *
                                     k[((std::size_t(o) * g.c + ch) * g.kh + ky) * g.kw + kx];
                            }
                    y[((std::size_t(i) * filters + o) * g.oh + oy) * g.ow + ox] = s;
                }
    return y;
}

// The chain rule of the sum above, term by term.
inline void conv2d_backward(const geometry& g, int filters, const vec& x, const vec& k, const vec& dy, vec& dx, vec& dk,
                            vec& db)
{
    dx.assign(x.size(), 0.0);
    dk.assign(k.size(), 0.0);
    db.assign(std::size_t(filters), 0.0);
    for (int i = 0; i < g.n; ++i)
        for (int o = 0; o < filters; ++o)
            for (int oy = 0; oy < g.oh; ++oy)
                for (int ox = 0; ox < g.ow; ++ox) {
                    const double d = dy[((std::size_t(i) * filters + o) * g.oh + oy) * g.ow + ox];
                    db[o] += d;
                    for (int ch = 0; ch < g.c; ++ch)
                        for (int ky = 0; ky < g.kh; ++ky)
                            for (int kx = 0; kx < g.kw; ++kx) {
                                const int iy = oy * g.sh - g.pt + ky, ix = ox * g.sw - g.pl + kx;
                                if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
                                const std::size_t ki = ((std::size_t(o) * g.c + ch) * g.kh + ky) * g.kw + kx;
                                dk[ki] += d * x[g.in_index(i, ch, iy, ix)];
                                dx[g.in_index(i, ch, iy, ix)] += d * k[ki];
                            }
                }
}

// Pooling over the window cells inside the image; max: the gradient goes
// to the first largest cell in row-major order.
inline vec pool_forward(const geometry& g, bool max, const vec& x)
{
    vec y(std::size_t(g.n) * g.c * g.oh * g.ow);
    for (int i = 0; i < g.n; ++i)
        for (int ch = 0; ch < g.c; ++ch)
            for (int oy = 0; oy < g.oh; ++oy)
                for (int ox = 0; ox < g.ow; ++ox) {
                    double best = -std::numeric_limits<double>::infinity(), sum = 0;
                    int cells = 0;
                    for (int ky = 0; ky < g.kh; ++ky)
                        for (int kx = 0; kx < g.kw; ++kx) {
                            const int iy = oy * g.sh - g.pt + ky, ix = ox * g.sw - g.pl + kx;
                            if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
                            const double v = x[g.in_index(i, ch, iy, ix)];
                            best = std::max(best, v);
                            sum += v;
                            ++cells;
                        }
                    y[((std::size_t(i) * g.c + ch) * g.oh + oy) * g.ow + ox] = max ? best : sum / cells;
                }
    return y;
}

inline vec pool_backward(const geometry& g, bool max, const vec& x, const vec& dy)
{
    vec dx(x.size(), 0.0);
    for (int i = 0; i < g.n; ++i)
        for (int ch = 0; ch < g.c; ++ch)
            for (int oy = 0; oy < g.oh; ++oy)
                for (int ox = 0; ox < g.ow; ++ox) {
                    const double d = dy[((std::size_t(i) * g.c + ch) * g.oh + oy) * g.ow + ox];
                    std::vector<std::size_t> cells;
                    std::size_t best = 0;
                    double best_v = -std::numeric_limits<double>::infinity();
                    for (int ky = 0; ky < g.kh; ++ky)
                        for (int kx = 0; kx < g.kw; ++kx) {
                            const int iy = oy * g.sh - g.pt + ky, ix = ox * g.sw - g.pl + kx;
                            if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
                            const std::size_t at = g.in_index(i, ch, iy, ix);
                            cells.push_back(at);
                            if (x[at] > best_v) {
                                best_v = x[at];
                                best = at;
                            }
                        }
                    if (max) dx[best] += d;
                    else
                        for (auto at : cells) dx[at] += d / double(cells.size());
                }
    return dx;
}

// y = x w + b for rows x in times in x out.
inline vec dense_forward(int rows, int in, int out, const vec& x, const vec& w, const vec& b)
{
    vec y(std::size_t(rows) * out);
    for (int r = 0; r < rows; ++r)
        for (int o = 0; o < out; ++o) {
            double s = b[o];
            for (int i = 0; i < in; ++i) s += x[std::size_t(r) * in + i] * w[std::size_t(i) * out + o];
            y[std::size_t(r) * out + o] = s;
        }
    return y;
}

// dw = x^T dy (in x out), db = the column sums of dy, dx = dy w^T.
inline void dense_backward(int rows, int in, int out, const vec& x, const vec& w, const vec& dy, vec& dx, vec& dw,
                           vec& db)
{
    dx.assign(std::size_t(rows) * in, 0.0);
    dw.assign(std::size_t(in) * out, 0.0);
    db.assign(std::size_t(out), 0.0);
    for (int r = 0; r < rows; ++r)
        for (int o = 0; o < out; ++o) {
            const double g = dy[std::size_t(r) * out + o];
            db[o] += g;
            for (int i = 0; i < in; ++i) {
                dw[std::size_t(i) * out + o] += x[std::size_t(r) * in + i] * g;
                dx[std::size_t(r) * in + i] += g * w[std::size_t(i) * out + o];
            }
        }
}

inline double activation(int kind, double x)  // 0 relu, 1 tanh, 2 sigmoid
{
    return kind == 0 ? std::max(x, 0.0) : kind == 1 ? std::tanh(x) : 1.0 / (1.0 + std::exp(-x));
}

inline double activation_derivative(int kind, double x)
{
    if (kind == 0) return x > 0 ? 1.0 : 0.0;
    if (kind == 1) return 1.0 - std::tanh(x) * std::tanh(x);
    const double s = 1.0 / (1.0 + std::exp(-x));
    return s * (1.0 - s);
}

inline vec softmax(const vec& x, int rows, int classes)
{
    vec y(x.size());
    for (int r = 0; r < rows; ++r) {
        double m = -std::numeric_limits<double>::infinity(), s = 0;
        for (int c = 0; c < classes; ++c) m = std::max(m, x[std::size_t(r) * classes + c]);
        for (int c = 0; c < classes; ++c) s += std::exp(x[std::size_t(r) * classes + c] - m);
        for (int c = 0; c < classes; ++c)
            y[std::size_t(r) * classes + c] = std::exp(x[std::size_t(r) * classes + c] - m) / s;
    }
    return y;
}

// The softmax Jacobian applied to dy: dx_c = sum_j dy_j * y_j * (delta_cj - y_c).
inline vec softmax_backward(const vec& y, const vec& dy, int rows, int classes)
{
    vec dx(y.size());
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < classes; ++c) {
            double s = 0;
            for (int j = 0; j < classes; ++j) {
                const std::size_t a = std::size_t(r) * classes;
                s += dy[a + j] * y[a + j] * ((c == j ? 1.0 : 0.0) - y[a + c]);
            }
            dx[std::size_t(r) * classes + c] = s;
        }
    return dx;
}

// Mean squared error against one-hot labels, the mean over a row's classes
// summed over the rows; dpred = d(mean over rows) / d pred.
inline double mse_onehot(const vec& pred, const std::vector<std::int32_t>& labels, int rows, int classes, vec& dpred)
{
    double loss = 0;
    dpred.assign(pred.size(), 0.0);
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < classes; ++c) {
            const std::size_t i = std::size_t(r) * classes + c;
            const double d = pred[i] - (c == labels[r] ? 1.0 : 0.0);
            loss += d * d / classes;
            dpred[i] = 2.0 * d / (double(rows) * classes);
        }
    return loss;
}

// Batch normalization of x[n, channels, inner] with the batch's statistics
// (biased variance): y = gamma (x - mean) / sqrt(var + eps) + beta.
inline vec batchnorm_forward(const vec& x, const vec& gamma, const vec& beta, int n, int channels, int inner,
                             double eps, vec& mean, vec& var)
{
    const double m = double(n) * inner;
    mean.assign(channels, 0.0);
    var.assign(channels, 0.0);
    const auto at = [&](int i, int c, int j) { return (std::size_t(i) * channels + c) * inner + j; };
    for (int c = 0; c < channels; ++c) {
        for (int i = 0; i < n; ++i)
            for (int j = 0; j < inner; ++j) mean[c] += x[at(i, c, j)] / m;
        for (int i = 0; i < n; ++i)
            for (int j = 0; j < inner; ++j) var[c] += (x[at(i, c, j)] - mean[c]) * (x[at(i, c, j)] - mean[c]) / m;
    }
    vec y(x.size());
    for (int i = 0; i < n; ++i)
        for (int c = 0; c < channels; ++c)
            for (int j = 0; j < inner; ++j)
                y[at(i, c, j)] = gamma[c] * (x[at(i, c, j)] - mean[c]) / std::sqrt(var[c] + eps) + beta[c];
    return y;
}

// Its gradients: dgamma = sum dy xhat, dbeta = sum dy, and dx through the
// batch's statistics, dx = gamma / sqrt(var + eps) (dy - mean(dy) - xhat
// mean(dy xhat)).
inline void batchnorm_backward(const vec& x, const vec& gamma, const vec& dy, int n, int channels, int inner,
                               double eps, vec& dx, vec& dgamma, vec& dbeta)
{
    vec mean, var;
    batchnorm_forward(x, gamma, vec(channels, 0.0), n, channels, inner, eps, mean, var);
    const double m = double(n) * inner;
    const auto at = [&](int i, int c, int j) { return (std::size_t(i) * channels + c) * inner + j; };
    dx.assign(x.size(), 0.0);
    dgamma.assign(channels, 0.0);
    dbeta.assign(channels, 0.0);
    for (int c = 0; c < channels; ++c) {
        const double inv_std = 1.0 / std::sqrt(var[c] + eps);
        for (int i = 0; i < n; ++i)
            for (int j = 0; j < inner; ++j) {
                dbeta[c] += dy[at(i, c, j)];
                dgamma[c] += dy[at(i, c, j)] * (x[at(i, c, j)] - mean[c]) * inv_std;
            }
        for (int i = 0; i < n; ++i)
            for (int j = 0; j < inner; ++j) {
                const double xhat = (x[at(i, c, j)] - mean[c]) * inv_std;
                dx[at(i, c, j)] = gamma[c] * inv_std * (dy[at(i, c, j)] - dbeta[c] / m - xhat * dgamma[c] / m);
            }
    }
}

}  // namespace pstrain::compute::oracle
