// Address exchange and connection: PMIx (no fixed ports) or a static spec
// (a UCX listener at each PS's host:port, HELLO messages from workers).
#include "pstrain/error.hpp"
#include "common/log.hpp"
#include "trainer/bootstrap/job.hpp"

#include <cstring>
#include <thread>

#include <fmt/format.h>
#include <pmix.h>

namespace pstrain::bootstrap {
namespace {

using clock = std::chrono::steady_clock;

// ------------------------------------------------------------------- PMIx

void check_pmix(pmix_status_t rc, const char* call)
{
    if (rc != PMIX_SUCCESS) throw error(fmt::format("{} failed: {}", call, PMIx_Error_string(rc)));
}

// PMIx_Init/PMIx_Finalize for the bootstrap's lifetime.
class pmix_session {
public:
    pmix_session()
    {
        pmix_status_t rc = PMIx_Init(&me_, nullptr, 0);
        if (rc != PMIX_SUCCESS)
            throw error(fmt::format("PMIx_Init failed: {}: run the step with srun --mpi=pmix", PMIx_Error_string(rc)));
    }
    ~pmix_session() { PMIx_Finalize(nullptr, 0); }
    pmix_session(const pmix_session&) = delete;
    pmix_session& operator=(const pmix_session&) = delete;

    const pmix_proc_t& me() const { return me_; }

    std::uint32_t job_size()
    {
        pmix_proc_t all;
        PMIX_LOAD_PROCID(&all, me_.nspace, PMIX_RANK_WILDCARD);
        pmix_value_t* v = nullptr;
        check_pmix(PMIx_Get(&all, PMIX_JOB_SIZE, nullptr, 0, &v), "PMIx_Get(PMIX_JOB_SIZE)");
        std::uint32_t n = v->data.uint32;
        PMIX_VALUE_RELEASE(v);
        return n;
    }

    void put(const char* key, const void* data, std::size_t size)
    {
        pmix_value_t v;
        PMIX_VALUE_CONSTRUCT(&v);
        v.type = PMIX_BYTE_OBJECT;
        v.data.bo.bytes = static_cast<char*>(const_cast<void*>(data));
        v.data.bo.size = size;
        check_pmix(PMIx_Put(PMIX_GLOBAL, key, &v), "PMIx_Put");
    }

    // Fence with data collection; PMIX_ERR_TIMEOUT when a peer is missing.
    pmix_status_t fence(std::chrono::seconds timeout)
    {
        check_pmix(PMIx_Commit(), "PMIx_Commit");
        pmix_proc_t all;
        PMIX_LOAD_PROCID(&all, me_.nspace, PMIX_RANK_WILDCARD);
        pmix_info_t info[2];
        bool yes = true;
        int secs = static_cast<int>(timeout.count());
        PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
        PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &secs, PMIX_INT);
        pmix_status_t rc = PMIx_Fence(&all, 1, info, 2);
        PMIX_INFO_DESTRUCT(&info[0]);
        PMIX_INFO_DESTRUCT(&info[1]);
        return rc;
    }

    // A peer's value; std::nullopt when it has none (within a second).
    std::optional<std::vector<std::uint8_t>> get_bytes(std::uint32_t rank, const char* key)
    {
        pmix_proc_t peer;
        PMIX_LOAD_PROCID(&peer, me_.nspace, rank);
        pmix_info_t info;
        int secs = 1;
        PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &secs, PMIX_INT);
        pmix_value_t* v = nullptr;
        pmix_status_t rc = PMIx_Get(&peer, key, &info, 1, &v);
        PMIX_INFO_DESTRUCT(&info);
        if (rc != PMIX_SUCCESS || !v) return std::nullopt;
        std::optional<std::vector<std::uint8_t>> out;
        if (v->type == PMIX_BYTE_OBJECT)
            out.emplace(reinterpret_cast<std::uint8_t*>(v->data.bo.bytes),
                        reinterpret_cast<std::uint8_t*>(v->data.bo.bytes) + v->data.bo.size);
        PMIX_VALUE_RELEASE(v);
        return out;
    }

    std::optional<std::string> hostname(std::uint32_t rank)
    {
        pmix_proc_t peer;
        PMIX_LOAD_PROCID(&peer, me_.nspace, rank);
        pmix_value_t* v = nullptr;
        if (PMIx_Get(&peer, PMIX_HOSTNAME, nullptr, 0, &v) != PMIX_SUCCESS || !v) return std::nullopt;
        std::optional<std::string> out;
        if (v->type == PMIX_STRING && v->data.string) out = v->data.string;
        PMIX_VALUE_RELEASE(v);
        return out;
    }

private:
    pmix_proc_t me_{};
};

using transport::connections;

