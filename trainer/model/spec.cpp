#include "trainer/model/spec.hpp"

#include "pstrain/error.hpp"
#include "common/parse.hpp"
#include "trainer/compute/cpu_layers.hpp"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace pstrain::model {
namespace {

constexpr int max_layers = 64;
constexpr int max_size = 1 << 16;

// What each layer accepts, for the error lines.
const char* usage(layer_kind k)
{
    switch (k) {
    case layer_kind::input: return "input:CxHxW (channels x height x width of flat rows), e.g. input:1x28x28";
    case layer_kind::dense: return "dense:UNITS[:glorot|he][:relu|tanh|sigmoid], e.g. dense:1024:relu";
    case layer_kind::conv2d:
        return "conv2d:FILTERS:KHxKW[:stride=S][:same|valid][:glorot|he][:relu|tanh|sigmoid], e.g. conv2d:32:5x5:relu";
    case layer_kind::maxpool: return "maxpool:K[xK][:stride=S][:valid|same], e.g. maxpool:2";
    case layer_kind::avgpool: return "avgpool:K[xK][:stride=S][:valid|same], e.g. avgpool:2";
    case layer_kind::dropout: return "dropout:RATE with 0 <= RATE < 1, e.g. dropout:0.4";
    case layer_kind::batchnorm: return "batchnorm with no arguments (momentum 0.99 and epsilon 0.001, as Keras)";
    default: return "no arguments";
    }
}

const char* all_layers =
    "input, dense, conv2d, maxpool, avgpool, dropout, flatten, relu, tanh, sigmoid, softmax, batchnorm, loss:xent|mse "
    "(see pstrain(1)), or a preset: mlp, linear, lenet5, cnn";

std::optional<layer_kind> kind_named(std::string_view name)
{
    static const std::pair<std::string_view, layer_kind> names[] = {
        {"input", layer_kind::input},     {"dense", layer_kind::dense},     {"conv2d", layer_kind::conv2d},
        {"maxpool", layer_kind::maxpool}, {"avgpool", layer_kind::avgpool}, {"dropout", layer_kind::dropout},
        {"flatten", layer_kind::flatten}, {"relu", layer_kind::relu},       {"tanh", layer_kind::tanh},
        {"sigmoid", layer_kind::sigmoid}, {"softmax", layer_kind::softmax}, {"batchnorm", layer_kind::batchnorm}};
    for (const auto& [n, k] : names)
        if (n == name) return k;
    return std::nullopt;
}

std::string_view kind_name(layer_kind k)
{
    switch (k) {
    case layer_kind::input: return "input";
    case layer_kind::dense: return "dense";
    case layer_kind::conv2d: return "conv2d";
    case layer_kind::maxpool: return "maxpool";
    case layer_kind::avgpool: return "avgpool";
    case layer_kind::dropout: return "dropout";
    case layer_kind::flatten: return "flatten";
    case layer_kind::relu: return "relu";
    case layer_kind::tanh: return "tanh";
    case layer_kind::sigmoid: return "sigmoid";
    case layer_kind::softmax: return "softmax";
    case layer_kind::batchnorm: return "batchnorm";
    }
    return "?";
}

std::string_view activation_name(activation_kind a)
{
    switch (a) {
    case activation_kind::relu: return "relu";
    case activation_kind::tanh: return "tanh";
    case activation_kind::sigmoid: return "sigmoid";
    case activation_kind::none: break;
    }
    return "";
}

// "5x5" or "5" -> {5, 5}
bool parse_pair(std::string_view text, int& a, int& b)
{
    auto parts = split(text, 'x');
    if (parts.size() > 2) return false;
    auto x = parse_count(parts[0], 1, max_size);
    auto y = parts.size() == 2 ? parse_count(parts[1], 1, max_size) : x;
    if (!x || !y) return false;
    a = static_cast<int>(*x);
    b = static_cast<int>(*y);
    return true;
}

bool parse_rate(std::string_view text, float& rate)
{
    double v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size() || !(v >= 0 && v < 1)) return false;
    rate = static_cast<float>(v);
    return true;
}

