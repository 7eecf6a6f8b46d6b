// Model descriptions: the layer spec, presets, JSON files, the one-line
// errors naming the bad layer, shapes checked against the data, --summary.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE spec
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "trainer/model/spec.hpp"

#include <cstdio>
#include <fstream>

using namespace pstrain;
using namespace pstrain::model;

namespace {

std::string error_of(auto&& f)
{
    try {
        f();
    } catch (const error& e) {
        return e.what();
    }
    return "(no error)";
}

const tensor_shape mnist{true, 1, 28, 28};

}  // namespace

BOOST_AUTO_TEST_CASE(the_issues_spec_parses)
{
    auto s = parse_model_spec(
        "conv2d:32:5x5,maxpool:2,conv2d:64:5x5,maxpool:2,flatten,dense:1024,relu,dropout:0.4,dense:10");
    BOOST_TEST_REQUIRE(s.layers.size() == 9u);
    BOOST_TEST((s.layers[0].kind == layer_kind::conv2d));
    BOOST_TEST(s.layers[0].units == 32);
    BOOST_TEST(s.layers[0].kh == 5);
    BOOST_TEST(s.layers[0].same, "conv2d pads same by default (the TensorFlow MNIST model)");
    BOOST_TEST(s.layers[1].sh == 2, "a pool's stride is its window by default");
    BOOST_TEST(!s.layers[1].same, "pools are valid by default");
    BOOST_TEST(s.layers[7].rate == 0.4f);
    BOOST_TEST((s.loss == loss_kind::softmax_cross_entropy));
    auto shapes = infer_shapes(s, mnist, 10);
    BOOST_TEST(shapes[3].text() == "64x7x7");
    BOOST_TEST(shapes[4].text() == "3136");
}

BOOST_AUTO_TEST_CASE(canonical_text_parses_back_to_itself)
{
    for (const char* text :
         {"conv2d:64:3x3:stride=2:valid:he:relu", "conv2d:8:3x5:stride=1x2", "maxpool:3:stride=2:same", "avgpool:2x3",
          "dense:10:sigmoid", "input:3x32x32", "dropout:0.25", "tanh", "softmax"}) {
        auto s = parse_model_spec(std::string(text) + (std::string(text).starts_with("input") ? ",dense:2" : ""));
        BOOST_TEST(s.layers[0].text() == text);
        BOOST_TEST(parse_model_spec(s.text()).text() == s.text());
    }
    BOOST_TEST(parse_model_spec("dense:10,loss:mse").text() == "dense:10,loss:mse");
    BOOST_TEST(parse_model_spec("conv2d:4:3,dense:2").layers[0].text() == "conv2d:4:3x3");
}

BOOST_AUTO_TEST_CASE(presets_are_specs)
{
    BOOST_TEST(parse_model_spec("cnn").text() == preset_spec("cnn"));
    BOOST_TEST(parse_model_spec("lenet5").text() == preset_spec("lenet5"));
    BOOST_TEST(is_builtin_model("mlp"));
    BOOST_TEST(is_builtin_model("linear"));
    BOOST_TEST(!is_builtin_model("cnn"));
}