// A worker's first words to a PS listening at its static host:port: who it
// is and its ucp_worker address (the payload, in the same message).
struct hello_frame {
    std::uint32_t magic = 0x70737462;  // "pstb"
    std::uint32_t worker_index = 0;
    std::uint64_t address_bytes = 0;
};

// What each rank publishes: its role and index, then its UCX address.
struct published {
    std::uint8_t role;
    std::uint8_t pad[3];
    std::uint32_t index;
};

connections connect_pmix(const job& j, transport::engine& w, std::chrono::seconds timeout)
{
    pmix_session pmix;
    const std::uint32_t size = pmix.job_size();
    if (size != static_cast<std::uint32_t>(j.num_ps + j.num_workers))
        throw error(fmt::format("PMIx says the step has {} ranks but --ps={} --workers={} needs {}", size, j.num_ps,
                                j.num_workers, j.num_ps + j.num_workers));
    auto address = w.address();
    std::vector<std::uint8_t> blob(sizeof(published) + address.size());
    published me{static_cast<std::uint8_t>(j.me.role == role::ps ? 0 : 1), {}, static_cast<std::uint32_t>(j.me.index)};
    std::memcpy(blob.data(), &me, sizeof me);
    std::memcpy(blob.data() + sizeof me, address.data(), address.size());
    pmix.put("pstrain.peer", blob.data(), blob.size());

    pmix_status_t rc = pmix.fence(timeout);
    // Who is everyone?  A missing rank is named by what the plugin's spec
    // says of that rank's place.
    std::vector<std::vector<std::uint8_t>> by_rank(size);
    std::vector<std::uint32_t> missing;
    for (std::uint32_t r = 0; r < size; ++r) {
        auto got = pmix.get_bytes(r, "pstrain.peer");
        if (!got || got->size() <= sizeof(published)) missing.push_back(r);
        else by_rank[r] = std::move(*got);
    }
    if (rc != PMIX_SUCCESS || !missing.empty()) {
        std::string names;
        for (auto r : missing) {
            auto host = pmix.hostname(r);
            names += fmt::format("{}rank {} ({})", names.empty() ? "" : ", ", r, host.value_or("?"));
        }
        throw error(fmt::format("bootstrap: the PMIx fence did not complete within {}s ({}); missing: {}", timeout.count(),
                                PMIx_Error_string(rc), names.empty() ? "unknown" : names));
    }

    connections c;
    const role peer_role = j.me.role == role::ps ? role::worker : role::ps;
    const int peers = peer_role == role::ps ? j.num_ps : j.num_workers;
    c.peers.resize(static_cast<std::size_t>(peers));
    c.fast.resize(static_cast<std::size_t>(peers));
    for (std::uint32_t r = 0; r < size; ++r) {
        published p;
        std::memcpy(&p, by_rank[r].data(), sizeof p);
        const role rr = p.role == 0 ? role::ps : role::worker;
        const auto& list = j.spec.tasks(rr);
        if (p.index >= list.size()) throw error(fmt::format("rank {} claims {} {} which the cluster spec does not have", r, role_name(rr), p.index));
        // PMIx's view of where the rank runs must agree with the plugin's spec.
        auto host = pmix.hostname(r);
        auto spec_host = split_host_port(list[p.index]).first;
        if (host && *host != spec_host)
            throw error(fmt::format("rank {} ({} {}) runs on {} but PSTRAIN_CLUSTER puts it on {}: the plugin's layout is wrong; report it with the srun line",
                                    r, role_name(rr), p.index, *host, spec_host));
        if (rr != peer_role) continue;
        std::span<const std::uint8_t> addr(by_rank[r].data() + sizeof p, by_rank[r].size() - sizeof p);
        c.peers[p.index] = transport::endpoint::to_address(w, addr, j.peer_name(rr, static_cast<int>(p.index)));
        c.fast[p.index] = transport::endpoint::to_address(w, addr, j.peer_name(rr, static_cast<int>(p.index)), false);
    }
    for (int i = 0; i < peers; ++i)
        if (!c.peers[static_cast<std::size_t>(i)])
            throw error(fmt::format("bootstrap: no rank published {}", j.peer_name(peer_role, i)));
    log::debug("bootstrap: connected to {} {} tasks through PMIx ({} ranks)", peers, role_name(peer_role), size);
    return c;
}

// ----------------------------------------------------------- static spec

