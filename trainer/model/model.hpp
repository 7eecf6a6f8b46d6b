// Models as named flat tensors: every parameter lives in one flat float
// vector (tensor after tensor), so the PS shards it by byte ranges and a
// large tensor is split naturally.
#pragma once

#include "trainer/compute/backend.hpp"
#include "trainer/data/dataset.hpp"
#include "trainer/model/spec.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace pstrain::model {

struct tensor_spec {
    std::string name;        // "hidden_0/weights"
    std::vector<int> shape;  // {784, 100}
    std::size_t offset = 0;  // into the flat vector
    std::size_t size = 0;    // elements
    // A moving average (a batch normalization's moving mean or variance):
    // the PS runs no optimizer on it but adds what the worker pushes, the
    // step toward the batch's statistic (client_config::tensor_kinds).
    bool moving_average = false;
};

// One training batch's outcome.
struct batch_result {
    double loss = 0;      // mean over the batch
    double accuracy = 0;  // fraction classified right; 0 for regression
};

struct eval_result {
    double accuracy = 0;  // classification; 0 for regression
    double loss = 0;      // mean cross-entropy, or mean squared error
    std::size_t examples = 0;
};

// What every model has: its tensors in the flat vector, a name that is the
// shape key of checkpoints, and initial values from a seed.
class tensor_model {
public:
    virtual ~tensor_model() = default;

    const std::vector<tensor_spec>& tensors() const { return tensors_; }
    std::size_t num_params() const { return tensors_.empty() ? 0 : tensors_.back().offset + tensors_.back().size; }
    // "784-100-10 mlp" or "linear": also the shape key of checkpoints.
    virtual std::string describe() const = 0;
    virtual bool is_classifier() const = 0;

    // Initial values, from the seed only.
    virtual void initialize(std::span<float> params, std::uint64_t seed) const = 0;

protected:
    void add_tensor(std::string name, std::vector<int> shape);
    std::vector<tensor_spec> tensors_;
};

// A model of dense examples (data::dataset rows).
class model : public tensor_model {
public:
    // Mean loss (and accuracy) over the batch rows of `d`; writes the
    // gradient of the mean loss into `grads` (host, num_params()).
    // Allocates nothing.
    virtual batch_result compute_gradients(std::span<const float> params, const data::dataset& d,
                                           std::span<const std::uint32_t> rows, std::span<float> grads) = 0;

    virtual eval_result evaluate(std::span<const float> params, const data::dataset& d) = 0;

    // The next batch, known while this step's exchange is in flight: a
    // model may gather its rows now into where compute_gradients reads
    // them, so that the next compute_gradients of the same rows of the same
    // `d` (unchanged in between) finds them there and goes straight to
    // forward.  Any other batch or an evaluation in between is gathered as
    // always: the results are the same with it or without.
    virtual void prefetch(const data::dataset&, std::span<const std::uint32_t>) {}

    // The overlapped step's hook, called by compute_gradients: each time
    // backward has completed the gradient of elements [from, num_params())
    // in the host `grads` (the last layers come first), with the batch's
    // mean loss (known before backward); and once with from 0 at the end.
    // A backend whose gradient reaches the host only at the end (a GPU's)
    // calls it only then.  It may throw: compute_gradients then stops.
    using gradient_ready = std::function<void(std::size_t from, double loss)>;
    void on_gradient_ready(gradient_ready hook) { ready_ = std::move(hook); }

protected:
    // Whether a hook wants to hear of each layer.
    bool overlapping() const { return static_cast<bool>(ready_); }
    // Backward completed [from, num_params()) in the host gradient.
    void gradient_ready_from(std::size_t from, double loss) const
    {
        if (ready_) ready_(from, loss);
    }

private:
    gradient_ready ready_;
};

