#include "library/ps/row_requests.hpp"

#include "pstrain/embedding.hpp"

namespace pstrain::ps {

std::vector<std::vector<std::uint32_t>> places_by_ps(std::span<const std::uint64_t> keys, std::size_t num_ps)
{
    std::vector<std::vector<std::uint32_t>> by_ps(num_ps);
    for (std::size_t i = 0; i < keys.size(); ++i)
        by_ps[shard_of_key(keys[i], num_ps)].push_back(static_cast<std::uint32_t>(i));
    return by_ps;
}

std::size_t row_messages(const std::vector<std::vector<std::uint32_t>>& by_ps)
{
    std::size_t messages = 0;
    for (const auto& v : by_ps) messages += (v.size() + wire::max_sparse_keys - 1) / wire::max_sparse_keys;
    return messages;
}

const void* fill_row_request(operation& op, wire::kind kind, std::uint32_t table, std::uint32_t dim,
                             std::span<const std::uint32_t> places, std::span<const std::uint64_t> keys, float* out,
                             std::span<const float> grads, std::uint32_t flags, wire_precision precision)
{
    const std::size_t n = places.size();
    op.table = table;
    op.dim = dim;
    op.expected = wire::kind::rows;
    op.places.assign(places.begin(), places.end());
    op.keys.resize(n);
    for (std::size_t k = 0; k < n; ++k) op.keys[k] = keys[op.places[k]];
    if (kind == wire::kind::sparse_pull) {
        op.rows.resize(n * dim);
        op.scatter_to = out;
        op.out = wire::encode(wire::sparse_pull{n, op.table, flags}, wire::sparse_pull_bytes(n));
        return op.keys.data();
    }
    wire::encode_sparse_push(keys, grads, op.places, dim, op.bytes, precision);
    op.out = wire::encode(wire::sparse_push{n, op.table}, op.bytes.size());
    return op.bytes.data();
}

}  // namespace pstrain::ps