connections connect_static_ps(const job& j, transport::engine& w, std::chrono::seconds timeout)
{
    connections c;
    auto [host, port] = split_host_port(j.spec.ps[static_cast<std::size_t>(j.me.index)]);
    c.listen = std::make_unique<transport::listener>(w, port);
    c.peers.resize(static_cast<std::size_t>(j.num_workers));
    const auto deadline = clock::now() + timeout;
    int connected = 0;
    std::vector<std::uint8_t> buffer(1 << 16);
    hello_frame hdr;
    while (connected < j.num_workers) {
        ucp_dt_iov_t iov[2] = {{&hdr, sizeof hdr}, {buffer.data(), buffer.size()}};  // lives until r is done
        auto r = w.recv(transport::make_tag(transport::bootstrap_channel, 0), transport::tag_channel_mask, iov);
        bool got = w.wait_until(
            [&] {
                auto& pending = c.listen->pending();
                for (auto* req : pending) c.accepted.push_back(transport::endpoint::accept(w, req, "a connecting worker"));
                pending.clear();
                return r.done();
            },
            deadline);
        if (!got) {
            r.cancel(w.get());
            w.wait_until([&] { return r.done(); }, clock::now() + std::chrono::seconds(1));
            std::string names;
            for (int i = 0; i < j.num_workers; ++i)
                if (!c.peers[static_cast<std::size_t>(i)])
                    names += (names.empty() ? "" : ", ") + j.peer_name(role::worker, i);
            throw error(fmt::format("bootstrap: {} did not connect to {} within {}s: are they running with the same cluster spec?",
                                    names, j.spec.ps[static_cast<std::size_t>(j.me.index)], timeout.count()));
        }
        if (r.status() != UCS_OK) throw error(fmt::format("bootstrap: receiving a HELLO failed: {}", ucs_status_string(r.status())));
        if (hdr.magic != hello_frame{}.magic || hdr.worker_index >= static_cast<std::uint32_t>(j.num_workers) ||
            hdr.address_bytes == 0 || hdr.address_bytes > buffer.size() || r.length() != sizeof hdr + hdr.address_bytes) {
            log::warn("bootstrap: ignored a malformed hello on port {}: is another job using this port?", port);
            continue;
        }
        auto& slot = c.peers[hdr.worker_index];
        if (!slot) {
            slot = transport::endpoint::to_address(w, std::span(buffer.data(), hdr.address_bytes),
                                                   j.peer_name(role::worker, static_cast<int>(hdr.worker_index)));
            ++connected;
        }
    }
    return c;
}

connections connect_static_worker(const job& j, transport::engine& w, std::chrono::seconds timeout)
{
    connections c;
    c.peers.resize(static_cast<std::size_t>(j.num_ps));
    auto address = w.address();
    const auto deadline = clock::now() + timeout;
    for (int i = 0; i < j.num_ps; ++i) {
        auto [host, port] = split_host_port(j.spec.ps[static_cast<std::size_t>(i)]);
        std::string last_error = "no answer";
        for (;;) {
            auto ep = transport::endpoint::to_sockaddr(w, host, port, j.peer_name(role::ps, i));
            hello_frame hdr;
            hdr.worker_index = static_cast<std::uint32_t>(j.me.index);
            hdr.address_bytes = address.size();
            const ucp_dt_iov_t iov[2] = {{&hdr, sizeof hdr}, {address.data(), address.size()}};
            auto r = w.send(ep->get(), transport::make_tag(transport::bootstrap_channel, static_cast<std::uint32_t>(j.me.index)), iov);
            auto try_until = std::min(deadline, clock::now() + std::chrono::seconds(5));
            w.wait_until([&] { return r.done() || ep->failed(); }, try_until);
            if (r.done() && r.status() == UCS_OK && !ep->failed()) {
                c.peers[static_cast<std::size_t>(i)] = std::move(ep);
                break;
            }
            last_error = ep->failed() ? ucs_status_string(ep->failure())
                         : r.done()   ? ucs_status_string(r.status())
                                      : "no answer";
            r.cancel(w.get());
            ep->close(std::chrono::milliseconds(200));
            if (clock::now() >= deadline)
                throw error(fmt::format("bootstrap: {} at {}:{} did not answer within {}s ({}): is it running?",
                                        j.peer_name(role::ps, i), host, port, timeout.count(), last_error));
            std::this_thread::sleep_for(std::chrono::milliseconds(250));
        }
    }
    return c;
}

}  // namespace

std::unique_ptr<transport::ucx_transport> connect(const job& j, transport::progress_mode progress, std::chrono::seconds timeout)
{
    auto ctx = std::make_unique<transport::context>();
    auto eng = std::make_unique<transport::engine>(*ctx, progress);
    auto c = j.how == mode::pmix                ? connect_pmix(j, *eng, timeout)
             : j.me.role == role::ps ? connect_static_ps(j, *eng, timeout)
                                                : connect_static_worker(j, *eng, timeout);
    return std::make_unique<transport::ucx_transport>(std::move(ctx), std::move(eng), std::move(c),
                                                      static_cast<std::uint32_t>(j.me.index), peer_names(j));
}

}  // namespace pstrain::bootstrap