[[noreturn]] void bad_layer(std::size_t position, std::string_view text, std::string_view why, const char* accepted)
{
    throw error(fmt::format("--model: layer {} '{}': {}: {}", position, text, why, accepted));
}

layer_spec parse_layer(std::string_view item, std::size_t position)
{
    auto fields = split(item, ':');
    auto kind = kind_named(fields[0]);
    if (!kind)
        bad_layer(position, item, fmt::format("no layer '{}'", fields[0]),
                  fmt::format("accepted: {}", all_layers).c_str());
    layer_spec l;
    l.kind = *kind;
    const char* accepted = usage(l.kind);
    auto fail = [&](std::string_view why) {
        bad_layer(position, item, why, fmt::format("accepted: {}", accepted).c_str());
    };
    std::size_t positional = 0;
    switch (l.kind) {
    case layer_kind::input: {
        auto dims = fields.size() == 2 ? split(fields[1], 'x') : std::vector<std::string_view>{};
        if (dims.size() != 3) fail("give channels x height x width");
        std::optional<std::int64_t> v[3];
        for (int i = 0; i < 3; ++i)
            if (!(v[i] = parse_count(dims[i], 1, max_size)))
                fail(fmt::format("'{}' is not a size from 1 to {}", dims[i], max_size));
        l.channels = static_cast<int>(*v[0]);
        l.height = static_cast<int>(*v[1]);
        l.width = static_cast<int>(*v[2]);
        return l;
    }
    case layer_kind::dense: positional = 1; break;
    case layer_kind::conv2d: positional = 2; break;
    case layer_kind::maxpool:
    case layer_kind::avgpool:
        positional = 1;
        l.same = false;
        break;
    case layer_kind::dropout: positional = 1; break;
    default:
        if (fields.size() != 1) fail("takes no arguments");
        return l;
    }
    if (fields.size() < positional + 1) fail("missing arguments");
    switch (l.kind) {
    case layer_kind::dense:
    case layer_kind::conv2d: {
        auto units = parse_count(fields[1], 1, max_size);
        if (!units) fail(fmt::format("'{}' is not a count from 1 to {}", fields[1], max_size));
        l.units = static_cast<int>(*units);
        if (l.kind == layer_kind::conv2d && !parse_pair(fields[2], l.kh, l.kw))
            fail(fmt::format("'{}' is not a kernel size", fields[2]));
        break;
    }
    case layer_kind::maxpool:
    case layer_kind::avgpool:
        if (!parse_pair(fields[1], l.kh, l.kw)) fail(fmt::format("'{}' is not a window size", fields[1]));
        l.sh = l.kh;
        l.sw = l.kw;
        break;
    case layer_kind::dropout:
        if (fields.size() != 2 || !parse_rate(fields[1], l.rate))
            fail(fmt::format("'{}' is not a rate", fields.back()));
        return l;
    default: break;
    }
    const bool windowed =
        l.kind == layer_kind::conv2d || l.kind == layer_kind::maxpool || l.kind == layer_kind::avgpool;
    const bool weighted = l.kind == layer_kind::conv2d || l.kind == layer_kind::dense;
    for (std::size_t i = positional + 1; i < fields.size(); ++i) {
        std::string_view f = fields[i];
        if (windowed && f.starts_with("stride=")) {
            if (!parse_pair(f.substr(7), l.sh, l.sw)) fail(fmt::format("'{}' is not a stride", f));
        } else if (windowed && (f == "same" || f == "valid")) {
            l.same = f == "same";
        } else if (weighted && (f == "glorot" || f == "he")) {
            l.init = f == "he" ? init_kind::he : init_kind::glorot;
        } else if (weighted && (f == "relu" || f == "tanh" || f == "sigmoid")) {
            l.activation = f == "relu"   ? activation_kind::relu
                           : f == "tanh" ? activation_kind::tanh
                                         : activation_kind::sigmoid;
        } else {
            fail(fmt::format("unknown option '{}'", f));
        }
    }
    return l;
}

