// Address exchange and connection: PMIx (no fixed ports) or a static spec
// (a UCX listener at each PS's host:port, HELLO messages from workers).
#include "pstrain/error.hpp"
#include "common/log.hpp"
#include "library/bootstrap/job.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

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
class pmix_handle {
public:
    pmix_handle()
    {
        pmix_status_t rc = PMIx_Init(&me_, nullptr, 0);
        if (rc != PMIX_SUCCESS)
            throw error(fmt::format("PMIx_Init failed: {}: run the step with srun --mpi=pmix", PMIx_Error_string(rc)));
    }
    ~pmix_handle()
    {
        if (!abandoned_) PMIx_Finalize(nullptr, 0);
    }
    pmix_handle(const pmix_handle&) = delete;
    pmix_handle& operator=(const pmix_handle&) = delete;

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
    // PMIx_Fence's own PMIX_TIMEOUT is not honoured by every server (Slurm
    // 22.05's mpi/pmix across nodes waited over 5 minutes for a rank that
    // never joined), so the wait is bounded here: the non-blocking fence,
    // and a deadline a few seconds past the timeout.  A fence given up on
    // may still call back later (its state is the callback's too), and the
    // handle is then abandoned(): no more PMIx calls, no PMIx_Finalize,
    // which would wait for that fence.
    pmix_status_t fence(std::chrono::seconds timeout)
    {
        check_pmix(PMIx_Commit(), "PMIx_Commit");
        auto wait = std::make_shared<fence_wait>(static_cast<int>(timeout.count()));
        pmix_proc_t all;
        PMIX_LOAD_PROCID(&all, me_.nspace, PMIX_RANK_WILDCARD);
        auto* callers_share = new std::shared_ptr<fence_wait>(wait);
        const pmix_status_t rc = PMIx_Fence_nb(&all, 1, wait->info, 2, &fence_done, callers_share);
        if (rc != PMIX_SUCCESS) {  // no callback comes: done at once (PMIX_OPERATION_SUCCEEDED), or refused
            delete callers_share;
            return rc == PMIX_OPERATION_SUCCEEDED ? PMIX_SUCCESS : rc;
        }
        std::unique_lock lock(wait->mutex);
        if (!wait->ended.wait_for(lock, timeout + fence_grace, [&] { return wait->done; })) {
            abandoned_ = true;
            return PMIX_ERR_TIMEOUT;
        }
        return wait->status;
    }

    // A fence was given up on (fence()): the PMIx server may not answer.
    bool abandoned() const { return abandoned_; }

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
    // How long past its own timeout a fence is waited for.
    static constexpr std::chrono::seconds fence_grace{5};

    // A non-blocking fence's wait, shared by fence() and the callback.
    struct fence_wait {
        explicit fence_wait(int timeout_seconds)
        {
            bool yes = true;
            PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
            PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &timeout_seconds, PMIX_INT);
        }
        ~fence_wait()
        {
            PMIX_INFO_DESTRUCT(&info[0]);
            PMIX_INFO_DESTRUCT(&info[1]);
        }
        pmix_info_t info[2];
        std::mutex mutex;
        std::condition_variable ended;
        bool done = false;
        pmix_status_t status = PMIX_SUCCESS;
    };

    static void fence_done(pmix_status_t status, void* data)
    {
        auto* share = static_cast<std::shared_ptr<fence_wait>*>(data);
        {
            std::lock_guard lock((*share)->mutex);
            (*share)->status = status;
            (*share)->done = true;
        }
        (*share)->ended.notify_all();
        delete share;
    }

    pmix_proc_t me_{};
    bool abandoned_ = false;
};

using ucx::connections;

// A PS's gate for `workers` workers (the job's, or its slots: job::slots).
ucx::gate::config gate_config(const job& j, const ucx::auth_key& key, int workers)
{
    ucx::gate::config g;
    g.key = key;
    g.ps_index = static_cast<std::uint32_t>(j.me.index);
    g.num_workers = static_cast<std::size_t>(workers);
    g.worker_name = [&j](std::size_t i) { return j.peer_name(role::worker, static_cast<int>(i)); };
    return g;
}

