#include "library/ps/protocol.hpp"

#include "library/ps/bf16.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace pstrain::ps::wire {

const char* kind_name(std::uint16_t k)
{
    switch (static_cast<kind>(k)) {
    case kind::hello: return "hello";
    case kind::welcome: return "welcome";
    case kind::init: return "init";
    case kind::restore: return "restore";
    case kind::pull: return "pull";
    case kind::push: return "push";
    case kind::values: return "values";
    case kind::snapshot: return "snapshot";
    case kind::snapshot_done: return "snapshot_done";
    case kind::shutdown: return "shutdown";
    case kind::abort: return "abort";
    case kind::refusal: return "refusal";
    case kind::stats: return "stats";
    case kind::stats_reply: return "stats_reply";
    case kind::sparse_pull: return "sparse_pull";
    case kind::sparse_push: return "sparse_push";
    case kind::rows: return "rows";
    case kind::take_over: return "take_over";
    case kind::standing_in: return "standing_in";
    case kind::rollback: return "rollback";
    case kind::leave: return "leave";
    }
    return "unknown";
}

std::optional<refusal> check_envelope(const frame& f)
{
    if (f.magic != magic) return refusal_of(refusal_code::bad_frame);
    if (f.version != version) {
        auto r = refusal_of(refusal_code::bad_version);
        r.frame_version = f.version;
        return r;
    }
    if (f.kind < static_cast<std::uint16_t>(kind::hello) || f.kind > static_cast<std::uint16_t>(kind::leave))
        return refusal_of(refusal_code::bad_kind, f.kind);
    return std::nullopt;
}

std::vector<std::uint8_t> hello_payload(std::span<const std::uint8_t> rkey, std::span<const shard_range> moving,
                                        std::span<const std::uint8_t> settings)
{
    std::vector<std::uint8_t> out(rkey.begin(), rkey.end());
    out.resize(rkey.size() + moving.size() * moving_range_bytes);
    auto* at = out.data() + rkey.size();
    for (const auto& r : moving) {
        std::memcpy(at, &r.begin, sizeof r.begin);
        std::memcpy(at + sizeof r.begin, &r.end, sizeof r.end);
        at += moving_range_bytes;
    }
    out.insert(out.end(), settings.begin(), settings.end());
    return out;
}

std::vector<shard_range> hello_moving_ranges(const hello& h, std::span<const std::uint8_t> payload)
{
    std::vector<shard_range> moving(h.num_moving);
    const auto* at = payload.data() + (payload.size() - h.settings_bytes - hello_moving_bytes(h));
    for (auto& r : moving) {
        std::memcpy(&r.begin, at, sizeof r.begin);
        std::memcpy(&r.end, at + sizeof r.begin, sizeof r.end);
        at += moving_range_bytes;
    }
    return moving;
}

namespace {

// Fixed-width fields, one after the other.
class field_writer {
public:
    explicit field_writer(std::vector<std::uint8_t>& out) : out_(out) {}
    template <typename T>
    field_writer& put(T v)
    {
        static_assert(std::is_trivially_copyable_v<T>);
        const auto at = out_.size();
        out_.resize(at + sizeof v);
        std::memcpy(out_.data() + at, &v, sizeof v);
        return *this;
    }

private:
    std::vector<std::uint8_t>& out_;
};

class field_reader {
public:
    explicit field_reader(std::span<const std::uint8_t> in) : in_(in) {}
    template <typename T>
    T get()
    {
        T v{};
        std::memcpy(&v, in_.data() + at_, sizeof v);
        at_ += sizeof v;
        return v;
    }
    float number(const char* what)
    {
        const auto v = get<float>();
        if (!std::isfinite(v)) throw error(fmt::format("its {} is not a finite number", what));
        return v;
    }
    void skip(std::size_t bytes) { at_ += bytes; }
    std::size_t at() const { return at_; }

private:
    std::span<const std::uint8_t> in_;
    std::size_t at_ = 0;
};

// The settings' mode word.
constexpr std::uint32_t mode_sync = 1, mode_elastic = 2;

}  // namespace

