// Model descriptions users write: a layer spec a person can type
// ("conv2d:32:5x5:relu,maxpool:2,flatten,dense:10"), a preset name, or a JSON
// file.  Parsing checks the syntax (one line naming the bad layer and what
// is accepted); infer_shapes checks the shapes against the data.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pstrain::model {

enum class layer_kind {
    input,
    dense,
    conv2d,
    maxpool,
    avgpool,
    dropout,
    flatten,
    relu,
    tanh,
    sigmoid,
    softmax,
    batchnorm
};
enum class init_kind { glorot, he };
enum class activation_kind { none, relu, tanh, sigmoid };
enum class loss_kind { softmax_cross_entropy, mean_squared_error };

struct layer_spec {
    layer_kind kind = layer_kind::flatten;
    int units = 0;                            // dense units, conv2d filters
    int kh = 0, kw = 0;                       // conv2d kernel, pool window
    int sh = 1, sw = 1;                       // strides (pools: the window by default)
    bool same = true;                         // padding: conv2d same by default, pools valid
    float rate = 0;                           // dropout
    int channels = 0, height = 0, width = 0;  // input
    init_kind init = init_kind::glorot;
    activation_kind activation = activation_kind::none;  // fused after dense/conv2d

    // The canonical text ("conv2d:64:3x3:stride=2:valid:he:relu"), which
    // parses back to the same layer.
    std::string text() const;
};

struct model_spec {
    std::vector<layer_spec> layers;
    loss_kind loss = loss_kind::softmax_cross_entropy;

    // The canonical spec, layers and loss: the checkpoint's model key.
    std::string text() const;
};

// A layer's output: channels x height x width, or `features` flat values.
struct tensor_shape {
    bool image = false;
    int channels = 0, height = 0, width = 0;
    std::size_t size() const { return std::size_t(channels) * height * width; }
    std::string text() const;  // "32x14x14" or "1024"
};

// "lenet5", "cnn" (the presets written as specs), or a layer spec.  `mlp`
// and `linear` are not layer specs (their own models); is_builtin_model tells.
bool is_builtin_model(std::string_view name);  // mlp or linear
model_spec parse_model_spec(std::string_view text);
// A --model-file's JSON text; `file` names it in errors.
model_spec parse_model_json(std::string_view json_text, const std::string& file);
model_spec read_model_file(const std::string& file);

// The preset's layer spec, or the empty string.
std::string preset_spec(std::string_view name);

// Each layer's output shape from the data's input shape (an image, or flat
// rows of `features`) and the classes of its labels; throws pstrain::error
// naming the layer (position and text) and the shapes that do not fit.
std::vector<tensor_shape> infer_shapes(const model_spec& spec, const tensor_shape& input, int classes);

// Parameters of a layer given its input shape (0 for most).
std::size_t layer_params(const layer_spec& l, const tensor_shape& in);

// A Keras-like table: layer, output shape, parameters; and the totals.
std::string summary(const model_spec& spec, const tensor_shape& input, int classes);

}  // namespace pstrain::model