// The handshake over the endpoints PMIx's addresses gave: a PS challenges
// every worker; a worker answers every PS.
void authenticate_pmix(const job& j, ucx::engine& w, const ucx::auth_key& key, connections& c,
                       std::chrono::seconds timeout)
{
    const auto deadline = clock::now() + timeout;
    c.tokens.resize(c.peers.size());
    if (j.me.role == role::ps) {
        ucx::gate gate(w, gate_config(j, key, j.num_workers));
        for (std::size_t i = 0; i < c.peers.size(); ++i) gate.challenge(i, c.peers[i]->get());
        w.wait_until(
            [&] {
                gate.poll();
                return gate.complete();
            },
            deadline);
        if (!gate.complete()) {
            std::string names;
            for (const auto& m : gate.missing()) names += (names.empty() ? "" : ", ") + m;
            throw error(fmt::format("bootstrap: no handshake within {}s with {}", timeout.count(), names));
        }
        c.tokens = gate.tokens();
        return;
    }
    for (std::size_t p = 0; p < c.peers.size(); ++p) {
        auto name = j.peer_name(role::ps, static_cast<int>(p));
        auto& ep = *c.peers[p];
        auto s = ucx::answer_challenge(w, ep.get(), key, static_cast<std::uint32_t>(p),
                                       static_cast<std::uint32_t>(j.me.index), {}, deadline, deadline, name,
                                       [&] { return ep.failed(); });
        if (!s)
            throw error(
                fmt::format("bootstrap: {} did not start the handshake within {}s{}", name, timeout.count(),
                            ep.failed() ? fmt::format(" (connection lost: {})", ucs_status_string(ep.failure())) : ""));
        c.tokens[p] = *s;
    }
}

}  // namespace

// A start_vote: under PMIx the PMIx handle stays open for its fence, with
// every rank's name.
struct start_vote::impl {
    std::unique_ptr<pmix_handle> pmix;  // none: a static spec
    std::vector<std::string> names;     // by rank
    std::size_t me = 0, chief = 0;
};