BOOST_AUTO_TEST_CASE(a_wrong_layer_is_named_with_what_is_accepted)
{
    BOOST_TEST(
        error_of([] { parse_model_spec("conv2d:32:5x5,maxpol:2,dense:10"); }) ==
        "--model: layer 2 'maxpol:2': no layer 'maxpol': accepted: input, dense, conv2d, maxpool, avgpool, dropout, "
        "flatten, relu, tanh, sigmoid, softmax, batchnorm, loss:xent|mse (see pstrain(1)), or a preset: mlp, linear, "
        "lenet5, cnn");
    BOOST_TEST(error_of([] { parse_model_spec("conv2d:32:5y5"); }) ==
               "--model: layer 1 'conv2d:32:5y5': '5y5' is not a kernel size: accepted: "
               "conv2d:FILTERS:KHxKW[:stride=S][:same|valid][:glorot|he][:relu|tanh|sigmoid], e.g. conv2d:32:5x5:relu");
    BOOST_TEST(error_of([] {
                   parse_model_spec("dense:0");
               }).starts_with("--model: layer 1 'dense:0': '0' is not a count from 1 to 65536"));
    BOOST_TEST(error_of([] {
                   parse_model_spec("dense");
               }).starts_with("--model: layer 1 'dense': missing arguments: accepted: dense:UNITS"));
    BOOST_TEST(
        error_of([] { parse_model_spec("dropout:1"); }).starts_with("--model: layer 1 'dropout:1': '1' is not a rate"));
    BOOST_TEST(error_of([] { parse_model_spec("dropout:-0.1"); }).starts_with("--model: layer 1 'dropout:-0.1'"));
    BOOST_TEST(error_of([] { parse_model_spec("relu:2"); }) ==
               "--model: layer 1 'relu:2': takes no arguments: accepted: no arguments");
    BOOST_TEST(error_of([] {
                   parse_model_spec("maxpool:2:he");
               }).starts_with("--model: layer 1 'maxpool:2:he': unknown option 'he'"));
    BOOST_TEST(error_of([] { parse_model_spec("dense:10,,dense:2"); }).starts_with("--model: layer 2 '': empty"));
    BOOST_TEST(error_of([] { parse_model_spec("dense:10,input:1x2x2"); }) ==
               "--model: layer 2 'input:...': input may only be the first layer");
    BOOST_TEST(error_of([] {
                   parse_model_spec("loss:mse,dense:2");
               }).starts_with("--model: layer 2 'dense:2': a layer after the loss"));
    BOOST_TEST(error_of([] {
                   parse_model_spec("dense:2,loss:hinge");
               }).starts_with("--model: layer 2 'loss:hinge': no such loss"));
    BOOST_TEST(error_of([] { parse_model_spec(""); }).starts_with("--model: empty"));
}

BOOST_AUTO_TEST_CASE(shapes_are_checked_against_the_data)
{
    BOOST_TEST(
        error_of([] {
            infer_shapes(parse_model_spec("conv2d:32:5x5:valid,maxpool:3,conv2d:8:9x9:valid,dense:10"), mnist, 10);
        }) ==
        "--model: layer 3 'conv2d:8:9x9:valid' takes 32x8x8 input: the 9x9 window is larger than the 8x8 image: use a "
        "smaller window or :same padding");
    BOOST_TEST(error_of([] { infer_shapes(parse_model_spec("dense:5"), mnist, 10); }) ==
               "--model: the last layer 1 'dense:5' outputs 5 values but the data has 10 classes: end with dense:10");
    BOOST_TEST(
        error_of([] {
            infer_shapes(parse_model_spec("conv2d:4:3x3,dense:3"), tensor_shape{false, 784, 1, 1}, 3);
        }) ==
        "--model: layer 1 'conv2d:4:3x3' needs images (channels x height x width) but the data gives flat rows of "
        "784 values: start the spec with input:CxHxW, or use IDX image files");
    BOOST_TEST(
        error_of([] {
            infer_shapes(parse_model_spec("input:3x28x28,dense:3"), mnist, 3);
        }).starts_with("--model: layer 1 'input:3x28x28' takes 1x28x28 input: 784 values do not make 3x28x28 images"));
    BOOST_TEST(error_of([] {
                   infer_shapes(parse_model_spec("conv2d:8:3x3,maxpool:2"), mnist, 10);
               }).starts_with("--model: the last layer 2 'maxpool:2' outputs 8x14x14 values"));
    BOOST_TEST(infer_shapes(parse_model_spec("input:1x28x28,conv2d:2:3x3:stride=2,dense:10"),
                            tensor_shape{false, 784, 1, 1}, 10)[1]
                   .text() == "2x14x14");
}

