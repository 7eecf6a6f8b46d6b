#include "trainer/app/session.hpp"

#include "pstrain/error.hpp"
#include "common/log.hpp"
#include "trainer/app/ctr_work.hpp"
#include "trainer/app/threads.hpp"

#include <cstdlib>

#include <fmt/format.h>

namespace pstrain::trainer {

const model::tensor_model& session::shape() const
{
    if (net) return *net;
    return *ctr;
}

session open_session(const train_options& o, int worker)
{
    session s;
    compute::device_kind kind = o.device;
    // The CPUs Slurm gave this task, unless told otherwise (threads.hpp).
    if (o.ctr && kind == compute::device_kind::automatic) {
        // The click-through models run on the CPU in this version (options.cpp refuses --device cuda).
        kind = compute::device_kind::cpu;
    }
    const auto fit = fit_threads(
        o.threads, [](const char* name) { return std::getenv(name); }, affinity_cpus());
    s.backend = compute::make_backend(kind, o.precision, fit.threads, worker == 0);
    if (o.ctr) {
        // The files are streamed by each worker (ctr_work); the chief reads test.tsv.
        const auto files = data::ctr_train_files(o.data_dir);
        s.ctr = model::make_wide_deep(wide_deep_config_for(o), s.backend.get());
        s.data.description =
            fmt::format("{} ({} training file{})", o.data_dir, files.size(), files.size() == 1 ? "" : "s");
        log::info("data: {}, streamed; model: {} ({} dense parameters, {} embedding tables); device: {}",
                  s.data.description, s.ctr->describe(), s.ctr->num_params(), s.ctr->tables().size(),
                  s.backend->name());
        if (s.backend->host_memory())
            log::info("{} compute thread{} ({})", fit.threads, fit.threads == 1 ? "" : "s", fit.source);
        return s;
    }
    if (o.family == model_family::linear) {
        s.data = data::make_linear(1000, 200, o.seed);
        s.net = model::make_linear(*s.backend, static_cast<std::size_t>(o.batch_size));
    } else if (o.layers) {
        s.data = data::load_directory(o.data_dir, o.normalize);
        if (s.data.train.num_classes < 2)
            throw error(fmt::format("{}: the labels name fewer than 2 classes", o.data_dir));
        s.net = model::make_sequential(*s.backend, o.spec, model::data_shape(s.data.train), s.data.train.num_classes,
                                       static_cast<std::size_t>(o.batch_size),
                                       o.seed * 1000003u + static_cast<std::uint64_t>(worker));
    } else {
        s.data = data::load_directory(o.data_dir, o.normalize);
        if (s.data.train.num_classes < 2)
            throw error(fmt::format("{}: the labels name fewer than 2 classes", o.data_dir));
        s.net = model::make_mlp(*s.backend, static_cast<int>(s.data.train.cols), o.hidden, s.data.train.num_classes,
                                static_cast<std::size_t>(o.batch_size));
    }
    log::info("data: {} ({} training, {} test examples); model: {} ({} parameters, {:.1f} KB); device: {}",
              s.data.description, s.data.train.rows, s.data.test.rows, s.shape().describe(), s.shape().num_params(),
              s.shape().num_params() * 4 / 1000.0, s.backend->name());
    // After the data: a bad --data-dir stays one error line.
    if (s.backend->host_memory())
        log::info("{} compute thread{} ({})", fit.threads, fit.threads == 1 ? "" : "s", fit.source);
    return s;
}

int print_summary(const train_options& o)
{
    if (o.ctr) {
        const auto m = model::make_wide_deep(wide_deep_config_for(o));
        fmt::print("model {}\n", m->describe());
        for (const auto& t : m->tables())
            fmt::print("  embedding table {:<6} {:>5} floats a row, rows made as keys appear (on the PS tasks)\n",
                       t.name, t.dim);
        std::size_t total = 0;
        for (const auto& t : m->tensors()) {
            std::string shape;
            for (int d : t.shape) shape += (shape.empty() ? "" : "x") + std::to_string(d);
            fmt::print("  {:<28} {:>12} {:>10}\n", t.name, shape, t.size);
            total += t.size;
        }
        fmt::print("  dense parameters: {}\n", total);
        return 0;
    }
    if (o.family == model_family::linear) {
        model::model_spec spec = model::parse_model_spec("dense:1,loss:mse");
        fmt::print("model linear: y = w x + b on one feature, squared error\n{}",
                   model::summary(spec, {false, 1, 1, 1}, 1));
        return 0;
    }
    auto data = data::load_directory(o.data_dir, o.normalize);
    if (data.train.num_classes < 2) throw error(fmt::format("{}: the labels name fewer than 2 classes", o.data_dir));
    model::model_spec spec;
    std::string title;
    if (o.layers) {
        spec = o.spec;
        title = fmt::format("model {}", spec.text());
    } else {
        // The mlp preset as layers (it keeps its own truncated-normal initialisation).
        std::string text;
        for (int units : o.hidden) text += fmt::format("dense:{}:relu,", units);
        spec = model::parse_model_spec(text + fmt::format("dense:{}", data.train.num_classes));
        title = fmt::format("model mlp --hidden-units {}", o.hidden_units);
    }
    // The table first: a model that does not fit the data prints only the error.
    const auto table = model::summary(spec, model::data_shape(data.train), data.train.num_classes);
    fmt::print("{}\ndata: {} ({} training examples of {}, {} classes)\n{}", title, data.description, data.train.rows,
               model::data_shape(data.train).text(), data.train.num_classes, table);
    return 0;
}

ps::training_settings training_settings_for(const train_options& o)
{
    return {optimizer_from(o), o.sync_replicas, o.replicas_to_aggregate,
            o.max_staleness,   o.elastic,       embedding_tables_for(o)};
}

ps::optimizer_config optimizer_from(const train_options& o)
{
    ps::optimizer_config cfg;
    cfg.kind = o.optimizer;
    cfg.learning_rate = o.learning_rate;
    return cfg;
}

}  // namespace pstrain::trainer