void check_structure(const model_spec& s, const std::string& where)
{
    if (s.layers.empty()) throw error(fmt::format("{}: no layers: give at least one, e.g. dense:10", where));
    if (s.layers.size() > max_layers)
        throw error(fmt::format("{}: {} layers, at most {}", where, s.layers.size(), max_layers));
    for (std::size_t i = 1; i < s.layers.size(); ++i)
        if (s.layers[i].kind == layer_kind::input)
            throw error(fmt::format("{}: layer {} 'input:...': input may only be the first layer", where, i + 1));
}

}  // namespace

std::string layer_spec::text() const
{
    std::string s(kind_name(kind));
    switch (kind) {
    case layer_kind::input: return fmt::format("input:{}x{}x{}", channels, height, width);
    case layer_kind::dense: s += fmt::format(":{}", units); break;
    case layer_kind::conv2d:
        s += fmt::format(":{}:{}x{}", units, kh, kw);
        if (sh != 1 || sw != 1) s += sh == sw ? fmt::format(":stride={}", sh) : fmt::format(":stride={}x{}", sh, sw);
        if (!same) s += ":valid";
        break;
    case layer_kind::maxpool:
    case layer_kind::avgpool:
        s += kh == kw ? fmt::format(":{}", kh) : fmt::format(":{}x{}", kh, kw);
        if (sh != kh || sw != kw) s += sh == sw ? fmt::format(":stride={}", sh) : fmt::format(":stride={}x{}", sh, sw);
        if (same) s += ":same";
        return s;
    case layer_kind::dropout: return fmt::format("dropout:{}", rate);
    default: return s;
    }
    if (init == init_kind::he) s += ":he";
    if (activation != activation_kind::none) s += fmt::format(":{}", activation_name(activation));
    return s;
}

std::string model_spec::text() const
{
    std::string s;
    for (const auto& l : layers) s += (s.empty() ? "" : ",") + l.text();
    if (loss == loss_kind::mean_squared_error) s += ",loss:mse";
    return s;
}

std::string tensor_shape::text() const
{
    return image ? fmt::format("{}x{}x{}", channels, height, width) : std::to_string(size());
}

bool is_builtin_model(std::string_view name) { return name == "mlp" || name == "linear"; }

std::string preset_spec(std::string_view name)
{
    // LeNet-5 on 28x28 images: the first convolution pads to keep 28x28 (as
    // LeCun's 32x32 input did), then 5x5 valid convolutions, average pooling, tanh.
    if (name == "lenet5")
        return "conv2d:6:5x5:tanh,avgpool:2,conv2d:16:5x5:valid:tanh,avgpool:2,flatten,dense:120:tanh,dense:84:tanh,"
               "dense:10";
    // The classic distributed-TensorFlow MNIST model (the Estimator tutorial's cnn_model_fn).
    if (name == "cnn")
        return "conv2d:32:5x5:relu,maxpool:2,conv2d:64:5x5:relu,maxpool:2,flatten,dense:1024:relu,dropout:0.4,dense:10";
    return {};
}

model_spec parse_model_spec(std::string_view text)
{
    if (auto preset = preset_spec(text); !preset.empty()) return parse_model_spec(preset);
    model_spec s;
    if (text.empty()) throw error(fmt::format("--model: empty: give a preset or layers, {}", all_layers));
    std::size_t position = 0;
    bool have_loss = false;
    for (std::string_view item : split(text, ',')) {
        ++position;
        if (item.starts_with("loss:")) {
            if (item == "loss:xent") s.loss = loss_kind::softmax_cross_entropy;
            else if (item == "loss:mse") s.loss = loss_kind::mean_squared_error;
            else
                bad_layer(position, item, "no such loss",
                          "accepted: loss:xent (softmax cross-entropy) or loss:mse (mean squared error)");
            if (have_loss) bad_layer(position, item, "a second loss", "give one loss, last");
            have_loss = true;
            continue;
        }
        if (have_loss) bad_layer(position, item, "a layer after the loss", "put loss:... last");
        if (item.empty()) bad_layer(position, item, "empty", "remove the doubled comma");
        s.layers.push_back(parse_layer(item, position));
    }
    check_structure(s, "--model");
    return s;
}