namespace {

// A PS's listener for workers that join later (connect(): `rejoin`);
// none, said once, when UCX cannot listen here.
std::unique_ptr<ucx::listener> rejoin_listener(const job& j, ucx::engine& w)
{
    try {
        return std::make_unique<ucx::listener>(w, 0);
    } catch (const error& e) {
        log::warn("a lost worker cannot join this step again: {} cannot listen for it ({})", j.name(), e.what());
        return nullptr;
    }
}

// Whether this process has joined its step through PMIx: a second
// bootstrap's fence waits for peers that joined the first and never join
// it, so it is refused instead.
std::atomic<bool> joined_by_pmix{false};

connections connect_pmix(const job& j, ucx::engine& w, std::chrono::seconds timeout, start_vote::impl* vote,
                         bool rejoin, join_info* join)
{
    if (joined_by_pmix.exchange(true))
        throw error(fmt::format("{} bootstrapped once already in this process (it joined its step, or failed to): a "
                                "second bootstrap would wait for peers that never join it: keep the first "
                                "connection (pstrain.init() returns the same context however often it is called)",
                                j.name()));
    auto handle = std::make_unique<pmix_handle>();
    auto& pmix = *handle;
    const std::uint32_t size = pmix.job_size();
    if (size != static_cast<std::uint32_t>(j.num_ps + j.num_workers))
        throw error(fmt::format("PMIx says the step has {} ranks but --ps={} --workers={} needs {}", size, j.num_ps,
                                j.num_workers, j.num_ps + j.num_workers));
    const auto blob = published_peer(j.me, w.address());
    pmix.put("pstrain.peer", blob.data(), blob.size());
    auto door = rejoin && j.me.role == role::ps ? rejoin_listener(j, w) : nullptr;
    if (door) {
        const auto port = static_cast<std::uint16_t>(door->port());
        pmix.put("pstrain.listen", &port, sizeof port);
    }
    // The step's key: made by rank 0, read by the step's ranks only (PMIx
    // serves a namespace's data to its own processes).
    if (pmix.me().rank == 0) {
        auto key = ucx::random_key();
        pmix.put("pstrain.key", key.data(), key.size());
    }

    pmix_status_t rc = pmix.fence(timeout);
    if (pmix.abandoned()) {
        throw error(
            fmt::format("bootstrap: the PMIx fence did not complete within {}s, and the PMIx server did not end "
                        "it: a task of the step never joined it (one that exited, is stuck before it "
                        "starts, or runs another program): see the other tasks' lines",
                        timeout.count()));
    }
    // Who is everyone?  A missing rank is named by what the plugin's spec
    // says of that rank's place.
    std::vector<pmix_rank> by_rank(size);
    std::vector<std::uint32_t> missing;
    for (std::uint32_t r = 0; r < size; ++r) {
        auto got = pmix.get_bytes(r, "pstrain.peer");
        if (!got || !holds_peer(*got)) missing.push_back(r);
        else by_rank[r].published = std::move(*got);
    }
    if (rc != PMIX_SUCCESS || !missing.empty()) {
        std::string names;
        for (auto r : missing) {
            auto host = pmix.hostname(r);
            names += fmt::format("{}rank {} ({})", names.empty() ? "" : ", ", r, host.value_or("?"));
        }
        throw error(fmt::format("bootstrap: the PMIx fence did not complete within {}s ({}); missing: {}",
                                timeout.count(), PMIx_Error_string(rc), names.empty() ? "unknown" : names));
    }

    auto key_bytes = pmix.get_bytes(0, "pstrain.key");
    if (!key_bytes || key_bytes->size() != ucx::auth_key{}.size())
        throw error(
            "bootstrap: rank 0 did not publish the step's key through PMIx: are all ranks the same pstrain version?");
    ucx::auth_key key;
    std::copy(key_bytes->begin(), key_bytes->end(), key.begin());

    connections c;
    const role peer_role = j.me.role == role::ps ? role::worker : role::ps;
    const int peers = peer_role == role::ps ? j.num_ps : j.num_workers;
    c.peers.resize(static_cast<std::size_t>(peers));
    c.fast.resize(static_cast<std::size_t>(peers));
    for (std::uint32_t r = 0; r < size; ++r) by_rank[r].host = pmix.hostname(r);
    auto ranks = place_ranks(j, by_rank);
    for (std::uint32_t r = 0; r < size; ++r) {
        const auto& t = ranks.tasks[r];
        if (t.role != peer_role) continue;
        const auto i = static_cast<std::size_t>(t.index);
        c.peers[i] = ucx::endpoint::to_address(w, ranks.addresses[r], ranks.names[r]);
        c.fast[i] = ucx::endpoint::to_address(w, ranks.addresses[r], ranks.names[r], false);
    }
    for (int i = 0; i < peers; ++i)
        if (!c.peers[static_cast<std::size_t>(i)])
            throw error(fmt::format("bootstrap: no rank published {}", j.peer_name(peer_role, i)));
    authenticate_pmix(j, w, key, c, timeout);
    if (door) {
        c.listen = std::move(door);
        c.door = std::make_unique<ucx::gate>(w, gate_config(j, key, j.slots()));
        c.door->admit_all();
    }
    if (rejoin && join) {  // the caller decides who writes the join file
        join->ps.assign(static_cast<std::size_t>(j.num_ps), "");
        join->num_workers = j.slots();
        join->key = key;
        for (std::uint32_t r = 0; r < size; ++r) {
            const auto& t = ranks.tasks[r];
            if (t.role != role::ps) continue;
            const auto port = pmix.get_bytes(r, "pstrain.listen");
            if (!port || port->size() != sizeof(std::uint16_t)) {
                join->ps.clear();  // one PS does not listen: nobody can join
                break;
            }
            std::uint16_t p = 0;
            std::memcpy(&p, port->data(), sizeof p);
            join->ps[static_cast<std::size_t>(t.index)] =
                fmt::format("{}:{}", split_host_port(j.spec.ps[static_cast<std::size_t>(t.index)]).first, p);
        }
    }
    log::debug("bootstrap: connected to {} {} tasks through PMIx ({} ranks), each authenticated", peers,
               role_name(peer_role), size);
    if (vote) {
        vote->pmix = std::move(handle);
        vote->names = std::move(ranks.names);
        vote->me = pmix.me().rank;
        vote->chief = ranks.chief;
    }
    return c;
}

// ----------------------------------------------------------- static spec

// A PS of a static spec listens at its host:port; each worker connects,
// answers the challenge and gives its address; the gate stays open after.
connections connect_static_ps(const job& j, ucx::engine& w, const ucx::auth_key& key, std::chrono::seconds timeout)
{
    connections c;
    auto [host, port] = split_host_port(j.spec.ps[static_cast<std::size_t>(j.me.index)]);
    c.listen = std::make_unique<ucx::listener>(w, port);
    c.door = std::make_unique<ucx::gate>(w, gate_config(j, key, j.slots()));
    c.door->admit_from(static_cast<std::size_t>(j.num_workers));  // the slots of workers that join later
    const auto deadline = clock::now() + timeout;
    bool all = w.wait_until(
        [&] {
            c.door->accept(*c.listen);
            c.door->poll();
            return c.door->complete();
        },
        deadline);
    if (!all) {
        std::string names;
        for (const auto& m : c.door->missing()) names += (names.empty() ? "" : ", ") + m;
        throw error(
            fmt::format("bootstrap: {} did not connect to {} within {}s: are they running with the same cluster spec?",
                        names, j.spec.ps[static_cast<std::size_t>(j.me.index)], timeout.count()));
    }
    c.peers = c.door->take_peers();
    c.tokens = c.door->tokens();
    return c;
}

connections connect_static_worker(const job& j, ucx::engine& w, const ucx::auth_key& key, std::chrono::seconds timeout)
{
    connections c;
    c.peers.resize(static_cast<std::size_t>(j.num_ps));
    c.tokens.resize(static_cast<std::size_t>(j.num_ps));
    auto address = w.address();
    const auto deadline = clock::now() + timeout;
    for (int i = 0; i < j.num_ps; ++i) {
        auto [host, port] = split_host_port(j.spec.ps[static_cast<std::size_t>(i)]);
        std::string last_error = "no answer";
        for (;;) {
            auto ep = ucx::endpoint::to_sockaddr(w, host, port, j.peer_name(role::ps, i));
            auto try_until = std::min(deadline, clock::now() + std::chrono::seconds(5));
            auto name = fmt::format("{} at {}:{}", j.peer_name(role::ps, i), host, port);
            auto s = ucx::answer_challenge(w, ep->get(), key, static_cast<std::uint32_t>(i),
                                           static_cast<std::uint32_t>(j.me.index), address, try_until, deadline, name,
                                           [&] { return ep->failed(); });
            if (s) {
                c.peers[static_cast<std::size_t>(i)] = std::move(ep);
                c.tokens[static_cast<std::size_t>(i)] = *s;
                break;
            }
            last_error = ep->failed() ? ucs_status_string(ep->failure()) : "no answer";
            // Forced: nothing of ours is owed to a peer that never answered,
            // and a flush over a connection UCX never finished setting up
            // (another program listening on the port) stays pending until
            // ucp_worker_destroy, which aborts on it (UCX 1.13).
            ep->close(std::chrono::milliseconds(200), true);
            if (clock::now() >= deadline)
                throw error(fmt::format("bootstrap: {} at {}:{} did not answer within {}s ({}): is it running, and "
                                        "is that its port?",
                                        j.peer_name(role::ps, i), host, port, timeout.count(), last_error));
            std::this_thread::sleep_for(std::chrono::milliseconds(250));
        }
    }
    return c;
}

}  // namespace

