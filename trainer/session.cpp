#include "trainer/session.hpp"

#include "common/error.hpp"
#include "common/log.hpp"

#include <cmath>

#include <fmt/format.h>

namespace pstrain::trainer {

session open_session(const train_options& o)
{
    session s;
    compute::device_kind kind = o.device == "cpu"    ? compute::device_kind::cpu
                                : o.device == "cuda" ? compute::device_kind::cuda
                                                     : compute::device_kind::automatic;
    s.backend = compute::make_backend(kind, o.threads);
    if (o.model == "linear") {
        s.data = data::make_linear(1000, 200, o.seed);
        s.net = model::make_linear(*s.backend, static_cast<std::size_t>(o.batch_size));
    } else {
        s.data = data::load_directory(o.data_dir);
        if (s.data.train.num_classes < 2)
            throw error(fmt::format("{}: the labels name fewer than 2 classes", o.data_dir));
        s.net = model::make_mlp(*s.backend, static_cast<int>(s.data.train.cols), o.hidden, s.data.train.num_classes,
                                static_cast<std::size_t>(o.batch_size));
    }
    log::info("data: {} ({} training, {} test examples); model: {} ({} parameters, {:.1f} KB); device: {}",
              s.data.description, s.data.train.rows, s.data.test.rows, s.net->describe(), s.net->num_params(),
              s.net->num_params() * 4 / 1000.0, s.backend->name());
    return s;
}

ps::optimizer_config optimizer_from(const train_options& o)
{
    ps::optimizer_config cfg;
    cfg.kind = ps::parse_optimizer(o.optimizer);
    cfg.learning_rate = o.learning_rate;
    return cfg;
}

nlohmann::json evaluation_fields(const session& s, const model::eval_result& r, std::span<const float> params)
{
    if (s.net->is_classifier()) return {{"test_accuracy", r.accuracy}, {"test_cross_entropy", r.loss}};
    return {{"test_accuracy", nullptr}, {"test_cross_entropy", nullptr}, {"test_mse", r.loss},
            {"weight", params[0]}, {"bias", params[1]}};
}

void check_loss(double loss, std::int64_t step)
{
    if (!std::isfinite(loss))
        throw error(fmt::format("the training loss is {} at step {}: lower --learning-rate", loss, step));
}

}  // namespace pstrain::trainer
