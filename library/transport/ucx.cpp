#include "library/transport/ucx.hpp"

#include "pstrain/error.hpp"
#include "common/log.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include <fmt/format.h>

namespace pstrain::ucx {

using clock = std::chrono::steady_clock;

void check(ucs_status_t status, const char* call)
{
    if (status != UCS_OK) throw error(fmt::format("{} failed: {}", call, ucs_status_string(status)));
}

// ------------------------------------------------------------------ context

context::context(std::chrono::milliseconds keepalive)
{
    ucp_config_t* config = nullptr;
    check(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
    // Peer failures must be seen within seconds, not UCX's default minute.
    if (!std::getenv("UCX_KEEPALIVE_INTERVAL")) {
        auto text = fmt::format("{}ms", keepalive.count());
        ucp_config_modify(config, "KEEPALIVE_INTERVAL", text.c_str());
    }
    // A static spec's PS listens at a fixed port: the next job must be able
    // to listen there at once, though connections of the last one the PS
    // closed first are still in TIME_WAIT (SO_REUSEADDR; a port another
    // process listens on is still refused).
    if (!std::getenv("UCX_CM_REUSEADDR") && !std::getenv("UCX_TCP_CM_REUSEADDR"))
        ucp_config_modify(config, "CM_REUSEADDR", "y");
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
    params.mt_workers_shared = 0;
    ucs_status_t status = ucp_init(&params, config, &h_);
    ucp_config_release(config);
    check(status, "ucp_init");
}

context::~context()
{
    if (h_) ucp_cleanup(h_);
}

// ------------------------------------------------------------------ request

request::request(ucs_status_ptr_t p, const char* what, ucp_worker_h owner) : owner_(owner), what_(what)
{
    if (UCS_PTR_IS_ERR(p)) {
        status_ = UCS_PTR_STATUS(p);
        complete_ = true;
    } else if (p == nullptr) {
        status_ = UCS_OK;
        complete_ = true;
    } else {
        req_ = p;
        complete_ = false;
    }
}

request::~request()
{
    if (!req_) return;
    if (owner_ && ucp_request_check_status(req_) == UCS_INPROGRESS) ucp_request_cancel(owner_, req_);
    ucp_request_free(req_);
}

request::request(request&& o) noexcept
    : req_(o.req_), owner_(o.owner_), status_(o.status_), complete_(o.complete_), what_(o.what_), length_(o.length_)
{
    o.req_ = nullptr;
    o.complete_ = true;
}

request& request::operator=(request&& o) noexcept
{
    if (this != &o) {
        if (req_) {
            if (owner_ && ucp_request_check_status(req_) == UCS_INPROGRESS) ucp_request_cancel(owner_, req_);
            ucp_request_free(req_);
        }
        req_ = o.req_;
        owner_ = o.owner_;
        status_ = o.status_;
        complete_ = o.complete_;
        what_ = o.what_;
        length_ = o.length_;
        o.req_ = nullptr;
        o.complete_ = true;
    }
    return *this;
}

bool request::done()
{
    if (complete_) return true;
    ucs_status_t s;
    if (owner_) {  // a tag receive: its length too
        ucp_tag_recv_info_t info{};
        s = ucp_tag_recv_request_test(req_, &info);
        if (s == UCS_OK) length_ = info.length;
    } else {
        s = ucp_request_check_status(req_);
    }
    if (s == UCS_INPROGRESS) return false;
    status_ = s;
    complete_ = true;
    ucp_request_free(req_);
    req_ = nullptr;
    return true;
}

void request::cancel(ucp_worker_h w)
{
    if (!complete_ && req_) ucp_request_cancel(w, req_);
}

// ------------------------------------------------------------------- engine

engine::engine(context& ctx, progress_mode mode) : ctx_(ctx), mode_(mode)
{
    ucp_worker_params_t params{};
    params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    params.thread_mode = UCS_THREAD_MODE_SINGLE;
    check(ucp_worker_create(ctx.get(), &params, &h_), "ucp_worker_create");
    if (mode_ == progress_mode::event) {
        check(ucp_worker_get_efd(h_, &efd_), "ucp_worker_get_efd");
        loadavg_fd_ = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);  // -1: never crowded, as before
    }
}

bool engine::crowded() const
{
    // "0.61 0.93 1.37 3/250 17890": the fourth field's first number is the
    // scheduling entities runnable now, this task among them.
    char text[128];
    if (loadavg_fd_ < 0) return false;
    const ssize_t n = ::pread(loadavg_fd_, text, sizeof text - 1, 0);
    if (n <= 0) return false;
    text[n] = '\0';
    long running = 0;
    if (std::sscanf(text, "%*s %*s %*s %ld/", &running) != 1) return false;
    static const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
    return cpus > 0 && running > cpus;
}

namespace {

// Messages that arrived and that no receive matched (a peer's heartbeat or
// request sent while this task was failing) are received into `sink` and
// dropped: ucp_worker_destroy would otherwise warn of each ("unexpected
// tag-receive descriptor ... was not matched") after a shutdown that is in
// order.  Bounded: a large message whose sender is gone is left.
void discard_unexpected(ucp_worker_h h, std::vector<std::uint8_t>& sink) noexcept
{
    const auto deadline = clock::now() + std::chrono::milliseconds(200);
    try {
        while (clock::now() < deadline) {
            ucp_tag_recv_info_t info{};
            ucp_tag_message_h msg = ucp_tag_probe_nb(h, 0, 0, 1, &info);
            if (!msg) {
                if (ucp_worker_progress(h) == 0) return;  // nothing more on its way
                continue;
            }
            if (sink.size() < info.length) sink.resize(info.length);
            ucp_request_param_t param{};
            void* r = ucp_tag_msg_recv_nbx(h, sink.data(), info.length, msg, &param);
            if (r == nullptr || UCS_PTR_IS_ERR(r)) continue;
            while (ucp_request_check_status(r) == UCS_INPROGRESS && clock::now() < deadline) ucp_worker_progress(h);
            ucp_request_free(r);
        }
    } catch (...) {}
}

}  // namespace

engine::~engine()
{
    if (loadavg_fd_ >= 0) ::close(loadavg_fd_);
    if (!h_) return;
    std::vector<std::uint8_t> sink;  // outlives the worker: a receive left in flight may write it until then
    discard_unexpected(h_, sink);
    ucp_worker_destroy(h_);
}

std::vector<std::uint8_t> engine::address() const
{
    ucp_address_t* addr = nullptr;
    std::size_t len = 0;
    check(ucp_worker_get_address(h_, &addr, &len), "ucp_worker_get_address");
    std::vector<std::uint8_t> out(reinterpret_cast<std::uint8_t*>(addr), reinterpret_cast<std::uint8_t*>(addr) + len);
    ucp_worker_release_address(h_, addr);
    return out;
}

void engine::progress()
{
    while (ucp_worker_progress(h_) != 0) {}
}

bool engine::wait_until(const std::function<bool()>& pred, clock::time_point deadline)
{
    const auto start = clock::now();
    bool waited = false;
    for (;;) {
        progress();
        if (pred()) {
            if (waited) spin_.waited(std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - start));
            return true;
        }
        waited = true;
        auto now = clock::now();
        if (now >= deadline) return false;
        if (mode_ == progress_mode::spin) {
            ++spins_;
            continue;
        }
        // The spin yields after each empty progress: on a core of its own
        // sched_yield returns at once, while on a node with more tasks than
        // cores the task this one waits for (its PS, a worker it shares the
        // node with) runs first.  With spin_policy's no spin for long waits,
        // three tasks on two cores train 1.3-1.45x faster than with a spin
        // of at least 50 us that kept the core (bench/README.md).  A yield
        // that lost the core for a while ends the spin: see spin_policy.
        bool got = false;
        if (const auto spin_for = spin_.window(now); spin_for.count() > 0) {
            ++spins_;
            for (const auto spin_end = now + spin_for; now < spin_end;) {
                if (ucp_worker_progress(h_) != 0) {
                    got = true;
                    break;
                }
                const auto before = clock::now();
                ::sched_yield();
                now = clock::now();
                if (spin_.yielded(now - before, now, [this] { return crowded(); }))
                    break;  // the core went to another task: sleep
            }
        }
        if (got) continue;
        ucs_status_t s = ucp_worker_arm(h_);
        if (s == UCS_ERR_BUSY) continue;  // events arrived meanwhile
        check(s, "ucp_worker_arm");
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
        // Bounded sleeps: keepalive and error callbacks need progress too.
        int timeout_ms = static_cast<int>(std::clamp<long long>(left, 0, 100));
        pollfd pfd{efd_, POLLIN, 0};
        ++sleeps_;
        ::poll(&pfd, 1, timeout_ms);
    }
}