std::string resolve_address(const std::string& host)
{
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res) return {};
    char text[INET_ADDRSTRLEN] = {};
    const auto* in = reinterpret_cast<const sockaddr_in*>(res->ai_addr);
    std::string out = inet_ntop(AF_INET, &in->sin_addr, text, sizeof text) ? text : "";
    freeaddrinfo(res);
    return out;
}

start_vote::start_vote() : impl_(std::make_unique<impl>()) {}
start_vote::~start_vote() = default;

void start_vote::cast(const std::string& my_error, std::chrono::seconds timeout)
{
    if (!impl_->pmix) {
        if (!my_error.empty()) throw error(my_error);
        return;
    }
    auto& pmix = *impl_->pmix;
    // A prefix, so that "no error" is a value too.
    constexpr std::string_view mark = "start:";
    const std::string mine = std::string(mark) + my_error;
    pmix.put("pstrain.start", mine.data(), mine.size());
    const pmix_status_t rc = pmix.fence(timeout);
    if (rc != PMIX_SUCCESS) {
        if (!my_error.empty()) throw error(my_error);
        throw error(fmt::format("start-up: not every task of the step got ready within {}s ({}): see the other tasks' "
                                "lines, or raise --stall-timeout when loading the data takes longer",
                                timeout.count(), PMIx_Error_string(rc)));
    }
    std::vector<std::string> errors(impl_->names.size());
    for (std::size_t r = 0; r < errors.size(); ++r) {
        if (r == impl_->me) {
            errors[r] = my_error;
            continue;
        }
        const auto got = pmix.get_bytes(static_cast<std::uint32_t>(r), "pstrain.start");
        if (got && got->size() >= mark.size())
            errors[r].assign(got->begin() + static_cast<std::ptrdiff_t>(mark.size()), got->end());
    }
    // Done with PMIx: a task disconnected from its node's PMIx server may
    // die later without Slurm's mpi/pmix ending the whole step for it (its
    // error handler kills the step when a connected client is lost, which
    // took down every task of a node's neighbours with one killed worker).
    impl_->pmix.reset();
    const auto v = judge_start(errors, impl_->names, impl_->me, impl_->chief);
    if (v.what == start_verdict::action::report) throw error(my_error);
    if (v.what == start_verdict::action::stop) throw stopped_by_peer(v.line);
}