std::vector<std::uint8_t> encode_settings(const training_settings& s)
{
    std::vector<std::uint8_t> out;
    out.reserve(settings_head_bytes + s.tables.size() * settings_table_bytes);
    field_writer w(out);
    const auto& o = s.optimizer;
    w.put(static_cast<std::uint32_t>(o.kind)).put(o.learning_rate).put(o.momentum).put(o.adagrad_initial);
    w.put(o.beta1).put(o.beta2).put(o.epsilon);
    const auto mode = (s.sync ? mode_sync : 0u) | (s.elastic ? mode_elastic : 0u);
    w.put(mode).put(static_cast<std::int32_t>(s.replicas_to_aggregate));
    w.put(static_cast<std::int32_t>(std::max(s.max_staleness, unbounded_staleness)));
    w.put(static_cast<std::uint32_t>(s.tables.size()));
    for (const auto& t : s.tables) {
        w.put(t.dim).put(static_cast<std::uint32_t>(t.optimizer)).put(t.learning_rate).put(t.adagrad_initial);
        w.put(t.beta1).put(t.beta2).put(t.epsilon).put(t.l1).put(t.l2).put(t.ftrl_beta).put(t.init_range);
        w.put(t.seed).put(t.admit_after).put(std::uint32_t{0}).put(t.evict_after).put(t.max_rows);
    }
    return out;
}

training_settings decode_settings(std::span<const std::uint8_t> bytes)
{
    if (bytes.size() < settings_head_bytes)
        throw error(fmt::format("its training settings are {} bytes, fewer than the {} of their head", bytes.size(),
                                settings_head_bytes));
    field_reader r(bytes);
    training_settings s;
    const auto kind = r.get<std::uint32_t>();
    if (kind > static_cast<std::uint32_t>(optimizer_kind::adam))
        throw error(fmt::format("its optimizer {} is none this PS knows (a pstrain of another version?)", kind));
    s.optimizer.kind = static_cast<optimizer_kind>(kind);
    s.optimizer.learning_rate = r.number("learning rate");
    s.optimizer.momentum = r.number("momentum");
    s.optimizer.adagrad_initial = r.number("adagrad initial accumulator");
    if (s.optimizer.kind == optimizer_kind::adagrad && !(s.optimizer.adagrad_initial > 0))
        throw error(fmt::format("its Adagrad accumulators start at {}, not above 0 (a zero gradient would divide 0 "
                                "by 0)",
                                s.optimizer.adagrad_initial));
    s.optimizer.beta1 = r.number("beta1");
    s.optimizer.beta2 = r.number("beta2");
    s.optimizer.epsilon = r.number("epsilon");
    const auto mode = r.get<std::uint32_t>();
    if (mode & ~(mode_sync | mode_elastic))
        throw error(
            fmt::format("its mode word {:#x} has bits this PS does not know (a pstrain of another version?)", mode));
    s.sync = (mode & mode_sync) != 0;
    s.elastic = (mode & mode_elastic) != 0;
    s.replicas_to_aggregate = r.get<std::int32_t>();
    if (s.replicas_to_aggregate < 0)
        throw error(fmt::format("its replicas to aggregate, {}, is negative", s.replicas_to_aggregate));
    s.max_staleness = r.get<std::int32_t>();
    if (s.max_staleness < unbounded_staleness)
        throw error(fmt::format("its staleness bound, {}, is neither {} (none) nor 0 or more", s.max_staleness,
                                unbounded_staleness));
    const auto tables = r.get<std::uint32_t>();
    if (tables > max_settings_tables)
        throw error(fmt::format("it names {} embedding tables, more than the {} a hello may carry", tables,
                                max_settings_tables));
    if (bytes.size() != settings_head_bytes + std::size_t(tables) * settings_table_bytes)
        throw error(fmt::format("its training settings are {} bytes, not the {} of {} table(s)", bytes.size(),
                                settings_head_bytes + std::size_t(tables) * settings_table_bytes, tables));
    for (std::uint32_t k = 0; k < tables; ++k) {
        auto& t = s.tables.emplace_back();
        t.dim = r.get<std::uint32_t>();
        if (t.dim == 0 || t.dim > max_table_dim)
            throw error(fmt::format("its embedding table {} has dim {} (1 to {})", k, t.dim, max_table_dim));
        const auto opt = r.get<std::uint32_t>();
        if (opt > static_cast<std::uint32_t>(row_optimizer::ftrl))
            throw error(fmt::format("its embedding table {} has optimizer {}, none this PS knows", k, opt));
        t.optimizer = static_cast<row_optimizer>(opt);
        t.learning_rate = r.number("table learning rate");
        t.adagrad_initial = r.number("table adagrad initial accumulator");
        if (t.optimizer == row_optimizer::adagrad && !(t.adagrad_initial > 0))
            throw error(fmt::format("its embedding table {} starts its Adagrad accumulators at {}, not above 0 (a "
                                    "zero gradient would divide 0 by 0)",
                                    k, t.adagrad_initial));
        t.beta1 = r.number("table beta1");
        t.beta2 = r.number("table beta2");
        t.epsilon = r.number("table epsilon");
        t.l1 = r.number("table l1");
        t.l2 = r.number("table l2");
        t.ftrl_beta = r.number("table ftrl beta");
        t.init_range = r.number("table init range");
        t.seed = r.get<std::uint64_t>();
        t.admit_after = r.get<std::uint32_t>();
        r.skip(sizeof(std::uint32_t));
        t.evict_after = r.get<std::uint64_t>();
        t.max_rows = r.get<std::uint64_t>();
    }
    return s;
}

