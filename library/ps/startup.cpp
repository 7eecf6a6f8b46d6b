#include "library/ps/startup.hpp"

#include "library/ps/job_shape.hpp"

#include "common/log.hpp"
#include "pstrain/error.hpp"
#include "library/ps/dense_step.hpp"
#include "library/ps/request_check.hpp"

#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>

#include <unistd.h>

#include <fmt/format.h>

namespace pstrain::ps {

namespace {

std::string size_text(double bytes)
{
    if (bytes >= 1e9) return fmt::format("{:.1f} GB", bytes / 1e9);
    if (bytes >= 1e6) return fmt::format("{:.1f} MB", bytes / 1e6);
    return fmt::format("{} bytes", static_cast<std::uint64_t>(bytes));
}

std::uint64_t physical_memory()
{
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
}

}  // namespace

startup::startup(transport& net, worker_links& links, server_config& cfg, const server_hooks& hooks,
                 membership& members, sparse_service& sparse, activity_recorder& activity, server_clock& profile)
    : net_(net), links_(links), cfg_(cfg), hooks_(hooks), members_(members), sparse_(sparse), activity_(activity),
      profile_(profile), who_(net.peer_name(0))
{}

void startup::take_own_settings()
{
    check_job_shape(error_from_here);
    if (!cfg_.settings_from_chief) configure();
}

// The server's own settings: its room for workers, its index, and (unless
// the chief says them) its training settings; the chief's: its training
// settings.
void startup::check_job_shape(settings_origin origin) const
{
    const auto workers = static_cast<int>(links_.size());
    if (origin == error_from_here) {
        if (workers == 0) throw error("a parameter server needs at least one worker");
        if (cfg_.num_ps < 1 || cfg_.index < 0 || cfg_.index >= cfg_.num_ps)
            throw error(fmt::format("PS index {} is outside 0..{}", cfg_.index, cfg_.num_ps - 1));
    }
    // The job's shape as this PS sees it: the workers it starts with, and
    // the transport's room beyond them.  Sync aggregates what the settings
    // ask for; async's replicas are not this PS's to refuse.
    job_shape shape;
    shape.num_workers = cfg_.started_workers > 0 ? cfg_.started_workers : workers;
    shape.max_workers = workers > shape.num_workers ? workers : 0;
    if (static_cast<int>(cfg_.started_workers) > workers) shape.max_workers = workers;  // fewer places than workers
    training_settings t = cfg_.training;
    if (origin == error_from_here && cfg_.settings_from_chief) {
        // The training settings come with the chief's hello and are checked
        // then: here only the shape.
        t = training_settings{};
        t.sync = false;
        t.elastic = cfg_.training.elastic;
    }
    t.replicas_to_aggregate = t.sync ? members_.replicas_wanted() : 0;
    const auto refusal = check_job(t, shape);
    if (!refusal) return;
    const auto remedy = refusal->remedy.empty() ? std::string() : ": " + refusal->remedy;
    if (origin == error_from_here) throw error(refusal->settings + remedy);
    throw peer_error(who_, fmt::format("{} asks for {}{}", who_, refusal->settings, remedy));
}

void startup::configure()
{
    members_.configure();
    sparse_.set_tables(cfg_.training.tables);
}

void startup::take_settings(const std::optional<training_settings>& chief)
{
    if (cfg_.settings_from_chief) {
        if (!chief)
            throw peer_error(who_, fmt::format("{} did not say how to train (optimizer, sync or async, tables): a "
                                               "PS task started without them (pstrain serve) serves programs whose "
                                               "chief says them, as pstrain's Python package does; pstrain's "
                                               "own workers need pstrain's own PS tasks, with the same flags",
                                               who_));
        cfg_.training = *chief;
        check_job_shape(error_from_chief);
        configure();
        const auto& t = cfg_.training;
        log::info("training as {} says: {} (learning rate {}), {}{}, {} embedding table(s)", who_,
                  optimizer_name(t.optimizer.kind), t.optimizer.learning_rate, t.sync ? "sync" : "async",
                  members_.bound_words(), t.tables.size());
    } else if (chief) {
        if (auto d = settings_difference(cfg_.training, *chief, "this PS", who_))
            throw peer_error(who_, fmt::format("{} trains with other settings than this PS: {}: give every task of "
                                               "the job the same flags",
                                               who_, *d));
    }
}

void startup::take_precision(const wire::hello& h)
{
    if (!cfg_.settings_from_chief) return;
    if (h.precision > static_cast<std::uint32_t>(wire_precision::bf16))
        throw peer_error(who_, fmt::format("{} sends wire precision {}, none this PS knows: run the same pstrain "
                                           "version in every task",
                                           who_, h.precision));
    cfg_.precision = static_cast<wire_precision>(h.precision);
    links_.set_precision(cfg_.precision);
    if (cfg_.precision != wire_precision::fp32)
        log::info("gradients and values travel as {}, as {} says (FP32 here)", name_of(cfg_.precision), who_);
}

bool startup::await_take_over()
{
    auto& chief = links_[0];
    chief.recv = net_.recv(0, channel::control, &chief.in, sizeof chief.in);
    chief.posted = true;
    log::info("a spare PS: waiting until the chief needs it in a lost PS's place");
    {
        server_clock::scope timed(profile_, waiting);
        activity_.set_idle(true);  // a program's watchdog sees no stall in this wait
        links_.wait_for(0, "the chief's take_over (a spare waits until a PS is lost)",
                        [&] { return chief.recv.complete(); });
        activity_.set_idle(false);
    }
    chief.posted = false;
    if (!chief.recv.complete() || !chief.recv.ok())
        throw peer_error(who_, fmt::format("lost {} while this spare waited: {}", who_,
                                           net_.failed(0) ? net_.failure(0) : chief.recv.failure()));
    if (auto bad = wire::check_envelope(chief.in))
        throw peer_error(who_, fmt::format("{} sent this spare a malformed message: {}", who_, wire::describe(*bad)));
    links_.received(chief.in);
    if (chief.in.kind == static_cast<std::uint16_t>(wire::kind::shutdown)) {
        log::info("the chief ended the job: this spare was not needed");
        return false;
    }
    if (chief.in.kind != static_cast<std::uint16_t>(wire::kind::take_over))
        throw peer_error(who_, fmt::format("{} sent a {} message to a spare PS, which waits for take_over: run the "
                                           "same pstrain in every task",
                                           who_, wire::kind_name(chief.in.kind)));
    const auto m = wire::body<wire::take_over>(chief.in);
    if (m.num_ps != static_cast<std::uint32_t>(cfg_.num_ps) || m.index >= m.num_ps)
        throw peer_error(who_, fmt::format("{} asks this spare to take the place of ps {} of {}, and this spare "
                                           "was started for a job of {} PS tasks: give every task the same flags",
                                           who_, m.index, m.num_ps, cfg_.num_ps));
    cfg_.index = static_cast<int>(m.index);
    log::info("taking the place of lost ps {}: its shard comes from the chief's restore", cfg_.index);
    return true;
}

void startup::wait_for_chief(transfer& r, const char* what)
{
    links_.wait_for(0, "the chief's hello (it loads its data first)", [&] { return r.complete(); });
    if (!r.complete() || !r.ok())
        throw peer_error(
            who_, fmt::format("lost {} before it {}: {}", who_, what, net_.failed(0) ? net_.failure(0) : r.failure()));
}

wire::hello startup::receive_hello()
{
    auto& chief = links_[0];
    chief.recv = net_.recv(0, channel::control, &chief.in, sizeof chief.in);
    chief.posted = true;
    wait_for_chief(chief.recv, "said hello");
    chief.posted = false;
    request_context first;
    first.at = request_context::stage::chief_hello;
    if (auto bad = check_request(chief.in, std::nullopt, first)) {
        if (bad->code == static_cast<std::uint32_t>(wire::refusal_code::no_hello))
            throw peer_error(who_,
                             fmt::format("{} began with a {} message instead of hello: run the same pstrain in every "
                                         "task",
                                         who_, wire::kind_name(chief.in.kind)));
        throw peer_error(who_, fmt::format("{} sent a malformed first message: {}", who_, wire::describe(*bad)));
    }
    links_.received(chief.in);
    return wire::body<wire::hello>(chief.in);
}

shard_range startup::plan_shard(const wire::hello& h)
{
    num_params_ = h.num_params;
    const auto range = make_partition(num_params_, cfg_.num_ps)[static_cast<std::size_t>(cfg_.index)];
    if (wire::float_bytes(range.size()) == 0 && range.size() > 0)
        throw peer_error(
            who_, fmt::format("{} announced {} parameters: more than this machine can address", who_, num_params_));
    check_shard_fits(range);
    return range;
}

// Before anything of the shard's size is allocated, what allocate() takes
// (the values, the optimizer state, the sum of a sync step and one receive
// buffer per worker) must fit in this machine's memory, or in max_shard_bytes.
void startup::check_shard_fits(shard_range range) const
{
    const std::uint64_t copies =
        2 + static_cast<std::uint64_t>(state_slots(cfg_.training.optimizer.kind)) + links_.size();
    const std::uint64_t per_copy = wire::float_bytes(range.size());
    const std::uint64_t limit = cfg_.max_shard_bytes > 0 ? cfg_.max_shard_bytes : physical_memory();
    if (limit == 0 || per_copy <= limit / copies) return;
    throw peer_error(
        who_, fmt::format("{} announced {} parameters: this PS's shard of {} needs {} ({} copies: values, "
                          "optimizer state, sums, one receive buffer per worker), more than {}: use more PS "
                          "tasks, or check that every task builds the same model",
                          who_, num_params_, range.size(), size_text(static_cast<double>(per_copy) * copies), copies,
                          cfg_.max_shard_bytes > 0 ? fmt::format("the {} max_shard_bytes allows", size_text(limit))
                                                   : fmt::format("this machine's {} of memory", size_text(limit))));
}

std::unique_ptr<served_shard> startup::allocate(shard_range range, std::size_t slot_floats)
{
    try {
        auto shard = std::make_unique<served_shard>(range, cfg_.training.optimizer, cfg_.update_threads);
        // A whole-shard gradient lands where the worker sends it from
        // (aligned_buffer.hpp); the slot also takes an rkey and the
        // largest sparse request.
        const std::size_t floats =
            std::max({static_cast<std::size_t>(range.size()), wire::max_rkey_bytes / sizeof(float), slot_floats});
        for (std::size_t i = 0; i < links_.size(); ++i)
            links_[i].slot = float_buffer(floats, page_offset_of(range.begin));
        return shard;
    } catch (const std::bad_alloc&) {
        throw peer_error(
            who_, fmt::format("{} announced {} parameters: this PS cannot allocate its shard of {} ({:.1f} GB "
                              "for each copy): use more PS tasks, or check that every task builds the same model",
                              who_, num_params_, range.size(), wire::dense_bytes(range) / 1e9));
    } catch (const std::length_error&) {
        throw peer_error(
            who_, fmt::format("{} announced {} parameters: more than this machine can address", who_, num_params_));
    }
}

void startup::receive_hello_payload(const wire::hello& h)
{
    auto& chief = links_[0];
    if (chief.in.payload_bytes == 0 && h.num_moving == 0 && h.settings_bytes == 0) return;
    if (h.num_moving > wire::max_moving_ranges)
        throw peer_error(who_, fmt::format("{} announced {} moving-average ranges (at most {})", who_, h.num_moving,
                                           wire::max_moving_ranges));
    if (h.settings_bytes > wire::max_settings_bytes)
        throw peer_error(who_, fmt::format("{} announced {} bytes of training settings (at most {})", who_,
                                           h.settings_bytes, wire::max_settings_bytes));
    const std::uint64_t tail = wire::hello_moving_bytes(h) + h.settings_bytes;
    if (chief.in.payload_bytes < tail || chief.in.payload_bytes - tail > wire::max_rkey_bytes)
        throw peer_error(who_, fmt::format("{} sent a hello of {} payload bytes for {} moving-average ranges, {} "
                                           "bytes of settings and an rkey of at most {} bytes",
                                           who_, chief.in.payload_bytes, h.num_moving, h.settings_bytes,
                                           wire::max_rkey_bytes));
    // Received aside (the ranges may not fit the slot); the rkey goes where
    // map_buffers reads it once the slot is allocated (apply_hello_payload).
    hello_payload_.resize(chief.in.payload_bytes);
    chief.payload_recv = net_.recv(0, channel::payload, hello_payload_.data(), chief.in.payload_bytes);
    wait_for_chief(chief.payload_recv, "sent its rkey");
}

std::optional<training_settings> startup::chief_settings(const wire::hello& h) const
{
    if (h.settings_bytes == 0) return std::nullopt;
    try {
        return wire::decode_settings(wire::hello_settings(h, hello_payload_));
    } catch (const error& e) {
        throw peer_error(who_, fmt::format("{} sent training settings this PS cannot read: {}: run the same pstrain "
                                           "version in every task",
                                           who_, e.what()));
    }
}

void startup::apply_hello_payload(const wire::hello& h, served_shard& shard)
{
    if (hello_payload_.empty()) return;
    auto& chief = links_[0];
    std::memcpy(chief.slot.data(), hello_payload_.data(), wire::hello_rkey_bytes(h, hello_payload_.size()));
    // The moving averages (a batch normalization's statistics) get no optimizer.
    const auto moving = wire::hello_moving_ranges(h, hello_payload_);
    for (const auto& r : moving)
        if (r.end > num_params_)
            throw peer_error(who_,
                             fmt::format("{} announced a moving-average range [{}, {}) past the model's {} parameters",
                                         who_, r.begin, r.end, num_params_));
    try {
        shard.shard().set_moving_averages(moving);
    } catch (const error& e) {
        throw peer_error(who_, fmt::format("{}: {}", who_, e.what()));
    }
    if (!moving.empty()) log::info("{} moving-average range(s) of the model get no optimizer", moving.size());
}

bool startup::await_init_or_restore(served_shard& shard, std::span<embedding_table> tables, training_state& state)
{
    auto& chief = links_[0];
    if (!chief.ready()) {
        links_.wait_for(0, "the chief's init or restore (it loads its data first)", [&] { return chief.ready(); });
        if (net_.failed(0))
            throw peer_error(who_, fmt::format("lost {} before it initialised the model: {}", who_, net_.failure(0)));
    }
    chief.posted = false;
    if (!chief.recv.ok() || (chief.in.payload_bytes > 0 && !chief.payload_recv.ok()))
        throw peer_error(who_, fmt::format("lost {} before it initialised the model: {}", who_, chief.recv.failure()));
    if (chief.in.payload_bytes > 0) chief.payload_posted = false;
    links_.received(chief.in);
    request_context second;
    second.at = request_context::stage::chief_init;
    second.range = shard.range();
    if (auto bad = check_request(chief.in, chief.payload_recv.length(), second)) {
        const auto code = static_cast<wire::refusal_code>(bad->code);
        if (code != wire::refusal_code::bad_range && code != wire::refusal_code::bad_length)
            throw peer_error(who_, fmt::format("{} did not initialise or restore the model after hello: run the same "
                                               "pstrain in every task",
                                               who_));
        const auto m = wire::body<wire::init>(chief.in);
        throw peer_error(who_,
                         fmt::format("{} initialised [{}, {}) with {} bytes, this PS holds [{}, {}): run the same "
                                     "pstrain in every task",
                                     who_, m.range_begin, m.range_end, chief.in.payload_bytes, shard.range().begin,
                                     shard.range().end));
    }
    if (chief.in.kind == static_cast<std::uint16_t>(wire::kind::restore)) {
        restore(wire::body<wire::restore>(chief.in).step, shard, tables, state);
        return true;
    }
    shard.shard().assign(std::span<const float>(chief.slot.data(), shard.range().size()));
    return false;
}

void startup::restore(std::uint64_t step, served_shard& shard, std::span<embedding_table> tables, training_state& state)
{
    if (!hooks_.restore)
        throw peer_error(who_,
                         fmt::format("{} asked to restore a snapshot, and this server has no restore hook", who_));
    auto saved = hooks_.restore(step, shard.range(), num_params_);
    shard.shard().restore(saved.values, saved.state, saved.updates);
    if (!tables.empty()) {
        if (!hooks_.restore_tables)
            throw peer_error(who_,
                             fmt::format("{} asked to restore a snapshot, and this server has embedding tables but no "
                                         "restore_tables hook",
                                         who_));
        hooks_.restore_tables(step, cfg_.index, cfg_.num_ps, tables);
    }
    if (saved.positions.size() == links_.size())
        for (std::size_t i = 0; i < links_.size(); ++i) links_[i].position = saved.positions[i];
    state.step = step;
    state.restored = step + 1;
}

void startup::stand_in(std::uint64_t step)
{
    wire::standing_in m;
    m.step = step;
    m.index = static_cast<std::uint32_t>(cfg_.index);
    for (std::size_t i = 1; i < links_.size(); ++i)
        if (!links_[i].lost && !net_.failed(i)) links_.reply(i, wire::encode(m));
    log::info("standing in for ps {} from global step {}", cfg_.index, step);
}

// Gradients still waiting for the current step are answered first (the
// chief asks once every worker has its replies); replies in flight leave
// before the values change; the tables start empty and take the
// snapshot's rows.
void startup::roll_back(std::size_t i, std::uint64_t step, served_shard& shard, dense_step& dense,
                        training_state& state)
{
    if (!cfg_.training.sync)
        return links_.refuse(i, wire::refusal_of(wire::refusal_code::bad_kind, links_[i].in.kind),
                             fmt::format("refused {}'s rollback: only sync training rolls every shard back (async "
                                         "restores only the lost PS's shard)",
                                         net_.peer_name(i)));
    const std::uint64_t was = state.step;
    dense.answer_waiting();
    for (std::size_t k = 0; k < links_.size(); ++k) sparse_.drop_held(k);  // their steps are trained again
    links_.drain_sends();
    sparse_.set_tables(cfg_.training.tables);
    try {
        restore(step, shard, sparse_.tables(), state);
    } catch (const peer_error&) {
        throw;
    } catch (const error& e) {
        throw peer_error(who_, fmt::format("cannot roll back to the snapshot at global step {}: {}", step, e.what()));
    }
    log::warn("rolled back from global step {} to the snapshot at global step {}, as the chief asked (a lost PS's "
              "replacement restored it): the {} steps since are trained again",
              was, step, was > step ? was - step : 0);
    state.done = hooks_.step_completed && hooks_.step_completed(state.step);
    activity_.progressed();
    dense.reply_values(i, shard.range(), false, wire::values_status::ok);
}

}  // namespace pstrain::ps