model_spec parse_model_json(std::string_view json_text, const std::string& file)
{
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(json_text);
    } catch (const nlohmann::json::exception& e) {
        throw error(fmt::format("--model-file {}: not JSON ({}): see pstrain(1), MODEL FILES", file, e.what()));
    }
    const std::string where = fmt::format("--model-file {}", file);
    if (!j.is_object() || !j.contains("layers") || !j["layers"].is_array())
        throw error(fmt::format("{}: needs an object with a \"layers\" array: see pstrain(1), MODEL FILES", where));
    for (const auto& [key, value] : j.items())
        if (key != "layers" && key != "loss" && key != "input")
            throw error(fmt::format("{}: unknown key \"{}\": accepted: layers, loss, input", where, key));
    model_spec s;
    std::size_t position = 0;
    if (j.contains("input")) {
        const auto& in = j["input"];
        if (!in.is_array() || in.size() != 3 || !in[0].is_number_integer() || !in[1].is_number_integer() ||
            !in[2].is_number_integer())
            throw error(fmt::format("{}: \"input\" must be [channels, height, width]", where));
        s.layers.push_back(parse_layer(fmt::format("input:{}x{}x{}", in[0].get<std::int64_t>(),
                                                   in[1].get<std::int64_t>(), in[2].get<std::int64_t>()),
                                       ++position));
    }
    for (const auto& l : j["layers"]) {
        ++position;
        std::string item;
        if (l.is_string()) {
            item = l.get<std::string>();
        } else if (l.is_object() && l.contains("type") && l["type"].is_string()) {
            // {"type":"conv2d","filters":32,"kernel":[5,5],"stride":1,"padding":"same","init":"he","activation":"relu"}
            // is written as its spec text and parsed as one.
            item = l["type"].get<std::string>();
            auto number = [&](const char* key) {
                if (!l[key].is_number())
                    throw error(fmt::format("{}: layer {}: \"{}\" must be a number", where, position, key));
                return l[key].dump();
            };
            auto size = [&](const char* key) {
                const auto& v = l[key];
                if (v.is_array() && v.size() == 2 && v[0].is_number_integer() && v[1].is_number_integer())
                    return fmt::format("{}x{}", v[0].get<std::int64_t>(), v[1].get<std::int64_t>());
                if (v.is_number_integer()) return v.dump();
                throw error(fmt::format("{}: layer {}: \"{}\" must be a whole number or [height, width]", where,
                                        position, key));
            };
            for (const auto& [key, value] : l.items()) {
                if (key == "type") continue;
                const bool known = key == "units" || key == "filters" || key == "kernel" || key == "size" ||
                                   key == "stride" || key == "padding" || key == "init" || key == "activation" ||
                                   key == "rate";
                if (!known)
                    throw error(
                        fmt::format("{}: layer {} ({}): unknown key \"{}\": accepted: units, filters, kernel, size, "
                                    "stride, padding, init, activation, rate",
                                    where, position, item, key));
                if (!value.is_string() && (key == "padding" || key == "init" || key == "activation"))
                    throw error(fmt::format("{}: layer {}: \"{}\" must be a string", where, position, key));
            }
            if (l.contains("units")) item += ":" + number("units");
            if (l.contains("filters")) item += ":" + number("filters");
            if (l.contains("kernel")) item += ":" + size("kernel");
            if (l.contains("size")) item += ":" + size("size");
            if (l.contains("rate")) item += ":" + number("rate");
            if (l.contains("stride")) item += ":stride=" + size("stride");
            for (const char* key : {"padding", "init", "activation"})
                if (l.contains(key)) item += ":" + l[key].get<std::string>();
        } else {
            throw error(fmt::format("{}: layer {}: give a spec string (\"conv2d:32:5x5\") or an object with \"type\"",
                                    where, position));
        }
        try {
            if (item.starts_with("loss:")) throw error("a loss is the file's \"loss\" key");
            s.layers.push_back(parse_layer(item, position));
        } catch (const error& e) {
            std::string msg = e.what();
            if (msg.starts_with("--model: ")) msg = msg.substr(9);
            throw error(fmt::format("{}: {}", where, msg));
        }
    }
    if (j.contains("loss")) {
        const auto& loss = j["loss"];
        if (loss == "softmax_cross_entropy" || loss == "xent") s.loss = loss_kind::softmax_cross_entropy;
        else if (loss == "mean_squared_error" || loss == "mse") s.loss = loss_kind::mean_squared_error;
        else
            throw error(fmt::format("{}: \"loss\": {}: accepted: \"softmax_cross_entropy\" or \"mean_squared_error\"",
                                    where, loss.dump()));
    }
    check_structure(s, where);
    return s;
}