request engine::send(ucp_ep_h ep, std::uint64_t tag, std::span<const ucp_dt_iov_t> iov)
{
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    param.datatype = ucp_dt_make_iov();
    return request(ucp_tag_send_nbx(ep, iov.data(), iov.size(), tag, &param), "send");
}

request engine::recv(std::uint64_t tag, std::uint64_t mask, std::span<ucp_dt_iov_t> iov)
{
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.datatype = ucp_dt_make_iov();
    return request(ucp_tag_recv_nbx(h_, iov.data(), iov.size(), tag, mask, &param), "receive", h_);
}

request engine::send(ucp_ep_h ep, std::uint64_t tag, const void* buffer, std::size_t bytes)
{
    ucp_request_param_t param{};
    return request(ucp_tag_send_nbx(ep, buffer, bytes, tag, &param), "send");
}

request engine::recv(std::uint64_t tag, std::uint64_t mask, void* buffer, std::size_t bytes)
{
    // Always a request, also when the message was already here: its
    // length is read from it (UCX 1.13 leaves recv_info's length 0 on an
    // immediate completion).
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    return request(ucp_tag_recv_nbx(h_, buffer, bytes, tag, mask, &param), "receive", h_);
}

void engine::wait(request& r, const std::string& peer, clock::time_point deadline)
{
    if (!wait_until([&] { return r.done(); }, deadline)) {
        r.cancel(h_);
        wait_until([&] { return r.done(); }, clock::now() + std::chrono::seconds(1));
        throw error(fmt::format("no answer from {} in time", peer));
    }
    if (r.status() != UCS_OK)
        throw error(fmt::format("lost {}: {} failed: {}", peer, r.what(), ucs_status_string(r.status())));
}