BOOST_AUTO_TEST_CASE(summary_lists_layers_shapes_and_parameters)
{
    const auto s = summary(parse_model_spec("cnn"), mnist, 10);
    BOOST_TEST(s.find("conv2d:32:5x5:relu") != std::string::npos);
    BOOST_TEST(s.find("32x28x28") != std::string::npos);
    BOOST_TEST(s.find("3212288") != std::string::npos);  // dense:1024 on 3136
    BOOST_TEST(s.find("total parameters: 3274634") != std::string::npos);
    BOOST_TEST(s.find("loss: softmax cross-entropy") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(json_files_describe_the_same_models)
{
    const auto a = parse_model_json(R"({"layers":[
        {"type":"conv2d","filters":32,"kernel":[5,5],"activation":"relu"},
        {"type":"maxpool","size":2},
        "conv2d:64:5x5:relu",
        {"type":"maxpool","size":[2,2],"stride":2},
        {"type":"flatten"},
        {"type":"dense","units":1024,"activation":"relu","init":"glorot"},
        {"type":"dropout","rate":0.4},
        {"type":"dense","units":10}],
      "loss":"softmax_cross_entropy"})",
                                    "m.json");
    BOOST_TEST(a.text() == preset_spec("cnn"));
    const auto b =
        parse_model_json(R"({"input":[1,28,28],"layers":["dense:10"],"loss":"mean_squared_error"})", "m.json");
    BOOST_TEST(b.text() == "input:1x28x28,dense:10,loss:mse");
    const auto c = parse_model_json(
        R"({"layers":[{"type":"conv2d","filters":4,"kernel":3,"stride":[1,2],"padding":"valid"},"dense:2"]})",
        "m.json");
    BOOST_TEST(c.layers[0].text() == "conv2d:4:3x3:stride=1x2:valid");
}

BOOST_AUTO_TEST_CASE(json_errors_name_the_file_and_the_layer)
{
    BOOST_TEST(error_of([] { parse_model_json("{", "m.json"); }).starts_with("--model-file m.json: not JSON"));
    BOOST_TEST(error_of([] { parse_model_json("[]", "m.json"); }) ==
               "--model-file m.json: needs an object with a \"layers\" array: see pstrain(1), MODEL FILES");
    BOOST_TEST(error_of([] { parse_model_json(R"({"layers":[],"optimizer":"adam"})", "m.json"); }) ==
               "--model-file m.json: unknown key \"optimizer\": accepted: layers, loss, input");
    BOOST_TEST(
        error_of([] { parse_model_json(R"({"layers":["dense:10",{"type":"dense","unit":10}]})", "m.json"); }) ==
        "--model-file m.json: layer 2 (dense): unknown key \"unit\": accepted: units, filters, kernel, size, stride, "
        "padding, init, activation, rate");
    BOOST_TEST(error_of([] {
                   parse_model_json(R"({"layers":[{"type":"maxpol","size":2}]})", "m.json");
               }).starts_with("--model-file m.json: layer 1 'maxpol:2': no layer 'maxpol'"));
    BOOST_TEST(error_of([] {
                   parse_model_json(R"({"layers":[7]})", "m.json");
               }).starts_with("--model-file m.json: layer 1: give a spec string"));
    BOOST_TEST(
        error_of([] { parse_model_json(R"({"layers":[]})", "m.json"); }).starts_with("--model-file m.json: no layers"));
    BOOST_TEST(error_of([] {
                   parse_model_json(R"({"layers":["dense:2"],"loss":"hinge"})", "m.json");
               }).starts_with("--model-file m.json: \"loss\": \"hinge\": accepted"));
    BOOST_TEST(error_of([] { read_model_file("/nonexistent/m.json"); }) ==
               "--model-file /nonexistent/m.json: cannot open: No such file or directory");
}