model_spec read_model_file(const std::string& file)
{
    std::ifstream in(file);
    if (!in) throw error(fmt::format("--model-file {}: cannot open: {}", file, std::strerror(errno)));
    std::stringstream text;
    text << in.rdbuf();
    if (in.bad()) throw error(fmt::format("--model-file {}: cannot read: {}", file, std::strerror(errno)));
    return parse_model_json(text.str(), file);
}

std::size_t layer_params(const layer_spec& l, const tensor_shape& in)
{
    if (l.kind == layer_kind::dense) return (in.size() + 1) * std::size_t(l.units);
    if (l.kind == layer_kind::conv2d) return (std::size_t(in.channels) * l.kh * l.kw + 1) * std::size_t(l.units);
    // gamma and beta (trained), the moving mean and variance (moving averages)
    if (l.kind == layer_kind::batchnorm) return 4 * std::size_t(in.image ? in.channels : static_cast<int>(in.size()));
    return 0;
}

namespace {

// The spec with its 2-D layers (and the activations, dropouts and batch
// normalizations that follow each) moved before its first flatten or
// dense layer: what a spec that mixes them up most likely meant.
std::string reordered(const model_spec& spec)
{
    const auto two_d = [](layer_kind k) {
        return k == layer_kind::conv2d || k == layer_kind::maxpool || k == layer_kind::avgpool;
    };
    const auto flat = [](layer_kind k) { return k == layer_kind::flatten || k == layer_kind::dense; };
    std::vector<const layer_spec*> front, back;
    bool seen_flat = false, in_two_d = false;
    for (const auto& l : spec.layers) {
        if (l.kind == layer_kind::input) {
            front.push_back(&l);
            continue;
        }
        if (two_d(l.kind)) in_two_d = true;
        else if (flat(l.kind)) in_two_d = false, seen_flat = true;
        (in_two_d || !seen_flat ? front : back).push_back(&l);
    }
    std::string text;
    for (const auto* group : {&front, &back})
        for (const auto* l : *group) text += (text.empty() ? "" : ",") + l->text();
    return text;
}

}  // namespace