// What a model of dense examples moves between the host and its backend's
// memory each step: the parameters in, the batch's rows and labels in, the
// gradient out.  On a host-memory (CPU) backend nothing moves: the host
// spans are used in place.  On a GPU the batch goes through page-locked
// staging.  Allocated once, for max_rows rows of `cols` values.
class device_staging {
public:
    device_staging(compute::backend& be, std::size_t max_rows, std::size_t cols, std::size_t num_params);
    // The parameters where the kernels read them.
    const float* parameters(std::span<const float> host);
    // Where the backward pass writes the gradient; gradients_out then
    // brings it to `host`.
    float* gradients(std::span<float> host);
    void gradients_out(std::span<float> host);
    // The overlapped step: backward has completed the gradient from `from`
    // on.  On a device, the part of it not on its way yet starts coming to
    // `host` behind the kernels (backend::start_copy_to_host), while the
    // next layers' kernels run; returns the offset from which `host` is
    // complete now (host memory: `from`).  gradients_out waits for the
    // rest.
    std::size_t gradient_done_from(std::span<float> host, std::size_t from);
    // Rows `rows` of d into x (rows x d.cols) and their labels, both in the
    // backend's memory.
    void gather(const data::dataset& d, std::span<const std::uint32_t> rows, float* x, std::int32_t* labels);
    // model::prefetch: gather now; the next gather of the same rows of `d`
    // into the same x and labels finds them there and copies nothing.  On
    // a device the copy in is queued now, behind the step's kernels, which
    // have completed (compute_gradients waits for its gradient): it
    // overwrites nothing they read.
    void prefetch(const data::dataset& d, std::span<const std::uint32_t> rows, float* x, std::int32_t* labels);

private:
    compute::backend& be_;
    // What prefetch gathered, until the next gather: the data, where to and
    // the rows.
    struct gathered {
        const data::dataset* d = nullptr;
        const float* x = nullptr;
        const std::int32_t* labels = nullptr;
        std::vector<std::uint32_t> rows;
    };
    gathered ahead_;
    compute::device_array<float> params_, grads_;
    compute::host_array<float> inputs_;
    compute::host_array<std::int32_t> labels_;
    // This step's gradient copies to the host (a device's), in the order
    // they started: the copy's number and the offset it starts at.
    struct started_copy {
        std::size_t number = 0, from = 0;
    };
    std::vector<started_copy> copies_;
    std::size_t next_landing_ = 0;  // the first copy not known to have landed
    std::size_t copied_from_ = 0;   // copies started cover [copied_from_, end)
    std::size_t landed_from_ = 0;   // the host holds [landed_from_, end)
};

// A range of the flat vector, [begin, end).
struct flat_range {
    std::size_t begin = 0, end = 0;
    bool operator==(const flat_range&) const = default;
};

// The overlapped step's buckets: the tensors from the last to the first
// (the order backward completes them), grouped into ranges of whole tensors
// of at least `bytes` each (the last one, the first tensors, may be
// smaller), last first.  Together they cover the flat vector.
std::vector<flat_range> backward_buckets(const std::vector<tensor_spec>& tensors, std::size_t bytes);

// "256,128" -> {256, 128}; throws pstrain::error naming the flag and the fix.
std::vector<int> parse_hidden_units(const std::string& text);

// An MLP: inputs -> hidden (ReLU) ... -> classes, softmax cross-entropy.
// Workspaces are sized for max_batch rows.
std::unique_ptr<model> make_mlp(compute::backend& be, int inputs, const std::vector<int>& hidden, int classes,
                                std::size_t max_batch);
// y = w x + b with squared error.
std::unique_ptr<model> make_linear(compute::backend& be, std::size_t max_batch);

// A model from a layer description (spec.hpp), on any backend: the CPU's,
// or CUDA's with cuDNN (its layer kernels, make_layer_kernels; a CUDA build
// without cuDNN refuses).  `input` is the data's shape (data_shape), `seed`
// draws the dropout masks.  Throws pstrain::error naming the layer whose
// shapes do not fit, or the device it cannot run on.
std::unique_ptr<model> make_sequential(compute::backend& be, const model_spec& spec, const tensor_shape& input,
                                       int classes, std::size_t max_batch, std::uint64_t seed);

// The shape of one example of `d`: an image when the data know it, else flat.
tensor_shape data_shape(const data::dataset& d);

// TensorFlow's truncated_normal: normal(0, stddev) redrawn beyond 2 stddev,
// from a portable generator (same values with every standard library).
void truncated_normal(std::span<float> out, float stddev, std::uint64_t seed);

}  // namespace pstrain::model