// ----------------------------------------------------------------- endpoint

void endpoint::on_error(void* arg, ucp_ep_h, ucs_status_t status)
{
    auto* record = static_cast<endpoint_failure*>(arg);
    record->failed = true;
    record->status = status;
}

std::unique_ptr<endpoint> endpoint::create(engine& w, ucp_ep_params_t& params, std::string peer, bool detect_failure)
{
    auto ep = std::make_unique<endpoint>();
    ep->engine_ = &w;
    ep->peer_ = std::move(peer);
    ep->failure_ = &w.failures_.emplace_back();
    params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.err_mode = detect_failure ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    params.err_handler.cb = &endpoint::on_error;
    params.err_handler.arg = ep->failure_;
    ucs_status_t s = ucp_ep_create(w.get(), &params, &ep->h_);
    if (s != UCS_OK)
        throw error(fmt::format("connecting to {}: ucp_ep_create failed: {}", ep->peer_, ucs_status_string(s)));
    return ep;
}

std::unique_ptr<endpoint> endpoint::to_address(engine& w, std::span<const std::uint8_t> address, std::string peer,
                                               bool detect_failure)
{
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    params.address = reinterpret_cast<const ucp_address_t*>(address.data());
    return create(w, params, std::move(peer), detect_failure);
}

std::unique_ptr<endpoint> endpoint::to_sockaddr(engine& w, const std::string& host, int port, std::string peer)
{
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (rc != 0 || !res) throw error(fmt::format("cannot resolve {} ({}): {}", host, peer, gai_strerror(rc)));
    sockaddr_storage storage{};
    std::memcpy(&storage, res->ai_addr, res->ai_addrlen);
    socklen_t len = res->ai_addrlen;
    freeaddrinfo(res);
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
    params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&storage);
    params.sockaddr.addrlen = len;
    return create(w, params, std::move(peer));
}

std::unique_ptr<endpoint> endpoint::accept(engine& w, ucp_conn_request_h request, std::string peer)
{
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST;
    params.conn_request = request;
    return create(w, params, std::move(peer));
}

void endpoint::close(std::chrono::milliseconds timeout, bool force)
{
    if (!h_) return;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = failure_->failed || force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    request r(ucp_ep_close_nbx(h_, &param), "close");
    h_ = nullptr;
    // A graceful close that does not finish in time is left to UCX, which
    // releases it with the worker.
    if (engine_) engine_->wait_until([&] { return r.done(); }, clock::now() + timeout);
}

endpoint::~endpoint()
{
    if (h_) {
        try {
            close(std::chrono::milliseconds(200), true);
        } catch (...) {}
    }
}

// ----------------------------------------------------------------- listener

void listener::on_connect(ucp_conn_request_h request, void* arg)
{
    static_cast<listener*>(arg)->pending_.push_back(request);
}