std::unique_ptr<ucx::ucx_transport> connect(const job& j, ucx::progress_mode progress, std::chrono::seconds timeout,
                                            ucx::heartbeat_config beats, start_vote* vote, bool rejoin, join_info* join)
{
    auto ctx = std::make_unique<ucx::context>();
    auto eng = std::make_unique<ucx::engine>(*ctx, progress);
    ucx::auth_key key{};
    if (j.how == mode::static_spec) {
        const bool plugin = std::getenv("PSTRAIN_ROLE") != nullptr;
        if (j.key) key = *j.key;
        else if (!plugin || j.is_chief())
            // Under the SPANK plugin without PMIx (srun --mpi=none): PMIx
            // would make the auth key; the chief says it for the step's tasks.
            log::warn(
                "peer authentication is off: a static cluster spec ({}) has no key; {}give every task the same "
                "PSTRAIN_AUTH_KEY (`export PSTRAIN_AUTH_KEY=$(openssl rand -hex 32)`) so that only they can connect",
                j.source,
                plugin ? "run the step with srun --mpi=pmix, which turns it on (a key "
                         "per step, nothing to set), or "
                       : "");
    }
    auto c = j.how == mode::pmix     ? connect_pmix(j, *eng, timeout, vote ? &vote->state() : nullptr, rejoin, join)
             : j.me.role == role::ps ? connect_static_ps(j, *eng, key, timeout)
                                     : connect_static_worker(j, *eng, key, timeout);
    // The peers' addresses, for the message that names a silent one.
    std::vector<std::string> addresses;
    const role peer_role = j.me.role == role::ps ? role::worker : role::ps;
    for (const auto& hp : j.spec.tasks(peer_role)) addresses.push_back(resolve_address(split_host_port(hp).first));
    return std::make_unique<ucx::ucx_transport>(std::move(ctx), std::move(eng), std::move(c),
                                                static_cast<std::uint32_t>(j.me.index), peer_names(j), beats,
                                                std::move(addresses));
}

}  // namespace pstrain::bootstrap
