#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE mapped
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "library/transport/ucx.hpp"

#include <cstdint>
#include <cstdlib>
#include <memory>

using namespace pstrain::ucx;

namespace {

// Two UCX workers in one process, an endpoint from the first to the
// second, and memory of the second's context: what a worker task offers a
// PS on its host.
struct pair {
    explicit pair(const char* tls)
    {
        if (tls) ::setenv("UCX_TLS", tls, 1);
        ctx = std::make_unique<context>();
        if (tls) ::unsetenv("UCX_TLS");
        a = std::make_unique<engine>(*ctx, progress_mode::spin);
        b = std::make_unique<engine>(*ctx, progress_mode::spin);
        ep = endpoint::to_address(*a, b->address(), "worker b", false);
    }
    std::unique_ptr<context> ctx;
    std::unique_ptr<engine> a, b;
    std::unique_ptr<endpoint> ep;
};

}  // namespace

BOOST_AUTO_TEST_CASE(shared_memory_maps_the_peers_buffer)
{
    pair p("sm,self");
    mapped_memory m(*p.ctx, 1000 * sizeof(float));
    BOOST_TEST(m.size() == 1000 * sizeof(float));
    auto* mine = static_cast<float*>(m.data());
    BOOST_TEST(mine[999] == 0.0f);  // zero-filled
    remote_key key(p.ep->get(), m.packed_rkey());
    const auto base = reinterpret_cast<std::uintptr_t>(mine);
    auto* there = static_cast<float*>(key.local_pointer(base + 10 * sizeof(float)));
    BOOST_REQUIRE(there != nullptr);
    there[0] = 1.5f;  // a store through the mapping is a store into the memory
    BOOST_TEST(mine[10] == 1.5f);
    mine[11] = -2.0f;
    BOOST_TEST(there[1] == -2.0f);
}

BOOST_AUTO_TEST_CASE(no_mapping_over_tcp)
{
    pair p("tcp");
    mapped_memory m(*p.ctx, 4096);
    remote_key key(p.ep->get(), m.packed_rkey());
    BOOST_TEST(key.local_pointer(reinterpret_cast<std::uintptr_t>(m.data())) == nullptr);
}

// ucp_rkey_ptr adds an offset to any address: local_range checks that the
// bytes asked for lie in what the rkey mapped here.
BOOST_AUTO_TEST_CASE(a_range_past_the_mapped_memory_is_refused)
{
    pair p("sm,self");
    mapped_memory m(*p.ctx, 1000 * sizeof(float));
    remote_key key(p.ep->get(), m.packed_rkey());
    const auto base = reinterpret_cast<std::uintptr_t>(m.data());
    auto* whole = key.local_range(base, 1000 * sizeof(float));
    BOOST_REQUIRE(whole != nullptr);
    BOOST_TEST(whole == key.local_pointer(base));
    BOOST_TEST(key.local_range(base + 40, 960 * sizeof(float)) == key.local_pointer(base + 40));
    const auto refused = [&](std::uint64_t address, std::size_t bytes) {
        try {
            key.local_range(address, bytes);
        } catch (const pstrain::error& e) {
            return std::string(e.what()).find("are not inside the memory its rkey maps here") != std::string::npos;
        }
        return false;
    };
    BOOST_TEST(refused(base, std::size_t(1) << 30));        // far past its end
    BOOST_TEST(refused(base + (std::size_t(1) << 30), 4));  // an address far past it
    BOOST_TEST(refused(base - (std::size_t(1) << 30), 4));  // and before it
}

BOOST_AUTO_TEST_CASE(no_range_is_mapped_over_tcp)
{
    pair p("tcp");
    mapped_memory m(*p.ctx, 4096);
    remote_key key(p.ep->get(), m.packed_rkey());
    BOOST_TEST(key.local_range(reinterpret_cast<std::uintptr_t>(m.data()), 4096) == nullptr);
}