void encode_sparse_push(std::span<const std::uint64_t> keys, std::span<const float> grads,
                        std::span<const std::uint32_t> places, std::uint32_t dim, std::vector<std::uint8_t>& out,
                        wire_precision p)
{
    out.resize(sparse_push_bytes(places.size(), dim, p));
    auto* key_at = out.data();
    auto* row_at = out.data() + sparse_pull_bytes(places.size());
    const std::size_t row_bytes = sparse_rows_bytes(1, dim, p);
    for (const auto place : places) {
        std::memcpy(key_at, &keys[place], sparse_key_bytes);
        const float* row = grads.data() + std::size_t(place) * dim;
        if (p == wire_precision::bf16) bf16::encode(row, dim, row_at);
        else std::memcpy(row_at, row, row_bytes);
        key_at += sparse_key_bytes;
        row_at += row_bytes;
    }
}

void widen(float* at, std::uint64_t count, wire_precision p)
{
    if (p == wire_precision::bf16) bf16::widen_in_place(at, count);
}

void encode_numbers(const float* in, std::uint64_t count, wire_precision p, std::vector<std::uint8_t>& out)
{
    out.resize(numbers_bytes(count, p));
    if (p == wire_precision::bf16) bf16::encode(in, count, out.data());
    else if (count > 0) std::memcpy(out.data(), in, out.size());
}

void decode_numbers(const void* in, std::uint64_t count, wire_precision p, float* out)
{
    if (p == wire_precision::bf16) bf16::decode(in, count, out);
    else if (count > 0) std::memcpy(out, in, float_bytes(count));
}

void decode_sparse_keys(const void* payload, std::uint64_t count, std::vector<std::uint64_t>& out)
{
    out.resize(count);
    if (count > 0) std::memcpy(out.data(), payload, sparse_pull_bytes(count));
}

void scatter_rows(std::span<const float> rows, std::span<const std::uint32_t> places, std::uint32_t dim, float* out)
{
    for (std::size_t k = 0; k < places.size(); ++k)
        std::copy_n(rows.data() + k * dim, dim, out + std::size_t(places[k]) * dim);
}

namespace {
// A wire precision a peer sent, in words (a number this version does not know as such).
std::string precision_name(std::uint64_t p)
{
    if (p <= static_cast<std::uint64_t>(wire_precision::bf16)) return name_of(static_cast<wire_precision>(p));
    return fmt::format("wire precision {}", p);
}
}  // namespace

