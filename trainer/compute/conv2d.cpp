#include "trainer/compute/conv2d.hpp"

#include "config.h"
#include "pstrain/error.hpp"

#include <cstdlib>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace pstrain::compute::cpu {

#ifdef HAVE_DNNL
std::unique_ptr<conv2d> make_onednn_conv2d(const window2d& w, int filters, precision p);  // conv2d_onednn.cpp
void set_onednn_threads(int threads);
bool have_onednn() { return true; }
void set_conv2d_threads(int threads) { set_onednn_threads(threads); }
#else
bool have_onednn() { return false; }
void set_conv2d_threads(int) {}
#endif

namespace {

class im2col_conv2d final : public conv2d {
public:
    im2col_conv2d(const window2d& w, int filters, int max_batch)
        : w_(w), filters_(filters), workspace_(conv2d_workspace(w, filters, max_batch))
    {}
    const char* name() const override { return "im2col"; }
    void forward(const float* x, const float* k, const float* b, float* y, int n) override
    {
        conv2d_forward(x, k, b, y, n, filters_, w_, workspace_.data());
    }
    void backward(const float* x, const float* k, const float* dy, float* dx, float* dk, float* db, int n) override
    {
        conv2d_backward(x, k, dy, dx, dk, db, n, filters_, w_, workspace_.data());
    }

private:
    window2d w_;
    int filters_;
    std::vector<float> workspace_;
};

}  // namespace

std::unique_ptr<conv2d> make_conv2d(const window2d& w, int filters, int max_batch, conv2d_impl which, precision p)
{
    if (which == conv2d_impl::automatic) {
        const char* env = std::getenv("PSTRAIN_CONV");
        const std::string_view want = env ? env : "";
        // Measured (bench/layer-times): oneDNN 1.6x faster on the cnn
        // preset's 32-channel layer, 0.6x on its 1-channel first layer.
        // bf16 products are oneDNN's alone.
        if (want.empty())
            which =
                p == precision::bf16 || (have_onednn() && w.channels >= 4) ? conv2d_impl::onednn : conv2d_impl::im2col;
        else if (want == "im2col") which = conv2d_impl::im2col;
        else if (want == "onednn") which = conv2d_impl::onednn;
        else throw error(fmt::format("PSTRAIN_CONV={}: accepted: im2col, onednn (or unset: the fastest built)", want));
    }
    if (which == conv2d_impl::im2col && p == precision::bf16)
        throw error("the im2col convolution multiplies in fp32: unset PSTRAIN_CONV=im2col for --precision bf16");
    if (which == conv2d_impl::im2col) return std::make_unique<im2col_conv2d>(w, filters, max_batch);
#ifdef HAVE_DNNL
    return make_onednn_conv2d(w, filters, p);
#else
    throw error(
        "oneDNN convolution: this pstrain was built without oneDNN: install libdnnl-dev and configure again, or "
        "unset PSTRAIN_CONV");
#endif
}

}  // namespace pstrain::compute::cpu