listener::listener(engine& w, int port)
{
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = INADDR_ANY;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    ucp_listener_params_t params{};
    params.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
    params.sockaddr.addrlen = sizeof addr;
    params.conn_handler.cb = &listener::on_connect;
    params.conn_handler.arg = this;
    ucs_status_t s = ucp_listener_create(w.get(), &params, &h_);
    if (s != UCS_OK)
        throw error(fmt::format("cannot listen on port {}: ucp_listener_create failed: {} (is the port in use?)", port,
                                ucs_status_string(s)));
}

int listener::port() const
{
    ucp_listener_attr_t a{};
    a.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    check(ucp_listener_query(h_, &a), "ucp_listener_query");
    return ntohs(reinterpret_cast<const sockaddr_in*>(&a.sockaddr)->sin_port);
}

listener::~listener()
{
    if (h_) ucp_listener_destroy(h_);
}

// ----------------------------------------------------------- mapped memory

mapped_memory::mapped_memory(context& ctx, std::size_t bytes) : ctx_(ctx), bytes_(bytes)
{
    ucp_mem_map_params_t params{};
    params.field_mask =
        UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    params.address = nullptr;
    params.length = bytes ? bytes : 1;
    params.flags = UCP_MEM_MAP_ALLOCATE;
    check(ucp_mem_map(ctx.get(), &params, &memh_), "ucp_mem_map");
    ucp_mem_attr_t attr{};
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
    ucs_status_t s = ucp_mem_query(memh_, &attr);
    if (s != UCS_OK) {
        ucp_mem_unmap(ctx.get(), memh_);
        check(s, "ucp_mem_query");
    }
    address_ = attr.address;
    std::memset(address_, 0, bytes);
}

mapped_memory::~mapped_memory()
{
    if (memh_) ucp_mem_unmap(ctx_.get(), memh_);
}

std::vector<std::uint8_t> mapped_memory::packed_rkey() const
{
    void* buffer = nullptr;
    std::size_t size = 0;
    check(ucp_rkey_pack(ctx_.get(), memh_, &buffer, &size), "ucp_rkey_pack");
    std::vector<std::uint8_t> out(static_cast<std::uint8_t*>(buffer), static_cast<std::uint8_t*>(buffer) + size);
    ucp_rkey_buffer_release(buffer);
    return out;
}

remote_key::remote_key(ucp_ep_h ep, std::span<const std::uint8_t> packed) : before_(shared_mappings())
{
    check(ucp_ep_rkey_unpack(ep, packed.data(), &h_), "ucp_ep_rkey_unpack");
}

remote_key::~remote_key()
{
    if (h_) ucp_rkey_destroy(h_);
}

void* remote_key::local_pointer(std::uint64_t remote_address) const
{
    void* local = nullptr;
    return ucp_rkey_ptr(h_, remote_address, &local) == UCS_OK ? local : nullptr;
}

void* remote_key::local_range(std::uint64_t remote_address, std::size_t bytes) const
{
    void* here = local_pointer(remote_address);
    if (!here) return nullptr;
    // What the rkey mapped: shared mappings that were not there before the
    // unpack (ucp maps a peer's segment when it unpacks its rkey, or at the
    // first ucp_rkey_ptr).
    std::vector<std::pair<std::uintptr_t, std::uintptr_t>> mapped;
    for (const auto& m : shared_mappings())
        if (std::find(before_.begin(), before_.end(), m) == before_.end()) mapped.push_back(m);
    if (mapped.empty()) return nullptr;
    const auto at = reinterpret_cast<std::uintptr_t>(here);
    for (const auto& [begin, end] : mapped)
        if (at >= begin && at <= end && bytes <= end - at) return here;
    throw error(fmt::format("{} bytes at {:#x} are not inside the memory its rkey maps here", bytes, remote_address));
}

std::vector<std::pair<std::uintptr_t, std::uintptr_t>> shared_mappings()
{
    std::vector<std::pair<std::uintptr_t, std::uintptr_t>> out;
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
        // "begin-end perms offset dev inode path": perms end in 's' for a shared mapping.
        unsigned long long begin = 0, end = 0;
        char perms[5] = {};
        if (std::sscanf(line.c_str(), "%llx-%llx %4s", &begin, &end, perms) == 3 && perms[3] == 's')
            out.emplace_back(static_cast<std::uintptr_t>(begin), static_cast<std::uintptr_t>(end));
    }
    return out;
}

}  // namespace pstrain::ucx