std::string describe(const refusal& r)
{
    switch (static_cast<refusal_code>(r.code)) {
    case refusal_code::bad_frame:
        return "a message without pstrain's magic number: is another program talking to this PS?";
    case refusal_code::bad_version:
        return fmt::format("protocol version {} where this PS speaks {}: run the same pstrain version in every task",
                           r.frame_version, version);
    case refusal_code::bad_kind:
        return fmt::format("a message of unknown kind {}: run the same pstrain version in every task", r.detail_begin);
    case refusal_code::bad_range:
        return fmt::format("the range [{}, {}) is not inside this PS's shard: do all tasks build the same model?",
                           r.detail_begin, r.detail_end);
    case refusal_code::bad_length:
        return fmt::format("a payload of {} bytes where the message says {}", r.detail_end, r.detail_begin);
    case refusal_code::not_mapped: return "an exchange through shared memory that this PS has not mapped";
    case refusal_code::model_mismatch:
        return fmt::format("a model of {} parameters where the chief's has {}: do all tasks build the same model?",
                           r.detail_begin, r.detail_end);
    case refusal_code::needs_whole_shard:
        return fmt::format("a push of [{}, {}), part of the shard, where sync training with backup workers "
                           "(replicas to aggregate below the workers) aggregates whole-shard gradients: push the "
                           "whole shard (every tensor of it) together",
                           r.detail_begin, r.detail_end);
    case refusal_code::bucket_skips:
        return fmt::format("a push of [{}, {}) that skips its sync step after buckets of the step were applied: a "
                           "worker that skips pushes every bucket of the step with skip (check every gradient "
                           "first), so that none is applied",
                           r.detail_begin, r.detail_end);
    case refusal_code::bucket_mismatch:
        return fmt::format("a push of the bucket [{}, {}), which overlaps the bucket [{}, {}) of the same sync step "
                           "that another worker pushed: every worker must push the same buckets (the same model "
                           "and bucket size)",
                           r.detail_begin, r.detail_end, r.other_begin, r.other_end);
    case refusal_code::wrong_peer:
        return fmt::format("a hello from worker {} of {} on the connection of worker {}: is a task of another job step "
                           "talking to this PS?",
                           r.detail_begin, r.detail_end, r.peer_index);
    case refusal_code::bad_buffers:
        return fmt::format(
            "exchange buffers at {:#x} and {:#x} that are not inside the memory its rkey maps (the PS's log "
            "says which bytes): is another program talking to this PS?",
            r.detail_begin, r.detail_end);
    case refusal_code::bad_table:
        return fmt::format("embedding table {} where this PS has {}: do all tasks build the same model?",
                           r.detail_begin, r.detail_end);
    case refusal_code::too_many_keys:
        return fmt::format("a sparse transfer of {} keys (at most {}): run the same pstrain version in every task",
                           r.detail_begin, r.detail_end);
    case refusal_code::rows_without_step:
        return fmt::format(
            "{} row updates held for one step (at most {}): in sync mode async_push() the dense gradient after "
            "each batch's async_push_rows()",
            r.detail_begin, r.detail_end);
    case refusal_code::pushed_twice:
        return fmt::format("a second push to sync step {} before the first was answered: wait() on a push's ticket "
                           "before the next push",
                           r.detail_begin);
    case refusal_code::tables_mismatch:
        return fmt::format("a model with {} embedding tables where this PS has {}: do all tasks build the same model?",
                           r.detail_begin, r.detail_end);
    case refusal_code::precision_mismatch:
        return fmt::format("worker {} sends {} on the wire and this PS {}: give every task of the job the same "
                           "--wire-precision",
                           r.peer_index, precision_name(r.detail_begin), precision_name(r.detail_end));
    case refusal_code::not_elastic:
        return "this job is not elastic: a restarted worker cannot take the place of a lost one (start the job with "
               "--elastic to take workers back)";
    case refusal_code::no_hello: return "a request before hello: the first message on a connection says who sends it";
    case refusal_code::not_chief: return "only the chief (worker 0) initialises, restores, snapshots and ends training";
    }
    return fmt::format("refusal code {}", r.code);
}

}  // namespace pstrain::ps::wire