std::vector<tensor_shape> infer_shapes(const model_spec& spec, const tensor_shape& input, int classes)
{
    std::vector<tensor_shape> out;
    tensor_shape cur = input;
    std::size_t position = 0;
    std::size_t flat_at = 0;  // the first flatten or dense layer (1-based), 0 while none
    for (const auto& l : spec.layers) {
        ++position;
        auto fail = [&](const std::string& why) {
            throw error(fmt::format("--model: layer {} '{}' takes {} input: {}", position, l.text(),
                                    cur.image ? cur.text() : fmt::format("flat rows of {} values as", cur.size()),
                                    why));
        };
        switch (l.kind) {
        case layer_kind::input:
            if (l.channels * std::size_t(l.height) * l.width != cur.size())
                fail(fmt::format("{} values do not make {} images: fix input: to match the data", cur.size(),
                                 l.text().substr(6)));
            cur = {true, l.channels, l.height, l.width};
            break;
        case layer_kind::conv2d:
        case layer_kind::maxpool:
        case layer_kind::avgpool: {
            if (!cur.image && flat_at > 0)
                throw error(fmt::format(
                    "--model: layer {} '{}' comes after layer {} '{}': 2-D layers (conv2d, maxpool, avgpool) "
                    "must come before flatten and dense: reorder them, e.g. --model '{}'",
                    position, l.text(), flat_at, spec.layers[flat_at - 1].text(), reordered(spec)));
            if (!cur.image)
                throw error(fmt::format(
                    "--model: layer {} '{}' needs images (channels x height x width) but the data gives flat "
                    "rows of {} values: start the spec with input:CxHxW, or use IDX image files",
                    position, l.text(), cur.size()));
            compute::window2d w{cur.channels, cur.height, cur.width, l.kh, l.kw, l.sh, l.sw};
            if (!compute::resolve_padding(w, l.same))
                fail(fmt::format(
                    "the {}x{} window is larger than the {}x{} image: use a smaller window or :same padding", l.kh,
                    l.kw, cur.height, cur.width));
            cur = {true, l.kind == layer_kind::conv2d ? l.units : cur.channels, w.out_h, w.out_w};
            break;
        }
        case layer_kind::flatten:
        case layer_kind::dense:
            if (flat_at == 0) flat_at = position;
            cur = {false, static_cast<int>(l.kind == layer_kind::dense ? l.units : cur.size()), 1, 1};
            if (l.kind == layer_kind::flatten && cur.size() > (std::size_t(1) << 28))
                fail("more than 2^28 values per example");
            break;
        default: break;
        }
        out.push_back(cur);
    }
    const auto& last = spec.layers.back();
    if (cur.image || cur.size() != static_cast<std::size_t>(classes))
        throw error(fmt::format(
            "--model: the last layer {} '{}' outputs {} values but the data has {} classes: end with dense:{}",
            spec.layers.size(), last.text(), cur.text(), classes, classes));
    std::size_t total = 0;
    tensor_shape in = input;
    for (std::size_t i = 0; i < spec.layers.size(); ++i) {
        total += layer_params(spec.layers[i], in);
        in = out[i];
    }
    if (total > (std::size_t(1) << 31))
        throw error(fmt::format("--model: {} parameters: more than 2^31, make the layers smaller", total));
    return out;
}

std::string summary(const model_spec& spec, const tensor_shape& input, int classes)
{
    auto shapes = infer_shapes(spec, input, classes);
    std::string s = fmt::format("{:<4} {:<44} {:>14} {:>12}\n", "#", "layer", "output shape", "parameters");
    s += fmt::format("{:<4} {:<44} {:>14} {:>12}\n", "", "(data)", input.text(), "");
    std::size_t total = 0;
    tensor_shape in = input;
    for (std::size_t i = 0; i < spec.layers.size(); ++i) {
        const auto n = layer_params(spec.layers[i], in);
        total += n;
        s += fmt::format("{:<4} {:<44} {:>14} {:>12}\n", i + 1, spec.layers[i].text(), shapes[i].text(), n);
        in = shapes[i];
    }
    s += fmt::format("loss: {}\n",
                     spec.loss == loss_kind::mean_squared_error ? "mean squared error" : "softmax cross-entropy");
    s += fmt::format("total parameters: {} ({:.1f} MB of float32)\n", total, total * 4 / 1e6);
    return s;
}

}  // namespace pstrain::model
