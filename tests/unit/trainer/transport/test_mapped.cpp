#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE mapped
#include <boost/test/unit_test.hpp>

#include "trainer/transport/ucx.hpp"

#include <cstdint>
#include <cstdlib>
#include <memory>

using namespace pstrain::transport;

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
    remote_key key(p.ep->get(), m.packed_key());
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
    remote_key key(p.ep->get(), m.packed_key());
    BOOST_TEST(key.local_pointer(reinterpret_cast<std::uintptr_t>(m.data())) == nullptr);
}
